//! The real Comotion SDK and its `comotion` CLI (comotion-sdk 1.2.2 from PyPI,
//! driven by `tests/python/sdk_client.py` and the CLI's own executable)
//! against lakehost as an SDK deployment would run it: HTTPS,
//! `region_domain = "comodash.io"`, audience `dash_api`, the storage endpoint
//! on its own host name, `pipeline.error_messages = "strings"`. Every SDK
//! process resolves the SDK's hard-coded host names to this server
//! (`tests/python/sdk_site/sitecustomize.py`); nothing in lakehost is patched.
//!
//! What this covers:
//! - login: client credentials (through `/auth/realms/...`), and the CLI's
//!   browser login (`comotion authenticate`: PKCE with the public client
//!   `comotion_cli`, the login page filled in by `login_browser.py`, the
//!   refresh token kept in a file keyring) used by every CLI command after;
//! - `Query`: wait, `download_csv` byte for byte (the 302 followed by
//!   urllib3, the link on another origin, `Content-Length` checked by the
//!   SDK), `get_csv_for_streaming`, `stop`, `state`; the CLI's `start-query`,
//!   `dash download` of a million rows, `query-state`, `query-info` and
//!   `stop-query`;
//! - `Load`: `upload_df`, `upload_file` (CSV; parquet fails inside the SDK),
//!   `commit`, `wait_to_complete`, `get_load_info` on SUCCESS and on every
//!   FAIL type a load can reach; `DashBulkUploader` with DataFrame, file and
//!   Query sources; the CLI's `create-load`, `upload-file`, `commit-load` with
//!   string values and `get-load-info`;
//! - `DailyRun`: flag, start, the 409, status in each mode; the CLI's
//!   daily-run commands.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Output,
};

use lakehost::config::{ErrorMessagesShape, IdpPrincipal};
use lakehost_tests::*;
use serde_json::{Value, json};

const STORAGE_HOST: &str = "storage.lakehost.test";
const USER: &str = "sdk-user";
const USER_PASSWORD: &str = "sdk-user-password";
const MILLION_ROWS: &str = "SELECT value AS n, concat('row ', value) AS label \
                            FROM generate_series(1, 1000000) ORDER BY n";

struct SdkDeployment {
    app: TestApp,
    python: PathBuf,
    certificate: String,
    env: Vec<(String, String)>,
    dir: tempfile::TempDir,
}

/// A principal of this deployment: its roles are on `dash_api`.
fn principal(
    login: (&str, &str),
    user: bool,
    role: &str,
    service_clients: Vec<u32>,
) -> IdpPrincipal {
    let (id, secret) = (Some(login.0.to_string()), Some(login.1.to_string()));
    let (client_id, client_secret, username, password) = match user {
        true => (None, None, id, secret),
        false => (id, secret, None, None),
    };
    IdpPrincipal {
        org: "demo".into(),
        client_id,
        client_secret,
        username,
        password,
        service_clients,
        roles: [("dash_api".to_string(), vec![role.to_string()])].into(),
        scopes: [
            "query:read",
            "query:write",
            "load:read",
            "load:write",
            "dailyrun:enabled:read",
            "dailyrun:enabled:write",
            "dailyrun:execution:read",
            "dailyrun:execution:write",
        ]
        .map(String::from)
        .to_vec(),
    }
}

async fn sdk_deployment(daily_manifest: Option<String>) -> SdkDeployment {
    let python = test_python();
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
        c.idp.clients = vec![
            principal(
                ("sdk-admin", "sdk-admin-secret"),
                false,
                "ZoneAdmin",
                vec![0],
            ),
            principal(
                ("sdk-own", "sdk-own-secret"),
                false,
                "OwnServiceClientAnalyst",
                vec![1, 2],
            ),
        ];
        c.idp.users = vec![principal((USER, USER_PASSWORD), true, "ZoneAdmin", vec![0])];
        if let Some(manifest) = daily_manifest {
            with_daily_manifest(c, &manifest);
        }
    })
    .await;

    // What the CLI's `authenticate` opens as the browser: the login script,
    // in the background, as a browser runs beside the CLI.
    let browser = dir.path().join("browser.sh");
    std::fs::write(
        &browser,
        format!(
            "#!/bin/sh\n\"{}\" \"{}\" \"$1\" >> \"{}\" 2>&1 &\n",
            python.display(),
            python_dir().join("sdk_site/login_browser.py").display(),
            dir.path().join("browser.log").display(),
        ),
    )
    .unwrap();
    make_executable(&browser);
    let resolve = json!({
        "auth.comotion.us": app.addr.port(),
        "comodash.io": app.addr.port(),
        STORAGE_HOST: app.upload_addr.port(),
    });
    let path = |p: &Path| p.display().to_string();
    let env = [
        ("PYTHONPATH", path(&python_dir().join("sdk_site"))),
        ("LAKEHOST_TEST_RESOLVE", resolve.to_string()),
        ("SSL_CERT_FILE", path(&ca)),
        ("REQUESTS_CA_BUNDLE", path(&ca)),
        ("AWS_CA_BUNDLE", path(&ca)),
        ("AWS_ENDPOINT_URL_S3", format!("https://{STORAGE_HOST}")),
        ("AWS_DEFAULT_REGION", "us-east-1".into()),
        ("PYTHON_KEYRING_BACKEND", "test_keyring.FileKeyring".into()),
        (
            "LAKEHOST_TEST_KEYRING",
            path(&dir.path().join("keyring.json")),
        ),
        ("BROWSER", path(&browser)),
        ("LAKEHOST_TEST_LOGIN", format!("{USER}:{USER_PASSWORD}")),
    ]
    .map(|(k, v)| (k.to_string(), v))
    .to_vec();
    SdkDeployment {
        app,
        python,
        certificate: cert.cert.pem(),
        env,
        dir,
    }
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl SdkDeployment {
    /// A command of `sdk_client.py` as the application `client`.
    async fn run_as(&self, client: (&str, &str), command: &str, mut args: Value) -> Value {
        let who = json!({"org": "demo", "client_id": client.0, "client_secret": client.1});
        args.as_object_mut()
            .unwrap()
            .extend(who.as_object().unwrap().clone());
        sdk_client(&self.python, command, &args, &self.env).await
    }

    async fn run(&self, command: &str, args: Value) -> Value {
        self.run_as(("sdk-admin", "sdk-admin-secret"), command, args)
            .await
    }

    /// `comotion -o demo ARGS...`, the CLI's own executable.
    async fn cli(&self, args: &[&str]) -> Output {
        let comotion = self.python.parent().unwrap().join("comotion");
        tokio::process::Command::new(comotion)
            .arg("-o")
            .arg("demo")
            .args(args)
            .envs(self.env.iter().cloned())
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .expect("the comotion CLI runs")
    }

    /// A CLI command that must succeed; its standard output, trimmed.
    async fn cli_ok(&self, args: &[&str]) -> String {
        let output = self.cli(args).await;
        assert!(
            output.status.success(),
            "comotion {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap().trim().to_string()
    }

    /// `comotion authenticate` through the login page; the CLI then holds
    /// the user's refresh token.
    async fn cli_login(&self) {
        self.cli_ok(&["authenticate"]).await;
        let log = std::fs::read_to_string(self.dir.path().join("browser.log")).unwrap_or_default();
        assert_eq!(
            self.cli_ok(&["get-current-user"]).await,
            USER,
            "browser: {log}"
        );
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

    /// The bytes behind a query's CSV link, fetched as any HTTP client would.
    async fn linked_csv(&self, query_id: &str, token: &str) -> Vec<u8> {
        let https = self.https();
        let response = https
            .get(format!(
                "https://demo.api.comodash.io/v2/query/{query_id}/csv"
            ))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FOUND);
        let location = response.headers()["location"].to_str().unwrap().to_string();
        assert!(
            location.starts_with(&format!("https://{STORAGE_HOST}/")),
            "{location}"
        );
        let linked = https.get(&location).send().await.unwrap();
        assert_eq!(linked.status(), StatusCode::OK);
        linked.bytes().await.unwrap().to_vec()
    }

    async fn client_token(&self) -> String {
        let token: Value = self
            .https()
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
        token["access_token"].as_str().unwrap().to_string()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn assert_million_rows(csv: &[u8]) {
    let text = std::str::from_utf8(csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1_000_001);
    assert_eq!(lines[0], "\"n\",\"label\"");
    assert_eq!(lines[1_000_000], "\"1000000\",\"row 1000000\"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn the_sdk_downloads_a_million_row_result_byte_for_byte() {
    let sdk = sdk_deployment(None).await;
    let csv_path = sdk.path("result.csv");
    let out = sdk
        .run("query", json!({"sql": MILLION_ROWS, "csv_path": csv_path}))
        .await;
    assert_eq!(out["state"], "SUCCEEDED", "{out}");
    let downloaded = std::fs::read(&csv_path).unwrap();
    assert_eq!(out["csv_bytes"], json!(downloaded.len()));
    // get_csv_for_streaming reads the same bytes; stop() on a finished query
    // changes nothing.
    assert_eq!(out["streamed_bytes"], json!(downloaded.len()));
    assert_eq!(out["state_after_stop"], "SUCCEEDED");

    let token = sdk.client_token().await;
    let linked = sdk
        .linked_csv(out["query_id"].as_str().unwrap(), &token)
        .await;
    assert_eq!(downloaded, linked);
    assert_million_rows(&downloaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn the_cli_logs_in_through_the_browser_and_downloads_a_million_rows() {
    let sdk = sdk_deployment(None).await;
    // Before any login the CLI has no credentials and says so.
    let anonymous = sdk.cli(&["get-access-token"]).await;
    assert!(!anonymous.status.success());

    sdk.cli_login().await;
    let token = sdk.cli_ok(&["get-access-token"]).await;
    let claims = jwt_claims(&token);
    assert_eq!(
        (
            &claims["azp"],
            &claims["preferred_username"],
            &claims["aud"]
        ),
        (&json!("comotion_cli"), &json!(USER), &json!("dash_api")),
        "{claims}"
    );

    let query_id = sdk.cli_ok(&["dash", "start-query", MILLION_ROWS]).await;
    let file = sdk.path("cli.csv");
    sdk.cli_ok(&[
        "dash",
        "download",
        "-q",
        &query_id,
        "-f",
        file.to_str().unwrap(),
    ])
    .await;
    let downloaded = std::fs::read(&file).unwrap();
    assert_eq!(downloaded, sdk.linked_csv(&query_id, &token).await);
    assert_million_rows(&downloaded);
    for command in ["query-state", "query-info"] {
        assert_eq!(
            sdk.cli_ok(&["dash", command, "-q", &query_id]).await,
            "SUCCEEDED"
        );
    }

    // A query that would run for hours, stopped from the CLI.
    let endless = sdk
        .cli_ok(&[
            "dash",
            "start-query",
            "SELECT count(*) FROM generate_series(1, 1000000000000)",
        ])
        .await;
    assert_eq!(
        sdk.cli_ok(&["dash", "stop-query", "-q", &endless]).await,
        "Query stopped"
    );
    assert_eq!(
        sdk.cli_ok(&["dash", "query-state", "-q", &endless]).await,
        "CANCELLED"
    );

    // A query that cannot run is an error, and no file is left behind.
    let failed_file = sdk.path("failed.csv");
    let failed = sdk
        .cli(&[
            "dash",
            "download",
            "-f",
            failed_file.to_str().unwrap(),
            "SELECT * FROM no_such_table",
        ])
        .await;
    assert!(!failed.status.success(), "{failed:?}");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("no_such_table"), "{stderr}");
    assert!(!failed_file.exists());
}

/// The claims of a JWT, unverified (the test reads what the CLI holds).
fn jwt_claims(token: &str) -> Value {
    use base64::Engine as _;
    let payload = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn trips(rows: &[(i64, f64, i64)]) -> Value {
    rows.iter()
        .map(|(trip_id, fare, client)| json!({"trip_id": trip_id, "fare": fare, "service_client_id": client}))
        .collect()
}

/// One outcome of `sdk_client.py loads`: status as waited for and as read,
/// ErrorType, ErrorMessages.
fn outcome_of(load: &Value) -> (String, String, Value, Value) {
    (
        load["waited"].as_str().unwrap_or_default().to_string(),
        load["status"].as_str().unwrap_or_default().to_string(),
        load["error_type"].clone(),
        load["error_messages"].clone(),
    )
}

fn assert_failed_with(load: &Value, error_type: &str) -> Vec<String> {
    let (waited, status, kind, messages) = outcome_of(load);
    assert_eq!(
        (waited.as_str(), status.as_str(), &kind),
        ("FAIL", "FAIL", &json!(error_type)),
        "{load}"
    );
    let messages: Vec<String> = messages
        .as_array()
        .unwrap_or_else(|| panic!("{load}"))
        .iter()
        .map(|m| {
            m.as_str()
                .unwrap_or_else(|| panic!("not a string: {load}"))
                .to_string()
        })
        .collect();
    assert!(!messages.is_empty(), "{load}");
    messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn the_sdk_loads_and_reads_every_outcome_of_a_load() {
    let sdk = sdk_deployment(None).await;
    let rows = trips(&[(1, 2.5, 1), (2, 4.0, 2), (3, 1.5, 1)]);
    let many: Vec<(i64, f64, i64)> = (1..=101).map(|i| (i, 1.0, 1)).collect();
    let loads = sdk
        .run(
            "loads",
            json!({"loads": [
                // Values as the CLI sends them: strings, compared as numbers.
                {"table": "sdk_trips", "rows": rows, "check_sum": {"count(*)": "3", "sum(fare)": "8.0"}},
                {"table": "sdk_trips", "rows": rows, "check_sum": {"count(*)": 4}},
                {"table": "sdk_trips", "check_sum": {"count(*)": 0}},
                {"table": "sdk_trips", "rows": [{"trip_id": 1, "fare%": 1.0, "service_client_id": 1}], "check_sum": {"count(*)": 1}},
                {"table": "sdk_trips", "rows": [{"trip_id": 9}], "check_sum": {"count(*)": 1}},
                {"table": "sdk_many", "rows": trips(&many), "partitions": ["trip_id"], "check_sum": {"count(*)": 101}},
            ]}),
        )
        .await;
    let loads = loads.as_array().unwrap();
    assert_eq!(
        outcome_of(&loads[0]),
        ("SUCCESS".into(), "SUCCESS".into(), Value::Null, Value::Null),
        "{}",
        loads[0]
    );
    assert_eq!(
        assert_failed_with(&loads[1], "CheckSumError"),
        ["Checksum mismatch for count(*): expected 4, actual 3 (CheckResult: FAIL)"]
    );
    assert_failed_with(&loads[2], "NoFilesUploaded");
    let invalid = assert_failed_with(&loads[3], "ParquetValidation");
    assert!(invalid[0].contains("fare%"), "{invalid:?}");
    assert_failed_with(&loads[4], "ServiceClientError");
    assert_failed_with(&loads[5], "TooManyPartitions");

    // Against the table the first load made: a column it does not have.
    let extra = sdk
        .run(
            "loads",
            json!({"loads": [{"table": "sdk_trips", "rows": [{"trip_id": 4, "fare": 1.0, "tip": 0.5, "service_client_id": 1}], "check_sum": {"count(*)": 1}}]}),
        )
        .await;
    let mismatch = assert_failed_with(&extra[0], "ValidationError");
    assert!(mismatch.iter().any(|m| m.contains("tip")), "{mismatch:?}");

    // An own-client analyst (clients 1 and 2) loading as client 7.
    let not_theirs = sdk
        .run_as(
            ("sdk-own", "sdk-own-secret"),
            "loads",
            json!({"loads": [{"table": "sdk_own", "rows": [{"trip_id": 1}], "load_as_service_client_id": "7", "check_sum": {"count(*)": 1}}]}),
        )
        .await;
    assert_failed_with(&not_theirs[0], "PermissionsError");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn the_sdk_uploads_files_and_bulk_loads_several_tables() {
    let sdk = sdk_deployment(None).await;
    let csv = sdk.path("trips.csv");
    std::fs::write(&csv, "trip_id,fare,service_client_id\n1,2.5,1\n2,4.0,2\n").unwrap();
    // A parquet file, written by pyarrow through the SDK's own pandas.
    let parquet = sdk.path("trips.parquet");
    let rows = trips(&[(1, 2.5, 1), (2, 4.0, 2)]);
    sdk.run("write_parquet", json!({"path": parquet, "rows": rows}))
        .await;

    let uploaded = sdk
        .run(
            "upload_file",
            json!({"table": "sdk_files", "files": {"csv": csv, "parquet": parquet}, "check_sum": {"count(*)": "2", "sum(fare)": "6.5"}}),
        )
        .await;
    assert_eq!(
        (&uploaded["csv"]["waited"], &uploaded["csv"]["status"]),
        (&json!("SUCCESS"), &json!("SUCCESS")),
        "{uploaded}"
    );
    // SDK 1.2.2 cannot read a parquet file in upload_file: it probes the
    // pandas readers with `nrows` (read_parquet takes none) and then reads
    // the file as CSV, or gives up, before any row reaches the server. The
    // CLI's upload-file (below) is the SDK's way to send a parquet file.
    assert_eq!(uploaded["parquet"]["raised"], "ValueError", "{uploaded}");
    let tables = sdk
        .run(
            "bulk",
            json!({"tables": {
                "sdk_bulk": {
                    "check_sum": {"count(*)": 5, "sum(fare)": 15.5},
                    "frames": [trips(&[(10, 1.0, 1)])],
                    "files": [csv],
                    "query": "SELECT 20 AS trip_id, 6.0 AS fare, 1 AS service_client_id UNION ALL SELECT 21, 2.0, 2",
                },
                "sdk_bulk_wrong": {
                    "check_sum": {"count(*)": 3},
                    "frames": [trips(&[(1, 1.0, 1)])],
                },
            }}),
        )
        .await;
    assert_eq!(
        (
            &tables["sdk_bulk"]["status"],
            &tables["sdk_bulk"]["tracked_status"]
        ),
        (&json!("SUCCESS"), &json!("SUCCESS")),
        "{tables}"
    );
    assert_eq!(
        (
            &tables["sdk_bulk_wrong"]["status"],
            &tables["sdk_bulk_wrong"]["error_type"],
            &tables["sdk_bulk_wrong"]["error_messages"],
        ),
        (
            &json!("FAIL"),
            &json!("CheckSumError"),
            &json!(["Checksum mismatch for count(*): expected 3, actual 1 (CheckResult: FAIL)"]),
        ),
        "{tables}"
    );

    // Every row of the bulk load is in the lake, from each kind of source.
    let csv_path = sdk.path("check.csv");
    let out = sdk
        .run(
            "query",
            json!({"sql": "SELECT trip_id, fare FROM sdk_bulk ORDER BY trip_id", "csv_path": csv_path}),
        )
        .await;
    assert_eq!(out["state"], "SUCCEEDED", "{out}");
    assert_eq!(
        std::fs::read_to_string(&csv_path).unwrap(),
        "\"trip_id\",\"fare\"\n\"1\",\"2.5\"\n\"2\",\"4.0\"\n\"10\",\"1.0\"\n\"20\",\"6.0\"\n\"21\",\"2.0\"\n"
    );
}

/// Polls `comotion dash get-load-info` as its help suggests, until the load
/// is no longer PROCESSING; the status (stdout) and the messages (stderr).
async fn cli_load_outcome(sdk: &SdkDeployment, load_id: &str) -> (String, String) {
    for _ in 0..120 {
        let output = sdk.cli(&["dash", "get-load-info", "-l", load_id]).await;
        assert!(output.status.success(), "{output:?}");
        let status = String::from_utf8(output.stdout).unwrap().trim().to_string();
        if status != "PROCESSING" {
            // Less the SDK's own notice at import.
            let messages = String::from_utf8(output.stderr)
                .unwrap()
                .lines()
                .filter(|line| !line.starts_with("Optional dependency 'cx_Oracle'"))
                .map(|line| format!("{line}\n"))
                .collect();
            return (status, messages);
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!("load {load_id} still PROCESSING");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn the_cli_creates_uploads_commits_and_reads_loads() {
    let sdk = sdk_deployment(None).await;
    let parquet = sdk.path("trips.parquet");
    sdk.run(
        "write_parquet",
        json!({"path": parquet, "rows": trips(&[(1, 2.5, 1), (2, 4.0, 2), (3, 1.5, 1)])}),
    )
    .await;
    sdk.cli_login().await;
    let parquet = parquet.to_str().unwrap();

    let load_id = sdk.cli_ok(&["dash", "create-load", "cli_trips"]).await;
    assert_eq!(
        sdk.cli_ok(&["dash", "get-load-info", "-l", &load_id]).await,
        "OPEN"
    );
    sdk.cli_ok(&["dash", "upload-file", parquet, "-l", &load_id])
        .await;
    // The CLI sends every value as a string; a float sum printed by the
    // shell compares as a number.
    let committed = sdk
        .cli_ok(&[
            "dash",
            "commit-load",
            "-l",
            &load_id,
            "-c",
            "count(*)",
            "3",
            "-c",
            "sum(fare)",
            "8.000000000000001",
        ])
        .await;
    assert_eq!(committed, "Load committed");
    assert_eq!(
        cli_load_outcome(&sdk, &load_id).await,
        ("SUCCESS".into(), String::new())
    );

    let load_id = sdk.cli_ok(&["dash", "create-load", "cli_trips"]).await;
    sdk.cli_ok(&[
        "dash",
        "upload-file",
        parquet,
        "-l",
        &load_id,
        "-k",
        "again",
    ])
    .await;
    sdk.cli_ok(&["dash", "commit-load", "-l", &load_id, "-c", "count(*)", "4"])
        .await;
    assert_eq!(
        cli_load_outcome(&sdk, &load_id).await,
        (
            "FAIL".into(),
            "Checksum mismatch for count(*): expected 4, actual 3 (CheckResult: FAIL)\n".into()
        )
    );

    // Bad input reaches the user as an error, not a traceback.
    let not_parquet = sdk
        .cli(&["dash", "upload-file", "/etc/hostname", "-l", &load_id])
        .await;
    assert!(!not_parquet.status.success());
    let unknown = sdk
        .cli(&["dash", "get-load-info", "-l", "no-such-load"])
        .await;
    assert!(!unknown.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn the_sdk_and_the_cli_drive_the_daily_run() {
    let sdk = sdk_deployment(Some(pause_manifest(12000))).await;
    let calls = sdk
        .run(
            "dailyrun",
            json!({"calls": [
                ["get_enabled"],
                ["set_enabled", true],
                ["get_enabled"],
                ["start"],
                ["start"],
                ["status", "LATEST"],
                ["wait"],
                ["status", "LAST_SUCCESSFUL"],
                ["status", "LIST"],
            ]}),
        )
        .await;
    let calls = calls.as_array().unwrap();
    // No flag recorded yet: the spec's 404, which the SDK raises.
    assert_eq!(calls[0]["raised"], "ValueError", "{calls:?}");
    assert!(
        calls[0]["message"].as_str().unwrap().contains("404"),
        "{calls:?}"
    );
    assert_eq!(
        (&calls[1]["ok"], &calls[2]["ok"]),
        (&json!(true), &json!(true))
    );
    let started = &calls[3]["ok"];
    assert_eq!(started["started"], true, "{calls:?}");
    // The second start, while the first runs: the 409 body, returned.
    let refused = &calls[4]["ok"];
    assert_eq!(refused["started"], false, "{calls:?}");
    assert_eq!(
        refused["runningExecution"]["name"], started["executionName"],
        "{calls:?}"
    );
    assert_eq!(calls[5]["ok"]["status"], "RUNNING", "{calls:?}");
    assert_eq!(calls[6]["ok"], "SUCCEEDED", "{calls:?}");
    assert_eq!(
        (&calls[7]["ok"]["status"], &calls[7]["ok"]["name"]),
        (&json!("SUCCEEDED"), &started["executionName"]),
        "{calls:?}"
    );
    let executions = calls[8]["ok"]["executions"].as_array().unwrap();
    assert_eq!(executions.len(), 1, "{calls:?}");

    // The same through the CLI, logged in as a user, a second later (the
    // server's clock is the test's; execution names carry the start time).
    sdk.app.clock.advance(chrono::Duration::seconds(1));
    sdk.cli_login().await;
    assert_eq!(sdk.cli_ok(&["dash", "daily-run-enabled"]).await, "true");
    assert_eq!(
        sdk.cli_ok(&["dash", "update-daily-run-enabled", "--disable"])
            .await,
        "false"
    );
    assert_eq!(sdk.cli_ok(&["dash", "daily-run-enabled"]).await, "false");
    // A manual start is allowed with the flag off.
    let started: Value = serde_json::from_str(
        &sdk.cli_ok(&["dash", "start-daily-run-execution", "--yes"])
            .await,
    )
    .unwrap();
    assert_eq!(started["started"], true, "{started}");
    let refused: Value = serde_json::from_str(
        &sdk.cli_ok(&["dash", "start-daily-run-execution", "--yes"])
            .await,
    )
    .unwrap();
    assert_eq!(refused["started"], false, "{refused}");
    let latest: Value = serde_json::from_str(
        &sdk.cli_ok(&["dash", "daily-run-execution-info", "--mode", "latest"])
            .await,
    )
    .unwrap();
    assert_eq!(latest["name"], started["executionName"], "{latest}");
    let listed: Value = serde_json::from_str(
        &sdk.cli_ok(&["dash", "daily-run-execution-info", "--limit", "1"])
            .await,
    )
    .unwrap();
    assert_eq!(
        listed["executions"].as_array().unwrap().len(),
        1,
        "{listed}"
    );
}
