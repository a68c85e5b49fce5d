//! The real Comotion SDK (comotion-sdk 1.2.2 from PyPI, driven by
//! `tests/python/sdk_client.py`) against lakehost as an SDK deployment would
//! run it: HTTPS, `region_domain = "comodash.io"`, audience `dash_api`, the
//! storage endpoint on its own host name, `pipeline.error_messages =
//! "strings"`. The SDK's process resolves the SDK's hard-coded host names
//! to this server; nothing in lakehost is patched.
//!
//! What this covers: client-credentials login (through `/auth/realms/...`),
//! `Query` to SUCCEEDED, `download_csv` (the 302 followed by urllib3, the
//! link on another origin, `Content-Length` checked by the SDK) byte for
//! byte, `get_csv_for_streaming`, `stop` and `state`; `Load.upload_df` (awswrangler with the temporary credentials),
//! `commit`, `wait_to_complete` and `get_load_info` on SUCCESS, on a
//! checksum mismatch and on a service-client failure.

use std::{net::SocketAddr, path::PathBuf};

use lakehost::config::{ErrorMessagesShape, IdpPrincipal};
use lakehost_tests::*;
use serde_json::{Value, json};

const STORAGE_HOST: &str = "storage.lakehost.test";

struct SdkDeployment {
    app: TestApp,
    python: PathBuf,
    ca: PathBuf,
    certificate: String,
    _dir: tempfile::TempDir,
}

async fn sdk_deployment() -> Option<SdkDeployment> {
    let python = test_python()?;
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec![
        "localhost".into(),
        "auth.comotion.us".into(),
        "*.api.comodash.io".into(),
        "api.demo.comodash.io".into(),
        STORAGE_HOST.into(),
    ])
    .unwrap();
    let ca = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    std::fs::write(&key, cert.key_pair.serialize_pem()).unwrap();
    let (cert_path, key_path) = (ca.clone(), key.clone());
    let app = spawn_app_with(move |c| {
        c.server.tls_cert = Some(cert_path);
        c.server.tls_key = Some(key_path);
        c.server.region_domain = "comodash.io".into();
        c.auth.api_client = "dash_api".into();
        c.uploads.public_url = Some(url::Url::parse(&format!("https://{STORAGE_HOST}")).unwrap());
        c.pipeline.error_messages = ErrorMessagesShape::Strings;
        // The demo principals hold roles on `svc_api`; this deployment's
        // audience is `dash_api`, so it has its own client.
        c.idp.clients.clear();
        c.idp.users.clear();
        c.idp.clients.push(IdpPrincipal {
            org: "demo".into(),
            client_id: Some("sdk-admin".into()),
            client_secret: Some("sdk-admin-secret".into()),
            username: None,
            password: None,
            service_clients: vec![0],
            roles: [("dash_api".to_string(), vec!["ZoneAdmin".to_string()])].into(),
            scopes: ["query:read", "query:write", "load:read", "load:write"]
                .map(String::from)
                .to_vec(),
        });
    })
    .await;
    Some(SdkDeployment {
        app,
        python,
        ca,
        certificate: cert.cert.pem(),
        _dir: dir,
    })
}

impl SdkDeployment {
    async fn run(&self, command: &str, mut args: Value) -> Value {
        let extra = json!({
            "ca": self.ca,
            "storage_url": format!("https://{STORAGE_HOST}"),
            "resolve": {
                "auth.comotion.us": self.app.addr.port(),
                "comodash.io": self.app.addr.port(),
                STORAGE_HOST: self.app.upload_addr.port(),
            },
            "org": "demo",
            "client_id": "sdk-admin",
            "client_secret": "sdk-admin-secret",
        });
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        sdk_client(&self.python, command, &args).await
    }

    /// An HTTPS client of this deployment as the SDK sees it (its host names
    /// resolved to the test server).
    fn https(&self) -> reqwest::Client {
        let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
        reqwest::Client::builder()
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.certificate.as_bytes()).unwrap(),
            )
            .resolve("demo.api.comodash.io", loopback(self.app.addr.port()))
            .resolve("auth.comotion.us", loopback(self.app.addr.port()))
            .resolve(STORAGE_HOST, loopback(self.app.upload_addr.port()))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_downloads_a_million_row_result_byte_for_byte() {
    let Some(sdk) = sdk_deployment().await else {
        return;
    };
    let csv_path = sdk._dir.path().join("result.csv");
    let out = sdk
        .run(
            "query",
            json!({
                "sql": "SELECT value AS n, concat('row ', value) AS label FROM generate_series(1, 1000000) ORDER BY n",
                "csv_path": csv_path,
            }),
        )
        .await;
    assert_eq!(out["state"], "SUCCEEDED", "{out}");
    let downloaded = std::fs::read(&csv_path).unwrap();
    assert_eq!(out["csv_bytes"], json!(downloaded.len()));
    // get_csv_for_streaming reads the same bytes; stop() on a finished query
    // changes nothing.
    assert_eq!(out["streamed_bytes"], json!(downloaded.len()));
    assert_eq!(out["state_after_stop"], "SUCCEEDED");

    // The same result through the link, fetched as any HTTP client would.
    let https = sdk.https();
    let token: Value = https
        .post("https://auth.comotion.us/auth/realms/demo/protocol/openid-connect/token")
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "sdk-admin"),
            ("client_secret", "sdk-admin-secret"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let response = https
        .get(format!(
            "https://demo.api.comodash.io/v2/query/{}/csv",
            out["query_id"].as_str().unwrap()
        ))
        .bearer_auth(token["access_token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    assert!(
        location.starts_with(&format!("https://{STORAGE_HOST}/")),
        "{location}"
    );
    let linked = https
        .get(&location)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(downloaded, linked.to_vec());
    let text = String::from_utf8(downloaded).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1_000_001);
    assert_eq!(lines[0], "\"n\",\"label\"");
    assert_eq!(lines[1_000_000], "\"1000000\",\"row 1000000\"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_loads_and_reads_every_outcome_of_a_load() {
    let Some(sdk) = sdk_deployment().await else {
        return;
    };
    let rows = json!([
        {"trip_id": 1, "fare": 2.5, "service_client_id": 1},
        {"trip_id": 2, "fare": 4.0, "service_client_id": 2},
        {"trip_id": 3, "fare": 1.5, "service_client_id": 1},
    ]);
    // Values as the CLI sends them: strings, compared as numbers.
    let done = sdk
        .run(
            "load",
            json!({"table": "sdk_trips", "rows": rows, "check_sum": {"count(*)": "3", "sum(fare)": "8.0"}}),
        )
        .await;
    assert_eq!(
        (
            &done["waited"],
            &done["status"],
            &done["error_type"],
            &done["error_messages"]
        ),
        (
            &json!("SUCCESS"),
            &json!("SUCCESS"),
            &Value::Null,
            &Value::Null
        ),
        "{done}"
    );

    let mismatch = sdk
        .run(
            "load",
            json!({"table": "sdk_trips", "rows": rows, "check_sum": {"count(*)": 4}}),
        )
        .await;
    assert_eq!(
        (
            &mismatch["waited"],
            &mismatch["status"],
            &mismatch["error_type"]
        ),
        (&json!("FAIL"), &json!("FAIL"), &json!("CheckSumError")),
        "{mismatch}"
    );
    assert_eq!(
        mismatch["error_messages"],
        json!(["Checksum mismatch for count(*): expected 4, actual 3 (CheckResult: FAIL)"])
    );

    let no_client = sdk
        .run(
            "load",
            json!({"table": "sdk_trips", "rows": [{"trip_id": 9}], "check_sum": {"count(*)": 1}}),
        )
        .await;
    assert_eq!(
        (&no_client["status"], &no_client["error_type"]),
        (&json!("FAIL"), &json!("ServiceClientError")),
        "{no_client}"
    );
    let messages = no_client["error_messages"].as_array().unwrap();
    assert!(
        !messages.is_empty() && messages.iter().all(Value::is_string),
        "{no_client}"
    );
}
