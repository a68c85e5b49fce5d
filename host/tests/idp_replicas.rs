//! Issue 49's "the embedded identity provider works behind a balancer", with
//! real processes: two `lakehost serve` replicas (A and B) on one Postgres
//! database, nothing copied between their data folders, each minting and
//! redeeming as a client reaching either through a balancer would:
//! - both publish the same keys and name the same issuer;
//! - a client-credentials token from A works on B's Org API, and B's on A's;
//! - the browser login: the authorization page and its login form on A
//!   (PKCE S256), the code exchanged at B, the tokens good on both, the
//!   refresh token B issued refreshed at A, the code refused the second time.
//!
//! `auth.auth_url` names replica A on both (as `pipeline_deploy.rs` does):
//! there is no balancer process here, so every replica's validator fetches
//! A's JWKS, and a token B signs passes only if B signs with a key A
//! publishes; B's own JWKS is compared with A's directly. (Through HAProxy
//! the validators would fetch from either replica: `replicas.rs` drives the
//! balancer itself.)
//!
//! Needs Postgres (`LAKEHOST_TEST_DATABASE_URL`: `.ci/postgres`); without it
//! (when the test was built) it is reported ignored, and in CI a missing part
//! fails it (host/build.rs).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

mod common;

use common::{KillOnDrop, free_ports, json_of};

/// The PKCE verifier of the login (RFC 7636's example).
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K9uhyUzaO8ohjh8mYx3QhXr0nk";
/// Where the command-line client waits for the login's redirect.
const REDIRECT: &str = "http://localhost:8765/callback";
const SECURITY_METADATA: &str = "/v2/identity/security_metadata";

/// One `lakehost serve` process: its address and its log file.
struct Replica {
    api: String,
    log: PathBuf,
    _server: KillOnDrop,
}

impl Replica {
    /// Starts it on `port` with its data in `root/name`, on `database_url`,
    /// taking its tokens' keys from `auth_url`.
    fn start(name: &str, port: u16, root: &Path, database_url: &str, auth_url: &str) -> Self {
        let data_dir = root.join(name);
        std::fs::create_dir_all(&data_dir).unwrap();
        let log = root.join(format!("{name}.log"));
        let data_dir_text = data_dir.display().to_string();
        let listen = format!("127.0.0.1:{port}");
        let env = [
            ("LAKEHOST_SERVER_LISTEN", listen.as_str()),
            ("LAKEHOST_STORAGE_S3_LISTEN", "127.0.0.1:0"),
            ("LAKEHOST_SERVER_METRICS_LISTEN", "127.0.0.1:0"),
            ("LAKEHOST_STORAGE_DATA_DIR", data_dir_text.as_str()),
            ("LAKEHOST_STORAGE_DATABASE_URL", database_url),
            ("LAKEHOST_AUTH_AUTH_URL", auth_url),
            ("RUST_LOG", "info"),
        ];
        let (server, output, api) =
            common::serve(&data_dir, &env, std::fs::File::create(&log).unwrap().into());
        // Keep reading: the server still prints its banner.
        std::thread::spawn(move || output.for_each(drop));
        assert_eq!(api, format!("http://127.0.0.1:{port}"), "{name}'s address");
        Replica {
            api,
            log,
            _server: server,
        }
    }

    fn realm(&self, path: &str) -> String {
        format!("{}/realms/demo/{path}", self.api)
    }

    /// The status of `GET /v2/identity/security_metadata` with `token`.
    async fn org_api_status(&self, http: &reqwest::Client, token: &str) -> u16 {
        http.get(format!("{}{SECURITY_METADATA}", self.api))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    async fn kids(&self, http: &reqwest::Client) -> Vec<String> {
        let jwks = json_of(http.get(self.realm("protocol/openid-connect/certs"))).await;
        jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_string())
            .collect()
    }

    fn log_text(&self) -> String {
        format!(
            "{}:\n{}",
            self.log.display(),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }
}

/// A fresh database on the Postgres server `.ci/postgres` started.
async fn fresh_database() -> String {
    use sqlx::Connection as _;
    let admin_url = std::env::var("LAKEHOST_TEST_DATABASE_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .expect(
            "the identity provider replicas test needs LAKEHOST_TEST_DATABASE_URL \
             (eval \"$(.ci/postgres)\")",
        );
    let database = format!("lakehost_idp_{}", lakehost::store::new_id());
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {database}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let base = admin_url.rsplit_once('/').unwrap().0;
    format!("{base}/{database}")
}

/// The hidden inputs of the login page's form (what a browser posts back).
fn hidden_inputs(page: &str) -> Vec<(String, String)> {
    page.split("<input type=\"hidden\" ")
        .skip(1)
        .map(|input| {
            let attribute = |name: &str| {
                let start = input.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                let end = start + input[start..].find('"').unwrap();
                input[start..end].to_string()
            };
            (attribute("name"), attribute("value"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_postgres),
    ignore = "needs Postgres: eval \"$(.ci/postgres)\" first (README, Tests)"
)]
async fn two_replicas_on_one_database_are_one_identity_provider() {
    let database_url = fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(2);
    let auth_url = format!("http://127.0.0.1:{}", ports[0]);
    let a = Replica::start("replica-a", ports[0], dir.path(), &database_url, &auth_url);
    let b = Replica::start("replica-b", ports[1], dir.path(), &database_url, &auth_url);
    let logs = || format!("{}\n{}", a.log_text(), b.log_text());
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // One issuer, one set of keys.
    let discovery = ".well-known/openid-configuration";
    let issuer_a = json_of(http.get(a.realm(discovery))).await;
    let issuer_b = json_of(http.get(b.realm(discovery))).await;
    assert_eq!(issuer_a["issuer"], format!("{auth_url}/realms/demo"));
    assert_eq!(issuer_a["issuer"], issuer_b["issuer"]);
    let kids = a.kids(&http).await;
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(b.kids(&http).await, kids, "B publishes A's keys");

    // Client credentials: minted on one, used on the other.
    let from_a = common::demo_admin_token(&http, &a.api).await;
    let from_b = common::demo_admin_token(&http, &b.api).await;
    assert_eq!(b.org_api_status(&http, &from_a).await, 200, "{}", logs());
    assert_eq!(a.org_api_status(&http, &from_b).await, 200, "{}", logs());

    // The browser login: the page and its form on A.
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(VERIFIER.as_bytes()));
    let authorize = a.realm("protocol/openid-connect/auth");
    let page = http
        .get(&authorize)
        .query(&[
            ("client_id", "svc_cli"),
            ("response_type", "code"),
            ("redirect_uri", REDIRECT),
            ("scope", "openid"),
            ("state", "from-the-cli"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    let mut form = hidden_inputs(&page);
    assert!(
        form.iter()
            .any(|(k, v)| k == "code_challenge" && *v == challenge),
        "{page}"
    );
    form.extend([
        ("username".into(), "demo".into()),
        ("password".into(), "demo".into()),
    ]);
    let signed_in = http.post(&authorize).form(&form).send().await.unwrap();
    assert_eq!(signed_in.status(), 303, "{}", logs());
    let location = url::Url::parse(signed_in.headers()["location"].to_str().unwrap()).unwrap();
    let query = |name: &str| {
        location
            .query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    assert_eq!(query("state").as_deref(), Some("from-the-cli"));
    assert_eq!(query("iss"), issuer_a["issuer"].as_str().map(String::from));
    let code = query("code").expect("a code");

    // ... the code exchanged at B.
    let exchange = |replica: &Replica| {
        http.post(replica.realm("protocol/openid-connect/token"))
            .form(&[
                ("grant_type", "authorization_code"),
                ("client_id", "svc_cli"),
                ("code", code.as_str()),
                ("code_verifier", VERIFIER),
                ("redirect_uri", REDIRECT),
            ])
    };
    let tokens: Value = json_of(exchange(&b)).await;
    let access = tokens["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("the exchange at B: {tokens}\n{}", logs()));
    assert_eq!(a.org_api_status(&http, access).await, 200, "{}", logs());
    assert_eq!(b.org_api_status(&http, access).await, 200, "{}", logs());

    // B's refresh token refreshed at A.
    let refreshed = json_of(http.post(a.realm("protocol/openid-connect/token")).form(&[
        ("grant_type", "refresh_token"),
        ("client_id", "svc_cli"),
        ("refresh_token", tokens["refresh_token"].as_str().unwrap()),
    ]))
    .await;
    let again = refreshed["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("the refresh at A: {refreshed}"));
    assert_eq!(b.org_api_status(&http, again).await, 200);

    // The code is spent, on either replica.
    for replica in [&a, &b] {
        let second = exchange(replica).send().await.unwrap();
        assert_eq!(second.status(), 400);
        let body: Value = second.json().await.unwrap();
        assert_eq!(body["error"], "invalid_grant", "{body}");
        assert_eq!(body["error_description"], "Code not valid", "{body}");
    }
    assert_eq!(b.kids(&http).await, kids, "still one key");
}
