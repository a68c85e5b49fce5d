//! Two replicas' providers on one store (SQLite, a `ManualClock`), driven
//! through their routes as a balancer would send requests: a token or a
//! code from one is good on the other, a rotation publishes before it signs
//! and makes one key however the replicas race, old keys go after their
//! tokens, codes are single use and expire.

use std::{path::Path, sync::Arc};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::Duration;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, jwk::JwkSet};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use tower::ServiceExt as _;
use url::Url;

use super::{Idp, generate_key, key_file_path, login::code_hash, router, write_key_file};
use crate::{
    clock::{Clock as _, ManualClock},
    config::Config,
    store::Store,
};

const HOUR: i64 = 3600;
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K9uhyUzaO8ohjh8mYx3QhXr0nk";
const REDIRECT: &str = "http://localhost:8400/cb";

/// One replica: its provider and the routes a balancer sends requests to.
struct Replica {
    routes: Router,
}

/// Two replicas on one SQLite store, each with its own data folder, both
/// naming the balancer as issuer; rotation every 24 h, published 1 h ahead,
/// refresh tokens living 2 h.
struct Fleet {
    _dir: tempfile::TempDir,
    store: Store,
    clock: ManualClock,
    a: Replica,
    b: Replica,
}

fn config(data_dir: &Path) -> Config {
    let mut config = Config::default();
    config.storage.data_dir = data_dir.to_path_buf();
    config.idp.key_rotation_hours = 24;
    config.idp.key_publish_lead_s = HOUR as u64;
    config.idp.refresh_token_lifetime_s = 2 * HOUR as u64;
    config
}

async fn replica(data_dir: &Path, store: &Store, clock: &ManualClock) -> Replica {
    let idp = Idp::new(
        Arc::new(config(data_dir)),
        Url::parse("http://balancer.example:8080").unwrap(),
        Arc::new(clock.clone()),
        store.clone(),
    )
    .await
    .expect("the provider starts");
    Replica {
        routes: router(Arc::new(idp)),
    }
}

impl Fleet {
    async fn new() -> Self {
        Self::with_files(|_| {}).await
    }

    /// `before` runs on the data folders' root before the replicas start.
    async fn with_files(before: impl FnOnce(&Path)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        before(dir.path());
        let store = Store::open_sqlite(&dir.path().join("shared.db"))
            .await
            .unwrap();
        let clock = ManualClock::new();
        let a = replica(&dir.path().join("a"), &store, &clock).await;
        let b = replica(&dir.path().join("b"), &store, &clock).await;
        Fleet {
            _dir: dir,
            store,
            clock,
            a,
            b,
        }
    }

    fn advance(&self, seconds: i64) {
        self.clock.advance(Duration::seconds(seconds));
    }
}

impl Replica {
    async fn send(&self, request: Request<Body>) -> (StatusCode, Vec<u8>, Option<String>) {
        let response = self.routes.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let location = response
            .headers()
            .get(header::LOCATION)
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, body.to_vec(), location)
    }

    async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> (StatusCode, Value) {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let request = Request::post(format!("/realms/demo/protocol/openid-connect/{path}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(body))
            .unwrap();
        let (status, body, _) = self.send(request).await;
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    async fn jwks(&self) -> JwkSet {
        let request = Request::get("/realms/demo/protocol/openid-connect/certs")
            .body(Body::empty())
            .unwrap();
        let (status, body, _) = self.send(request).await;
        assert_eq!(status, StatusCode::OK);
        serde_json::from_slice(&body).unwrap()
    }

    async fn kids(&self) -> Vec<String> {
        self.jwks()
            .await
            .keys
            .iter()
            .map(|k| k.common.key_id.clone().unwrap())
            .collect()
    }

    /// A client-credentials access token of `demo-admin`.
    async fn client_token(&self) -> String {
        let (status, body) = self
            .post_form(
                "token",
                &[
                    ("grant_type", "client_credentials"),
                    ("client_id", "demo-admin"),
                    ("client_secret", "demo-admin-secret"),
                ],
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["access_token"].as_str().unwrap().to_string()
    }

    /// Logs the demo user in (PKCE S256): the code the redirect carries.
    async fn login(&self) -> String {
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(VERIFIER.as_bytes()));
        let (status, _, location) = self
            .send(
                Request::post("/realms/demo/protocol/openid-connect/auth")
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(Body::from(
                        url::form_urlencoded::Serializer::new(String::new())
                            .extend_pairs([
                                ("client_id", "svc_cli"),
                                ("response_type", "code"),
                                ("redirect_uri", REDIRECT),
                                ("scope", "openid"),
                                ("state", "s1"),
                                ("code_challenge", challenge.as_str()),
                                ("code_challenge_method", "S256"),
                                ("username", "demo"),
                                ("password", "demo"),
                            ])
                            .finish(),
                    ))
                    .unwrap(),
            )
            .await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        let location = Url::parse(&location.unwrap()).unwrap();
        let code = location.query_pairs().find(|(k, _)| k == "code").unwrap();
        code.1.into_owned()
    }

    async fn exchange(&self, code: &str) -> (StatusCode, Value) {
        self.post_form(
            "token",
            &[
                ("grant_type", "authorization_code"),
                ("client_id", "svc_cli"),
                ("code", code),
                ("code_verifier", VERIFIER),
                ("redirect_uri", REDIRECT),
            ],
        )
        .await
    }
}

fn kid_of(token: &str) -> String {
    jsonwebtoken::decode_header(token).unwrap().kid.unwrap()
}

/// The token's claims when `jwks` (a validator's copy) verifies it.
fn verified(token: &str, jwks: &JwkSet) -> Option<Value> {
    let jwk = jwks.find(&kid_of(token))?;
    let key = DecodingKey::from_jwk(jwk).unwrap();
    let mut validation = Validation::new(Algorithm::RS256);
    validation.validate_aud = false;
    validation.validate_exp = false;
    jsonwebtoken::decode::<Value>(token, &key, &validation)
        .ok()
        .map(|t| t.claims)
}

#[tokio::test]
async fn a_token_from_one_replica_verifies_against_the_others_jwks() {
    let fleet = Fleet::new().await;
    let from_a = fleet.a.client_token().await;
    let from_b = fleet.b.client_token().await;
    let (jwks_a, jwks_b) = (fleet.a.jwks().await, fleet.b.jwks().await);
    let claims = verified(&from_a, &jwks_b).expect("B publishes the key A signs with");
    assert!(verified(&from_b, &jwks_a).is_some());
    assert_eq!(kid_of(&from_a), kid_of(&from_b), "one key signs on both");
    // Both name the balancer as issuer.
    assert_eq!(claims["iss"], "http://balancer.example:8080/realms/demo");
    assert_eq!(claims["iss"], verified(&from_b, &jwks_b).unwrap()["iss"]);
}

#[tokio::test]
async fn a_new_key_is_published_an_hour_before_it_signs() {
    let fleet = Fleet::new().await;
    let first = kid_of(&fleet.a.client_token().await);
    fleet.advance(23 * HOUR - 1);
    assert_eq!(fleet.b.kids().await, vec![first.clone()], "not yet due");

    fleet.advance(1);
    // Due: the next look (B's JWKS here) makes the key, both publish it,
    // neither signs with it yet.
    let cached_by_a_validator = fleet.b.jwks().await;
    let kids = fleet.a.kids().await;
    assert_eq!(kids.len(), 2);
    let second = kids[0].clone();
    assert_eq!(kids[1], first);
    assert_eq!(fleet.b.kids().await, kids);
    assert_eq!(kid_of(&fleet.a.client_token().await), first);
    fleet.advance(HOUR - 1);
    assert_eq!(kid_of(&fleet.b.client_token().await), first);

    fleet.advance(1);
    let token = fleet.a.client_token().await;
    assert_eq!(kid_of(&token), second, "the new key signs after its lead");
    assert_eq!(kid_of(&fleet.b.client_token().await), second);
    assert!(
        verified(&token, &cached_by_a_validator).is_some(),
        "a JWKS fetched when the key was made verifies its tokens"
    );
    assert_eq!(fleet.store.idp_keys("demo").await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_racing_a_rotation_make_one_key() {
    let fleet = Fleet::new().await;
    fleet.advance(23 * HOUR);
    let (a, b, c, d) = tokio::join!(
        fleet.a.kids(),
        fleet.b.kids(),
        fleet.a.client_token(),
        fleet.b.client_token()
    );
    assert_eq!(kid_of(&c), kid_of(&d));
    let rows = fleet.store.idp_keys("demo").await.unwrap();
    let generations: Vec<i64> = rows.iter().map(|r| r.generation).collect();
    assert_eq!(generations, vec![1, 2], "exactly one new key");
    let published = fleet.a.kids().await;
    assert_eq!(published, fleet.b.kids().await);
    for seen in [a, b] {
        assert!(seen.iter().all(|kid| published.contains(kid)), "{seen:?}");
    }
}

#[tokio::test]
async fn an_old_key_goes_once_every_token_it_signed_has_expired() {
    let fleet = Fleet::new().await;
    let first = kid_of(&fleet.a.client_token().await);
    fleet.advance(23 * HOUR);
    let second = fleet.b.kids().await[0].clone();
    fleet.advance(HOUR);
    // The first key signed until now; refresh tokens live 2 h.
    assert_eq!(kid_of(&fleet.a.client_token().await), second);
    fleet.advance(2 * HOUR - 1);
    assert_eq!(fleet.b.kids().await, vec![second.clone(), first]);
    fleet.advance(1);
    assert_eq!(fleet.b.kids().await, vec![second.clone()], "pruned");
    assert_eq!(fleet.a.kids().await, vec![second.clone()]);
    let rows = fleet.store.idp_keys("demo").await.unwrap();
    assert_eq!(rows.len(), 1, "deleted from the store");
    // Each replica's mirror file follows the store.
    let mirror = super::read_key_file(&key_file_path(&fleet._dir.path().join("a"), "demo"))
        .unwrap()
        .unwrap();
    assert_eq!(mirror.len(), 1);
    assert_eq!(mirror[0].kid, second);
}

#[tokio::test]
async fn a_code_from_one_replica_is_exchanged_once_at_another() {
    let fleet = Fleet::new().await;
    let code = fleet.a.login().await;
    let (status, body) = fleet.b.exchange(&code).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let access = body["access_token"].as_str().unwrap();
    let claims = verified(access, &fleet.a.jwks().await).unwrap();
    assert_eq!(claims["preferred_username"], "demo");
    assert!(body["refresh_token"].is_string() && body["id_token"].is_string());

    for replica in [&fleet.b, &fleet.a] {
        let (status, body) = replica.exchange(&code).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"], "invalid_grant");
        assert_eq!(body["error_description"], "Code not valid");
    }
}

#[tokio::test]
async fn an_expired_code_is_refused_and_deleted_by_the_sweep() {
    let fleet = Fleet::new().await;
    let late = fleet.a.login().await;
    fleet.advance(61);
    let (status, body) = fleet.b.exchange(&late).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error_description"], "Code not valid");

    // A code left unexchanged is deleted by the retention sweep's bounded
    // delete (`retention/rows.rs`); a fresh one stays.
    let left = fleet.a.login().await;
    fleet.advance(61);
    let fresh = fleet.b.login().await;
    let now = fleet.clock.now().timestamp_micros();
    assert_eq!(
        fleet
            .store
            .delete_expired_idp_codes(now, 100)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        fleet.store.take_idp_code(&code_hash(&left)).await.unwrap(),
        None
    );
    assert_eq!(fleet.a.exchange(&fresh).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_realm_takes_its_key_file_on_first_start_only() {
    let pinned = generate_key(chrono::Utc::now() - Duration::hours(1)).unwrap();
    let written = pinned.clone();
    let fleet = Fleet::with_files(move |root| {
        write_key_file(&key_file_path(&root.join("a"), "demo"), &[written]).unwrap();
    })
    .await;
    assert_eq!(kid_of(&fleet.a.client_token().await), pinned.kid);
    assert_eq!(kid_of(&fleet.b.client_token().await), pinned.kid);
    assert_eq!(fleet.b.kids().await, vec![pinned.kid.clone()]);
    // B had no file: it now mirrors the store's keys.
    let mirror = super::read_key_file(&key_file_path(&fleet._dir.path().join("b"), "demo"))
        .unwrap()
        .unwrap();
    assert_eq!(mirror[0].kid, pinned.kid);

    // A third replica with another file on the same store does not replace them.
    let other = tempfile::tempdir().unwrap();
    let stranger = generate_key(fleet.clock.now()).unwrap();
    write_key_file(&key_file_path(other.path(), "demo"), &[stranger]).unwrap();
    let c = replica(other.path(), &fleet.store, &fleet.clock).await;
    assert_eq!(kid_of(&c.client_token().await), pinned.kid);
}
