//! The token attack list of the foundation issue: every forged, stale or
//! misdirected token gets 401 {"message":"Unauthorized"}, never a 5xx.

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use lakehost_tests::*;
use serde_json::{Value, json};

fn b64(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap())
}

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
async fn a_valid_token_is_accepted() {
    let app = spawn_app().await;
    let token = app.sign("demo", &app.valid_claims("demo"));
    assert_accepted(&app, &token, "baseline").await;
    // aud as an array containing the API's client.
    let mut claims = app.valid_claims("demo");
    claims["aud"] = json!(["account", "svc_api"]);
    assert_accepted(&app, &app.sign("demo", &claims), "aud array").await;
}

#[tokio::test]
async fn forged_algorithms_are_refused() {
    let app = spawn_app().await;
    let claims = app.valid_claims("demo");
    let kid = app.realm_key("demo").kid;

    // alg none, with and without a signature part.
    let header = json!({"alg": "none", "typ": "JWT", "kid": kid});
    let unsigned = format!("{}.{}", b64(&header), b64(&claims));
    assert_refused(&app, &format!("{unsigned}."), "alg none, empty signature").await;
    assert_refused(
        &app,
        &format!("{unsigned}.AAAA"),
        "alg none, junk signature",
    )
    .await;

    // HS256 keyed with the realm's RSA public key (the classic confusion attack).
    let jwks = app
        .realm_document("demo", "protocol/openid-connect/certs")
        .await;
    let public_n = jwks["keys"][0]["n"].as_str().unwrap().to_string();
    let public_pem = {
        use rsa::pkcs8::{DecodePrivateKey as _, EncodePublicKey as _, LineEnding};
        let private =
            rsa::RsaPrivateKey::from_pkcs8_pem(&app.realm_key("demo").private_key_pem).unwrap();
        rsa::RsaPublicKey::from(&private)
            .to_public_key_pem(LineEnding::LF)
            .unwrap()
    };
    for secret in [public_pem.as_bytes(), public_n.as_bytes()] {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(kid.clone());
        let token =
            jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(secret)).unwrap();
        assert_refused(&app, &token, "HS256 with the public key").await;
    }

    // Valid RSA signatures, but algorithms outside the allow-list (RS256 only).
    for alg in [
        Algorithm::RS384,
        Algorithm::RS512,
        Algorithm::PS256,
        Algorithm::PS512,
    ] {
        let token = app.sign_with(&app.realm_key("demo"), Header::new(alg), &claims);
        assert_refused(&app, &token, &format!("{alg:?}")).await;
    }
    // ES256 from a key of the attacker's.
    let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.clone());
    let token = jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_ec_pem(ec.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap();
    assert_refused(&app, &token, "ES256").await;
}

#[tokio::test]
async fn time_claims_are_enforced_with_bounded_leeway() {
    let app = spawn_app().await;
    let now = app.now();
    let with = |name: &str, value: Value| {
        let mut claims = app.valid_claims("demo");
        claims[name] = value;
        app.sign("demo", &claims)
    };
    assert_refused(&app, &with("exp", json!(now - 31)), "expired past leeway").await;
    assert_accepted(&app, &with("exp", json!(now - 20)), "expired within leeway").await;
    assert_refused(&app, &with("nbf", json!(now + 60)), "nbf in the future").await;
    assert_accepted(&app, &with("nbf", json!(now + 20)), "nbf within leeway").await;
    assert_refused(
        &app,
        &with("exp", json!((now + 300).to_string())),
        "exp as string",
    )
    .await;
    assert_refused(&app, &with("nbf", json!(now.to_string())), "nbf as string").await;
    // A token good for years is refused (auth.max_token_lifetime_s, a day).
    assert_accepted(&app, &with("exp", json!(now + 86_400)), "a day ahead").await;
    assert_refused(
        &app,
        &with("exp", json!(now + 86_400 + 31)),
        "past a day and the leeway",
    )
    .await;
    assert_refused(&app, &with("exp", json!(2f64.powi(70))), "exp = 2^70").await;

    // Time is the injected clock's: moving it expires a token.
    let token = app.sign("demo", &app.valid_claims("demo"));
    assert_accepted(&app, &token, "fresh").await;
    app.clock.advance(chrono::Duration::seconds(331));
    assert_refused(&app, &token, "after the clock moved past exp + leeway").await;
}

#[tokio::test]
async fn registered_claims_are_required_and_exact() {
    let app = spawn_app().await;
    for claim in ["exp", "iss", "aud", "sub"] {
        let mut claims = app.valid_claims("demo");
        claims.as_object_mut().unwrap().remove(claim);
        assert_refused(
            &app,
            &app.sign("demo", &claims),
            &format!("{claim} missing"),
        )
        .await;
    }
    let issuer = app.issuer("demo");
    for iss in [
        format!("{issuer}/"),
        issuer.to_uppercase(),
        issuer.replace("demo", "Demo"),
        app.issuer("other"),
    ] {
        let mut claims = app.valid_claims("demo");
        claims["iss"] = json!(iss);
        assert_refused(&app, &app.sign("demo", &claims), &format!("iss {iss}")).await;
    }
    for aud in [
        json!("account"),
        json!(["account", "svc_cli"]),
        json!("svc_api_lab"),
    ] {
        let mut claims = app.valid_claims("demo");
        claims["aud"] = aud.clone();
        assert_refused(&app, &app.sign("demo", &claims), &format!("aud {aud}")).await;
    }
    // A refresh or ID token is not an access token.
    for typ in ["Refresh", "ID"] {
        let mut claims = app.valid_claims("demo");
        claims["typ"] = json!(typ);
        assert_refused(&app, &app.sign("demo", &claims), typ).await;
    }
}

#[tokio::test]
async fn another_realms_token_is_refused() {
    let app = spawn_app().await;
    // Properly issued by realm `other`, sent to demo's API.
    let other = app.client_token("other", "other-admin").await;
    assert_refused(&app, &other, "other realm's token").await;
    // Signed with other's key but claiming demo's issuer: unknown kid in demo.
    let forged = app.sign("other", &app.valid_claims("demo"));
    assert_refused(&app, &forged, "other realm's key").await;
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
async fn header_key_injection_is_refused() {
    let app = spawn_app().await;
    let claims = app.valid_claims("demo");
    let attacker = attacker_key();
    let attacker_jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(json!({
        "kty": "RSA", "kid": attacker.kid, "n": "AQAB", "e": "AQAB"
    }))
    .unwrap();

    // The attacker's key, announced in the header in every way a naive verifier trusts.
    let mut with_jku = Header::new(Algorithm::RS256);
    with_jku.jku = Some("http://127.0.0.1:1/jwks.json".into());
    let mut with_x5u = Header::new(Algorithm::RS256);
    with_x5u.x5u = Some("http://127.0.0.1:1/cert.pem".into());
    let mut with_jwk = Header::new(Algorithm::RS256);
    with_jwk.jwk = Some(attacker_jwk);
    for (what, header) in [("jku", with_jku), ("x5u", with_x5u), ("jwk", with_jwk)] {
        let token = app.sign_with(&attacker, header.clone(), &claims);
        assert_refused(&app, &token, &format!("{what} with attacker key")).await;
        // Even signed with the real key, a token carrying these headers is refused.
        let mut header = header;
        header.kid = None;
        let token = app.sign_with(&app.realm_key("demo"), header, &claims);
        assert_refused(&app, &token, &format!("{what} with the real key")).await;
    }
    // The attacker's signature under the realm's real kid.
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(app.realm_key("demo").kid);
    assert_refused(
        &app,
        &app.sign_with(&attacker, header, &claims),
        "real kid, wrong key",
    )
    .await;
}

#[tokio::test]
async fn tampered_and_malformed_tokens_are_refused() {
    let app = spawn_app().await;
    let token = app.sign("demo", &app.valid_claims("demo"));
    let parts: Vec<&str> = token.split('.').collect();

    let mut widened = app.valid_claims("demo");
    widened["service_client_id"] = json!("[0]");
    let tampered = format!("{}.{}.{}", parts[0], b64(&widened), parts[2]);
    assert_refused(&app, &tampered, "tampered payload").await;
    assert_refused(
        &app,
        &format!("{}.{}.", parts[0], parts[1]),
        "stripped signature",
    )
    .await;
    assert_refused(&app, &format!("{}.{}", parts[0], parts[1]), "two segments").await;
    assert_refused(&app, &format!("{token}.{}", parts[2]), "four segments").await;
    assert_refused(&app, "not-a-jwt", "one segment").await;

    // A 20 KiB token: refused before parsing (401), or by the HTTP layer (413/431).
    let mut huge = app.valid_claims("demo");
    huge["padding"] = json!("x".repeat(20 * 1024));
    let (status, _) = app
        .get(ORG_HOST, SECURITY_METADATA, Some(&app.sign("demo", &huge)))
        .await;
    assert!(
        [401, 413, 431].contains(&status.as_u16()),
        "20 KiB token got {status}"
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
