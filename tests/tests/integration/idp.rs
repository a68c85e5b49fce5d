//! The embedded identity provider, used as a client would: client_credentials,
//! the PKCE login flow, refresh tokens, keys that survive a restart and rotate.

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use lakehost_tests::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

async fn metadata_status(app: &TestApp, token: &str) -> StatusCode {
    app.get(ORG_HOST, SECURITY_METADATA, Some(token)).await.0
}

fn claims_of(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

fn kid_of(token: &str) -> String {
    jsonwebtoken::decode_header(token).unwrap().kid.unwrap()
}

#[tokio::test]
async fn discovery_names_the_realm() {
    let app = spawn_app().await;
    let doc = app
        .realm_document("demo", ".well-known/openid-configuration")
        .await;
    assert_eq!(doc["issuer"], app.issuer("demo"));
    assert_eq!(
        doc["jwks_uri"],
        format!("{}/protocol/openid-connect/certs", app.issuer("demo"))
    );
    assert_eq!(
        doc["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    let (status, _) = read(
        app.http
            .get(format!(
                "{}/realms/nope/.well-known/openid-configuration",
                app.base
            ))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn client_credentials_tokens_work_for_every_demo_role() {
    let app = spawn_app().await;
    for (client, role) in [
        ("demo-admin", "ZoneAdmin"),
        ("demo-all-analyst", "AllServiceClientAnalyst"),
        ("demo-own-analyst", "OwnServiceClientAnalyst"),
        ("demo-own-consumer", "OwnServiceClientConsumer"),
        ("demo-public", "PublicConsumer"),
    ] {
        let token = app.client_token("demo", client).await;
        let claims = claims_of(&token);
        assert_eq!(claims["resource_access"]["svc_api"]["roles"][0], role);
        assert_eq!(claims["iss"], app.issuer("demo"));
        assert_eq!(
            metadata_status(&app, &token).await,
            StatusCode::OK,
            "{client}"
        );
    }
    // HTTP Basic client authentication, and a narrowed scope.
    let response = app
        .http
        .post(format!(
            "{}/realms/demo/protocol/openid-connect/token",
            app.base
        ))
        .basic_auth("demo-admin", Some("demo-admin-secret"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "query:read"),
        ])
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        claims_of(body["access_token"].as_str().unwrap())["scope"],
        "query:read"
    );
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 300);
}

#[tokio::test]
async fn token_endpoint_errors() {
    let app = spawn_app().await;
    let (status, body) = app
        .token_request(
            "demo",
            &[
                ("grant_type", "client_credentials"),
                ("client_id", "demo-admin"),
                ("client_secret", "wrong"),
            ],
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("invalid_client"))
    );
    let (status, body) = app
        .token_request("demo", &[("grant_type", "password")])
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("unsupported_grant_type"))
    );
    // A client of another realm.
    let (status, _) = app
        .token_request(
            "demo",
            &[
                ("grant_type", "client_credentials"),
                ("client_id", "other-admin"),
                ("client_secret", "other-admin-secret"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

struct Pkce {
    verifier: String,
    challenge: String,
}

fn pkce() -> Pkce {
    let verifier = format!("{}{}", uuid_like(), uuid_like());
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    Pkce {
        verifier,
        challenge,
    }
}

const REDIRECT: &str = "http://localhost:8765/callback";

/// Opens the login page and signs in; returns the redirect Location.
async fn login(
    app: &TestApp,
    challenge: &str,
    method: &str,
    password: &str,
) -> (StatusCode, String) {
    let auth = format!("{}/realms/demo/protocol/openid-connect/auth", app.base);
    let params = [
        ("client_id", "svc_cli"),
        ("response_type", "code"),
        ("scope", "openid"),
        ("redirect_uri", REDIRECT),
        ("state", "st4te"),
        ("code_challenge", challenge),
        ("code_challenge_method", method),
    ];
    let page = app.http.get(&auth).query(&params).send().await.unwrap();
    let page_status = page.status();
    if page_status != StatusCode::OK {
        let location = page
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_string());
        return (page_status, location.unwrap_or(page.text().await.unwrap()));
    }
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"name="password""#), "{html}");
    let mut form: Vec<(&str, &str)> = params.to_vec();
    form.push(("username", "demo"));
    form.push(("password", password));
    let response = app.http.post(&auth).form(&form).send().await.unwrap();
    let status = response.status();
    let location = response
        .headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, location)
}

fn query_param(location: &str, name: &str) -> Option<String> {
    url::Url::parse(location)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.to_string())
}

async fn exchange(app: &TestApp, code: &str, verifier: &str) -> (StatusCode, Value) {
    app.token_request(
        "demo",
        &[
            ("grant_type", "authorization_code"),
            ("client_id", "svc_cli"),
            ("code", code),
            ("code_verifier", verifier),
            ("redirect_uri", REDIRECT),
        ],
    )
    .await
}

#[tokio::test]
async fn pkce_login_refresh_end_to_end() {
    let app = spawn_app().await;
    let pkce = pkce();
    let (status, location) = login(&app, &pkce.challenge, "S256", "demo").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{location}");
    assert!(location.starts_with(REDIRECT), "{location}");
    assert_eq!(query_param(&location, "state").as_deref(), Some("st4te"));
    let code = query_param(&location, "code").unwrap();

    let (status, tokens) = exchange(&app, &code, &pkce.verifier).await;
    assert_eq!(status, StatusCode::OK, "{tokens}");
    let access = tokens["access_token"].as_str().unwrap();
    let refresh = tokens["refresh_token"].as_str().unwrap();
    assert!(tokens["id_token"].is_string());
    assert_eq!(claims_of(access)["preferred_username"], "demo");
    assert_eq!(metadata_status(&app, access).await, StatusCode::OK);

    // The code is single use.
    let (status, body) = exchange(&app, &code, &pkce.verifier).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_grant"))
    );

    // Neither the refresh token nor the ID token is accepted as an access token.
    assert_eq!(
        metadata_status(&app, refresh).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        metadata_status(&app, tokens["id_token"].as_str().unwrap()).await,
        StatusCode::UNAUTHORIZED
    );

    // Refresh, as the CLI does about 30 s before expiry.
    let (status, renewed) = app
        .token_request(
            "demo",
            &[
                ("grant_type", "refresh_token"),
                ("client_id", "svc_cli"),
                ("refresh_token", refresh),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{renewed}");
    let renewed_access = renewed["access_token"].as_str().unwrap();
    assert_ne!(renewed_access, access);
    assert_eq!(metadata_status(&app, renewed_access).await, StatusCode::OK);

    // A refresh token presented by another client, or tampered, is refused.
    let (status, _) = app
        .token_request(
            "demo",
            &[
                ("grant_type", "refresh_token"),
                ("client_id", "demo-admin"),
                ("refresh_token", refresh),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = app
        .token_request(
            "demo",
            &[
                ("grant_type", "refresh_token"),
                ("client_id", "svc_cli"),
                ("refresh_token", &format!("{refresh}x")),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_wrong_code_verifier_fails() {
    let app = spawn_app().await;
    let pkce_a = pkce();
    let (_, location) = login(&app, &pkce_a.challenge, "S256", "demo").await;
    let code = query_param(&location, "code").unwrap();
    let other = pkce();
    let (status, body) = exchange(&app, &code, &other.verifier).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_grant"))
    );
    // The failed attempt burnt the code.
    let (status, _) = exchange(&app, &code, &pkce_a.verifier).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn login_refusals() {
    let app = spawn_app().await;
    let pkce = pkce();
    let (status, page) = login(&app, &pkce.challenge, "S256", "wrong").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{page}");
    // plain PKCE is refused, back to the (valid) redirect address with an error.
    let (status, location) = login(&app, &pkce.verifier[..43], "plain", "demo").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        query_param(&location, "error").as_deref(),
        Some("invalid_request")
    );
    // A redirect to anything but a loopback address is an error page, no redirect.
    let response = app
        .http
        .get(format!(
            "{}/realms/demo/protocol/openid-connect/auth",
            app.base
        ))
        .query(&[
            ("client_id", "svc_cli"),
            ("response_type", "code"),
            ("redirect_uri", "http://evil.example:8765/cb"),
            ("code_challenge", pkce.challenge.as_str()),
            ("code_challenge_method", "S256"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn signing_keys_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = lakehost::clock::ManualClock::new();
    // No pinned key for `demo`: the server generates and stores its own.
    let path = lakehost::idp::key_file_path(dir.path(), "demo");
    assert!(!path.exists());
    let first = spawn_in_fresh(dir.path(), clock.clone()).await;
    let token = first.client_token("demo", "demo-admin").await;
    assert_eq!(metadata_status(&first, &token).await, StatusCode::OK);
    assert!(path.exists());
    drop(first);
    let second = spawn_in_fresh(dir.path(), clock).await;
    let again = second.client_token("demo", "demo-admin").await;
    assert_eq!(kid_of(&token), kid_of(&again), "same key after restart");
}

/// A server with only the demo realm, whose key it makes itself on first start.
async fn spawn_in_fresh(dir: &std::path::Path, clock: lakehost::clock::ManualClock) -> TestApp {
    let mut config = test_config(dir);
    config.orgs.retain(|o| o.name == "demo");
    config.idp.clients.retain(|c| c.org == "demo");
    start(config, clock).await
}

#[tokio::test]
async fn rotated_keys_are_published_and_accepted_after_one_refetch() {
    let app = spawn_app_with(|c| c.idp.key_rotation_hours = 24).await;
    let idp = app.idp.clone().unwrap();
    let before = app.client_token("demo", "demo-admin").await;
    assert_eq!(metadata_status(&app, &before).await, StatusCode::OK);
    let fetched = idp.jwks_requests("demo");

    app.clock.advance(chrono::Duration::hours(25));
    let during_lead = app.client_token("demo", "demo-admin").await;
    assert_eq!(
        kid_of(&during_lead),
        kid_of(&before),
        "published, not yet signing"
    );
    app.clock.advance(chrono::Duration::hours(1));
    let after = app.client_token("demo", "demo-admin").await;
    assert_ne!(kid_of(&before), kid_of(&after), "a new key signs");
    let jwks = app
        .realm_document("demo", "protocol/openid-connect/certs")
        .await;
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(
        kids,
        vec![kid_of(&after), kid_of(&before)],
        "both keys published, newest first"
    );

    let fetched_now = idp.jwks_requests("demo");
    assert_eq!(metadata_status(&app, &after).await, StatusCode::OK);
    assert_eq!(
        idp.jwks_requests("demo"),
        fetched_now + 1,
        "exactly one refetch"
    );
    assert!(fetched_now > fetched);
}
