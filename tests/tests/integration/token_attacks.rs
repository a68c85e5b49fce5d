//! Token attacks that need more than one token (the cases of one token each
//! are data: `tests/corpus/tokens/`, run by `corpus.rs`): a token issued by
//! another realm, the clock moving past a token's exp, unknown kids and the
//! JWKS refetch cooldown, an oversized token, malformed Authorization
//! headers. Each gets 401 {"message":"Unauthorized"}, never a 5xx.

use jsonwebtoken::{Algorithm, Header};
use lakehost_tests::*;

async fn assert_refused(app: &TestApp, token: &str, what: &str) {
    let (status, body) = app.get(ORG_HOST, SECURITY_METADATA, Some(token)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {body}");
    assert_eq!(body, unauthorized(), "{what}");
}

async fn assert_accepted(app: &TestApp, token: &str, what: &str) {
    let (status, body) = app.get(ORG_HOST, SECURITY_METADATA, Some(token)).await;
    assert_eq!(status, StatusCode::OK, "{what}: {body}");
}

#[tokio::test]
async fn time_is_the_injected_clocks() {
    let app = spawn_app().await;
    // Time is the injected clock's: moving it expires a token.
    let token = app.sign("demo", &app.valid_claims("demo"));
    assert_accepted(&app, &token, "fresh").await;
    app.clock.advance(chrono::Duration::seconds(331));
    assert_refused(&app, &token, "after the clock moved past exp + leeway").await;
}

#[tokio::test]
async fn another_realms_token_is_refused() {
    let app = spawn_app().await;
    // Properly issued by realm `other`, sent to demo's API.
    let other = app.client_token("other", "other-admin").await;
    assert_refused(&app, &other, "other realm's token").await;
    // Demo's token on other's API.
    let demo = app.sign("demo", &app.valid_claims("demo"));
    let (status, _) = app
        .get(OTHER_ORG_HOST, SECURITY_METADATA, Some(&demo))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // And other's token on other's API works.
    let (status, body) = app
        .get(OTHER_ORG_HOST, SECURITY_METADATA, Some(&other))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn unknown_kid_refetches_at_most_once_per_cooldown() {
    let app = spawn_app().await;
    let idp = app.idp.clone().unwrap();
    assert_accepted(
        &app,
        &app.sign("demo", &app.valid_claims("demo")),
        "warm up",
    )
    .await;
    let fetched = idp.jwks_requests("demo");
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("no-such-kid".into());
    let token = app.sign_with(&app.realm_key("demo"), header, &app.valid_claims("demo"));
    for _ in 0..5 {
        assert_refused(&app, &token, "unknown kid").await;
    }
    // Within the cooldown that first fetch was already recent: no refetch at all.
    assert_eq!(idp.jwks_requests("demo"), fetched);
    app.clock.advance(chrono::Duration::seconds(31));
    for _ in 0..5 {
        assert_refused(&app, &token, "unknown kid after cooldown").await;
    }
    assert_eq!(
        idp.jwks_requests("demo"),
        fetched + 1,
        "one refetch per cooldown"
    );
}

#[tokio::test]
async fn malformed_authorization_headers_are_refused() {
    let app = spawn_app().await;
    let token = app.sign("demo", &app.valid_claims("demo"));
    for header in [
        String::new(),
        "Bearer".into(),
        "Bearer ".into(),
        format!("Basic {token}"),
        format!("Bearer  {token}"),
        format!("Bearer {token} extra"),
        format!("Token {token}"),
        token.clone(),
    ] {
        let (status, body) = app.metadata_with_header(&header).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{header:?}");
        assert_eq!(body, unauthorized());
    }
    let (status, body) = app.get(ORG_HOST, SECURITY_METADATA, None).await;
    assert_eq!(
        (status, body),
        (StatusCode::UNAUTHORIZED, unauthorized()),
        "no header"
    );
    // The scheme is case-insensitive (RFC 7235).
    let (status, _) = app.metadata_with_header(&format!("bearer {token}")).await;
    assert_eq!(status, StatusCode::OK);
}
