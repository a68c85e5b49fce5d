//! Helpers for the integration tests: start the real server on port 0 with a
//! temporary data directory and an injected clock, talk to it over HTTP with any
//! Host header, and mint tokens with the realm's real signing key (pinned by
//! writing the key file before start, the format `idp::keys` documents).
//!
//! Orgs of the test server: `demo` (zones `lab`, `ops`) and `other`.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, OnceLock},
};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use lakehost::{
    Application, Config,
    clock::{Clock as _, ManualClock},
    config::{IdpPrincipal, OrgConfig},
    idp::{Idp, StoredKey, generate_key, key_file_path, write_key_file},
};
use serde_json::{Value, json};

pub use reqwest::StatusCode;

/// One RSA key per org for the whole test binary (key generation is slow).
fn pinned_key(org: &str) -> StoredKey {
    static KEYS: OnceLock<BTreeMap<&'static str, StoredKey>> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        let at = chrono::Utc::now() - chrono::Duration::hours(1);
        ["demo", "other"]
            .into_iter()
            .map(|org| (org, generate_key(at).expect("RSA key generation")))
            .collect()
    });
    keys[org].clone()
}

/// A key the attacker owns (not in any JWKS).
pub fn attacker_key() -> StoredKey {
    static KEY: OnceLock<StoredKey> = OnceLock::new();
    KEY.get_or_init(|| generate_key(chrono::Utc::now()).expect("RSA key generation"))
        .clone()
}

pub struct TestApp {
    pub addr: SocketAddr,
    pub base: String,
    pub http: reqwest::Client,
    pub clock: ManualClock,
    pub idp: Option<Arc<Idp>>,
    pub data_dir: PathBuf,
    _dir: Option<tempfile::TempDir>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The test configuration: two orgs, the demo principals, a demo client in `other`.
pub fn test_config(data_dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.storage.data_dir = data_dir.to_path_buf();
    config.orgs[0].zones = vec!["lab".into(), "ops".into()];
    config.orgs.push(OrgConfig {
        name: "other".into(),
        zones: vec![],
        daily_run_schedule: "0 2 * * *".into(),
    });
    config.idp.clients.push(IdpPrincipal {
        org: "other".into(),
        client_id: Some("other-admin".into()),
        client_secret: Some("other-admin-secret".into()),
        username: None,
        password: None,
        service_clients: vec![0],
        roles: BTreeMap::from([("svc_api".into(), vec!["ZoneAdmin".into()])]),
        scopes: vec!["query:read".into()],
    });
    config
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// Starts the server with the test configuration changed by `adjust`.
pub async fn spawn_app_with(adjust: impl FnOnce(&mut Config)) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut app = spawn_in(dir.path().to_path_buf(), ManualClock::new(), adjust).await;
    app._dir = Some(dir);
    app
}

/// Starts the server on an existing data directory (for restart tests).
pub async fn spawn_in(
    data_dir: PathBuf,
    clock: ManualClock,
    adjust: impl FnOnce(&mut Config),
) -> TestApp {
    let mut config = test_config(&data_dir);
    adjust(&mut config);
    for org in ["demo", "other"] {
        let path = key_file_path(&data_dir, org);
        if !path.exists() {
            write_key_file(&path, &[pinned_key(org)]).expect("write key file");
        }
    }
    start(config, clock).await
}

/// Starts a server from a finished configuration, keys as they are on disk.
pub async fn start(config: Config, clock: ManualClock) -> TestApp {
    let data_dir = config.storage.data_dir.clone();
    let app = Application::build_with_clock(config, Arc::new(clock.clone()))
        .await
        .expect("server starts");
    let addr = app.local_addr();
    let idp = app.idp();
    let scheme = app.auth_url().scheme().to_string();
    let server = tokio::spawn(async move {
        let _ = app.run_until_stopped().await;
    });
    TestApp {
        addr,
        base: format!("{scheme}://127.0.0.1:{}", addr.port()),
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
        clock,
        idp,
        data_dir,
        _dir: None,
        server,
    }
}

/// Host names of the test server's APIs.
pub const ORG_HOST: &str = "demo.api.localhost";
pub const OTHER_ORG_HOST: &str = "other.api.localhost";

pub const SECURITY_METADATA: &str = "/v2/identity/security_metadata";

impl TestApp {
    pub fn issuer(&self, org: &str) -> String {
        format!("http://localhost:{}/realms/{org}", self.addr.port())
    }

    /// A request to `path` with the given Host header (port added).
    pub fn request(
        &self,
        method: reqwest::Method,
        host: &str,
        path: &str,
    ) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("Host", format!("{host}:{}", self.addr.port()))
    }

    pub async fn get(&self, host: &str, path: &str, token: Option<&str>) -> (StatusCode, Value) {
        let mut request = self.request(reqwest::Method::GET, host, path);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        read(request.send().await.expect("request sent")).await
    }

    /// GET security_metadata on the demo Org API with a raw Authorization value.
    pub async fn metadata_with_header(&self, authorization: &str) -> (StatusCode, Value) {
        let request = self
            .request(reqwest::Method::GET, ORG_HOST, SECURITY_METADATA)
            .header("Authorization", authorization);
        read(request.send().await.expect("request sent")).await
    }

    pub fn now(&self) -> i64 {
        self.clock.unix_seconds()
    }

    /// Claims of a valid Org API token of `org` (ZoneAdmin, `[1]`, every scope).
    pub fn valid_claims(&self, org: &str) -> Value {
        let now = self.now();
        json!({
            "iss": self.issuer(org),
            "aud": "svc_api",
            "sub": "user-1",
            "jti": uuid_like(),
            "iat": now,
            "exp": now + 300,
            "typ": "Bearer",
            "scope": "query:read query:write load:read load:write",
            "resource_access": { "svc_api": { "roles": ["ZoneAdmin"] } },
            "service_client_id": "[1]",
        })
    }

    /// Signs claims with the realm's real key, RS256, the key's kid.
    pub fn sign(&self, org: &str, claims: &Value) -> String {
        self.sign_with(&pinned_key(org), Header::new(Algorithm::RS256), claims)
    }

    /// Signs with any stored key and header (kid set to the key's unless present).
    pub fn sign_with(&self, key: &StoredKey, mut header: Header, claims: &Value) -> String {
        if header.kid.is_none() {
            header.kid = Some(key.kid.clone());
        }
        let encoding = EncodingKey::from_rsa_pem(key.private_key_pem.as_bytes()).unwrap();
        jsonwebtoken::encode(&header, claims, &encoding).unwrap()
    }

    /// The kid and public PEM of a realm's pinned key.
    pub fn realm_key(&self, org: &str) -> StoredKey {
        pinned_key(org)
    }

    /// A demo Org API token with these roles and `service_client_id` claim text.
    pub fn token_for(&self, roles: &[&str], service_client_claim: &str) -> String {
        let mut claims = self.valid_claims("demo");
        claims["resource_access"] = json!({ "svc_api": { "roles": roles } });
        claims["service_client_id"] = json!(service_client_claim);
        self.sign("demo", &claims)
    }

    /// POST form to a realm's token endpoint; returns status and JSON body.
    pub async fn token_request(&self, org: &str, form: &[(&str, &str)]) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!(
                "{}/realms/{org}/protocol/openid-connect/token",
                self.base
            ))
            .form(form)
            .send()
            .await
            .unwrap();
        read(response).await
    }

    /// A JSON document of the embedded provider, e.g. the JWKS at
    /// `protocol/openid-connect/certs`.
    pub async fn realm_document(&self, org: &str, path: &str) -> Value {
        let url = format!("{}/realms/{org}/{path}", self.base);
        self.http
            .get(url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// An access token from client_credentials.
    pub async fn client_token(&self, org: &str, client_id: &str) -> String {
        let secret = format!("{client_id}-secret");
        let (status, body) = self
            .token_request(
                org,
                &[
                    ("grant_type", "client_credentials"),
                    ("client_id", client_id),
                    ("client_secret", &secret),
                ],
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["access_token"].as_str().unwrap().to_string()
    }
}

pub fn uuid_like() -> String {
    use rand::Rng as _;
    format!("{:032x}", rand::thread_rng().r#gen::<u128>())
}

/// Status and JSON body (Null when the body is empty or not JSON).
pub async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The body every 401 has.
pub fn unauthorized() -> Value {
    json!({ "message": "Unauthorized" })
}
