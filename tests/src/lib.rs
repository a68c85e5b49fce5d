//! Helpers for the integration tests: start the real server on port 0 with a
//! temporary data directory and an injected clock, talk to it over HTTP with any
//! Host header, and mint tokens with the realm's real signing key (pinned by
//! writing the key file before start, the format `idp::keys` documents).
//!
//! Orgs of the test server: `demo` (zones `lab`, `ops`) and `other`.
//!
//! `raw_http` and `s3_signing` send requests as an attacker writes them
//! (targets byte for byte, S3 signatures computed here).

pub mod raw_http;
pub mod s3_signing;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, OnceLock},
};

use datafusion::{arrow::array::RecordBatch, parquet::arrow::ArrowWriter};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use lakehost::{
    Application, Config,
    clock::{Clock as _, ManualClock},
    config::{IdpPrincipal, OrgConfig},
    dailyrun::DailyRunService,
    idp::{Idp, StoredKey, generate_key, key_file_path, write_key_file},
    import::{ImportRequest, ImportSummary, import_parquet},
    lake::Lake,
    load::LoadService,
    retention::Sweeper,
    retired::RetiredFileSweeper,
    store::Store,
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
    /// The server's metadata store and lake (tests seed the catalog directly).
    pub store: Store,
    pub lake: Lake,
    /// Where `GET /metrics` is served (the metrics listener).
    pub metrics_addr: SocketAddr,
    /// The upload endpoint (embedded S3) and the load service behind it.
    pub upload_addr: SocketAddr,
    /// Arrow Flight SQL, when `server.flight_listen` is set.
    pub flight_addr: Option<SocketAddr>,
    /// The Postgres wire protocol, when `server.pg_listen` is set.
    pub pg_addr: Option<SocketAddr>,
    pub loads: Arc<LoadService>,
    /// The daily-run service (tests run its scheduler tick directly).
    pub daily_runs: Arc<DailyRunService>,
    /// The retired-file sweeper (tests run its sweep directly).
    pub retired_files: Arc<RetiredFileSweeper>,
    /// The retention sweep (tests run its rounds directly).
    pub retention: Arc<Sweeper>,
    _dir: Option<tempfile::TempDir>,
    server: tokio::task::JoinHandle<()>,
    /// Begins the server's drain, as SIGTERM does (`TestApp::drain`).
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl TestApp {
    /// Stops the server as a killed process stops, nothing drained or handed
    /// back, and returns once it has: its task is aborted and awaited, so its
    /// workers (commits, queries, daily runs) were told to stop before a test
    /// moves the clock. A plain drop only asks for the abort; until the
    /// runtime gets to it, the server's tasks run on, and a daily run's hold
    /// renewed then, at a clock the test has just moved, outlives the server.
    pub async fn stop_abruptly(mut self) {
        self.server.abort();
        let _ = (&mut self.server).await;
        tokio::task::yield_now().await;
    }
}

/// The test configuration: two orgs, the demo principals, a demo client in `other`.
/// A schedule whose slots (02:00 on 29 February) no test run meets.
pub const RARE_DAILY_RUN_SCHEDULE: &str = "0 2 29 2 *";

pub fn test_config(data_dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.storage.s3_listen = "127.0.0.1:0".parse().unwrap();
    config.server.metrics_listen = "127.0.0.1:0".parse().unwrap();
    config.storage.data_dir = data_dir.to_path_buf();
    // The limits tests run the steps that misbehave on purpose.
    config.pipeline.test_steps = true;
    config.orgs[0].zones = vec!["lab".into(), "ops".into()];
    // The servers' clocks start at the wall clock: a nightly slot would
    // start runs in whichever tests happen to run between 02:00 and 03:00
    // UTC. The orgs' slots are on 29 February only; the scheduler's tests
    // set a nightly schedule and a clock of their own.
    config.orgs[0].daily_run_schedule = RARE_DAILY_RUN_SCHEDULE.into();
    config.orgs.push(OrgConfig {
        name: "other".into(),
        zones: vec![],
        daily_run_schedule: RARE_DAILY_RUN_SCHEDULE.into(),
        error_messages: None,
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
/// With `LAKEHOST_TEST_LOG` set (an `EnvFilter`, e.g. `lakehost=debug`) the
/// server's log goes to the test's output.
pub async fn start(config: Config, clock: ManualClock) -> TestApp {
    if let Ok(filter) = std::env::var("LAKEHOST_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
    let data_dir = config.storage.data_dir.clone();
    // Over TLS the test client trusts the server's own certificate.
    let mut http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    if let Some(cert) = &config.server.tls_cert {
        let pem = std::fs::read(cert).expect("the test certificate");
        http = http.add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap());
    }
    let app = Application::build_with_clock(config, Arc::new(clock.clone()))
        .await
        .expect("server starts");
    let addr = app.local_addr();
    let idp = app.idp();
    let (store, lake) = (app.store(), app.lake());
    let (upload_addr, loads) = (app.upload_addr(), app.loads());
    let metrics_addr = app.metrics_addr();
    let flight_addr = app.flight_addr();
    let pg_addr = app.pg_addr();
    let daily_runs = app.daily_runs();
    let retired_files = app.retired_files();
    let retention = app.retention();
    let scheme = app.auth_url().scheme().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        // Only `TestApp::drain` stops it; dropping the TestApp aborts it.
        let stop = async move {
            if stopped.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let _ = app.run_until(stop).await;
    });
    TestApp {
        addr,
        base: format!("{scheme}://127.0.0.1:{}", addr.port()),
        http: http.build().unwrap(),
        clock,
        idp,
        data_dir,
        store,
        lake,
        metrics_addr,
        upload_addr,
        flight_addr,
        pg_addr,
        loads,
        daily_runs,
        retired_files,
        retention,
        _dir: None,
        server,
        stop: Some(stop),
    }
}

/// Host names of the test server's APIs.
pub const ORG_HOST: &str = "demo.api.localhost";
pub const OTHER_ORG_HOST: &str = "other.api.localhost";

pub const SECURITY_METADATA: &str = "/v2/identity/security_metadata";

impl TestApp {
    /// Begins the server's drain, as SIGTERM does; `drained` waits for its end.
    pub fn drain(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Waits until the drained server returned (what makes the process exit).
    pub async fn drained(&mut self) {
        (&mut self.server).await.expect("the server task ends");
    }

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
        self.org_token_for("demo", roles, service_client_claim)
    }

    /// `token_for` of another org's Org API.
    pub fn org_token_for(&self, org: &str, roles: &[&str], service_client_claim: &str) -> String {
        let mut claims = self.valid_claims(org);
        claims["resource_access"] = json!({ "svc_api": { "roles": roles } });
        claims["service_client_id"] = json!(service_client_claim);
        self.sign(org, &claims)
    }

    /// POST form to a realm's token endpoint; returns status and JSON body.
    pub async fn token_request(&self, org: &str, form: &[(&str, &str)]) -> (StatusCode, Value) {
        self.token_request_under("", org, form).await
    }

    /// `token_request` with the realms under `prefix` (`/auth`: Keycloak's
    /// legacy paths).
    pub async fn token_request_under(
        &self,
        prefix: &str,
        org: &str,
        form: &[(&str, &str)],
    ) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!(
                "{}{prefix}/realms/{org}/protocol/openid-connect/token",
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

/// The query endpoints' paths.
pub const QUERY: &str = "/v2/query";

/// A query's final states.
pub const FINAL_STATES: [&str; 3] = ["SUCCEEDED", "FAILED", "CANCELLED"];

impl TestApp {
    /// Writes `batches` (which carry a `service_client_id` column) as a parquet
    /// file and imports it into `database.table` of the demo org, or of `zone`.
    pub async fn import(
        &self,
        zone: Option<&str>,
        database: &str,
        table: &str,
        batches: &[RecordBatch],
    ) -> ImportSummary {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{table}.parquet"));
        {
            let file = std::fs::File::create(&path).unwrap();
            let mut writer = ArrowWriter::try_new(file, batches[0].schema(), None).unwrap();
            for batch in batches {
                writer.write(batch).unwrap();
            }
            writer.close().unwrap();
        }
        let request = ImportRequest {
            org: "demo".into(),
            zone: zone.map(String::from),
            database: database.into(),
            table: table.into(),
            files: vec![path],
        };
        import_parquet(&self.store, &self.lake, &request, 1)
            .await
            .expect("import")
    }

    /// The object paths of the files the catalog lists for `database.table`
    /// of the demo org.
    pub async fn table_file_paths(&self, database: &str, table: &str) -> Vec<String> {
        let database = self
            .store
            .database("demo", None, database)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no database {database}"));
        let table = self
            .store
            .table(&database.id, table)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no table {table} in {}", database.name));
        let files = self.store.files(&table.id).await.unwrap();
        files.into_iter().map(|f| f.file.path).collect()
    }

    /// Whether the lake's object store has `path`.
    pub async fn lake_has(&self, path: &str) -> bool {
        use object_store::{ObjectStoreExt as _, path::Path as ObjectPath};
        match self.lake.object_store().head(&ObjectPath::from(path)).await {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(e) => panic!("{path}: {e}"),
        }
    }

    /// A token for the Zone API of `zone` in the demo org: audience
    /// `svc_api_<zone>`, the zone's query scopes, these roles on the zone's client.
    pub fn zone_token_for(&self, zone: &str, roles: &[&str], service_client_claim: &str) -> String {
        let mut claims = self.valid_claims("demo");
        let client = format!("svc_api_{zone}");
        claims["aud"] = json!(client);
        claims["scope"] = json!(format!(
            "{zone}:query:read {zone}:query:write {zone}:load:read {zone}:load:write"
        ));
        claims["resource_access"] = json!({ client: { "roles": roles } });
        claims["service_client_id"] = json!(service_client_claim);
        self.sign("demo", &claims)
    }

    /// A demo Org API token of another user (`sub`).
    pub fn token_of(&self, sub: &str, roles: &[&str], service_client_claim: &str) -> String {
        let mut claims = self.valid_claims("demo");
        claims["sub"] = json!(sub);
        claims["resource_access"] = json!({ "svc_api": { "roles": roles } });
        claims["service_client_id"] = json!(service_client_claim);
        self.sign("demo", &claims)
    }

    /// Asserts that `table` does not exist on the Org API (a query of it is
    /// refused with 400): what a failed load or run must leave behind.
    pub async fn assert_no_table(&self, token: &str, table: &str) {
        let sql = format!("SELECT count(*) FROM {table}");
        let (status, body) = self.submit(ORG_HOST, token, &json!({ "query": sql })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{table} exists: {body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("does not exist") || m.contains("not found")),
            "{table}: {body}"
        );
    }

    /// POST /query with a JSON body; status and body.
    pub async fn submit(&self, host: &str, token: &str, body: &Value) -> (StatusCode, Value) {
        let response = self
            .request(reqwest::Method::POST, host, QUERY)
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap();
        read(response).await
    }

    /// POST /query of `sql`; panics unless 202; returns the queryId.
    pub async fn submit_sql(&self, host: &str, token: &str, sql: &str) -> String {
        let (status, body) = self.submit(host, token, &json!({ "query": sql })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{sql}: {body}");
        body["queryId"].as_str().unwrap().to_string()
    }

    /// GET /query/{id}.
    pub async fn query_status(&self, host: &str, token: &str, id: &str) -> (StatusCode, Value) {
        self.get(host, &format!("{QUERY}/{id}"), Some(token)).await
    }

    /// Polls GET /query/{id} until `state` (or any final state when `None`);
    /// gives up after 60 s. Returns the Query resource.
    pub async fn wait_for(&self, host: &str, token: &str, id: &str, state: Option<&str>) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (status, body) = self.query_status(host, token, id).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            let current = body["status"]["state"].as_str().unwrap().to_string();
            let reached = match state {
                Some(wanted) => current == wanted,
                None => FINAL_STATES.contains(&current.as_str()),
            };
            if reached {
                return body;
            }
            if state.is_some() && FINAL_STATES.contains(&current.as_str()) {
                panic!("query {id} ended {current} while waiting for {state:?}: {body}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "query {id} still {current}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Submits `sql` and waits for its final state; returns (queryId, resource).
    pub async fn run_sql(&self, host: &str, token: &str, sql: &str) -> (String, Value) {
        let id = self.submit_sql(host, token, sql).await;
        let resource = self.wait_for(host, token, &id, None).await;
        (id, resource)
    }

    /// GET /query/{id}/csv: asserts the 302 and returns the signed link.
    pub async fn csv_link(&self, host: &str, token: &str, id: &str) -> String {
        let response = self
            .request(reqwest::Method::GET, host, &format!("{QUERY}/{id}/csv"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FOUND);
        response.headers()["location"].to_str().unwrap().to_string()
    }

    /// GET /query/{id}/result, optionally with `next_token`.
    pub async fn result_page(
        &self,
        host: &str,
        token: &str,
        id: &str,
        next_token: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .request(reqwest::Method::GET, host, &format!("{QUERY}/{id}/result"))
            .bearer_auth(token);
        if let Some(next) = next_token {
            request = request.query(&[("next_token", next)]);
        }
        read(request.send().await.unwrap()).await
    }

    /// Runs `sql` to SUCCEEDED and returns the first page's data rows (header
    /// row dropped), NULL as `None`.
    pub async fn rows_of(&self, host: &str, token: &str, sql: &str) -> Vec<Vec<Option<String>>> {
        let (id, resource) = self.run_sql(host, token, sql).await;
        assert_eq!(
            resource["status"]["state"], "SUCCEEDED",
            "{sql}: {resource}"
        );
        let (status, page) = self.result_page(host, token, &id, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        page_rows(&page).into_iter().skip(1).collect()
    }
}

/// The cells of a result page, row by row (`VarCharValue` or `None`).
pub fn page_rows(page: &Value) -> Vec<Vec<Option<String>>> {
    page["resultSet"]["Rows"]
        .as_array()
        .expect("Rows")
        .iter()
        .map(|row| {
            row["Data"]
                .as_array()
                .expect("Data")
                .iter()
                .map(|cell| {
                    cell.get("VarCharValue")
                        .map(|v| v.as_str().unwrap().to_string())
                })
                .collect()
        })
        .collect()
}

/// The spec's friendly permission messages.
pub const DATA_DENIED: &str = "You seem to have a permissions problem. You are trying to access data you do not have permissions for.";
pub const EXECUTE_DENIED: &str = "You seem to have a permissions problem. You may be trying to perform a query you do not have permission to execute.";
pub const CREATE_DENIED: &str = "You don't have the right permissions to create tables there.";
pub const STATEMENT_DENIED: &str = "You don't have the right permissions to execute that query.";

/// A batch of `(trip_id, fare, city, service_client_id)` rows: `per_client`
/// rows for each service client, trip ids `client * 100 + i`, fare `1.5 * i`,
/// city NULL for every third row.
pub fn trips_batch(clients: &[i64], per_client: i64) -> RecordBatch {
    use datafusion::arrow::{
        array::{Float64Array, Int64Array, StringArray},
        datatypes::{DataType, Field, Schema},
    };
    let mut ids = Vec::new();
    let mut fares = Vec::new();
    let mut cities = Vec::new();
    let mut owners = Vec::new();
    for &client in clients {
        for i in 0..per_client {
            ids.push(client * 100 + i);
            fares.push(1.5 * i as f64);
            cities.push((i % 3 != 2).then(|| format!("city-{i}")));
            owners.push(client);
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("trip_id", DataType::Int64, false),
        Field::new("fare", DataType::Float64, true),
        Field::new("city", DataType::Utf8, true),
        Field::new("service_client_id", DataType::Int64, false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(Float64Array::from(fares)),
            Arc::new(StringArray::from(cities)),
            Arc::new(Int64Array::from(owners)),
        ],
    )
    .unwrap()
}

/// Seeds the demo lakes the query tests read:
/// - `demo_lake_v2.trips`: 2 rows each of service clients 1, 2 and 901;
/// - `demo_insights.summary`: 1 row each of 1, 2 and 901;
/// - `demo_data_input.raw`: 1 row each of 1 and 2;
/// - `demo_sandbox.scratch`: 1 row each of 1 and 2;
/// - `lab_lake.trips` (zone lab): 2 rows each of 1 and 3.
pub async fn seed_demo_lake(app: &TestApp) {
    app.import(
        None,
        "demo_lake_v2",
        "trips",
        &[trips_batch(&[1, 2, 901], 2)],
    )
    .await;
    app.import(
        None,
        "demo_insights",
        "summary",
        &[trips_batch(&[1, 2, 901], 1)],
    )
    .await;
    app.import(None, "demo_data_input", "raw", &[trips_batch(&[1, 2], 1)])
        .await;
    app.import(None, "demo_sandbox", "scratch", &[trips_batch(&[1, 2], 1)])
        .await;
    app.import(Some("lab"), "lab_lake", "trips", &[trips_batch(&[1, 3], 2)])
        .await;
}

/// The URL of a fresh, empty Postgres database on the server named by
/// `LAKEHOST_TEST_DATABASE_URL` (`eval "$(.ci/postgres)"` starts one). Only
/// tests marked `#[cfg_attr(not(lakehost_has_postgres), ignore = ...)]` call
/// it: the cfg is on when the variable is set (tests/build.rs), so a missing
/// variable here is a failure, never a skip.
pub async fn fresh_postgres_url() -> String {
    use sqlx::Connection as _;
    let admin_url = needed_variable("LAKEHOST_TEST_DATABASE_URL", ".ci/postgres");
    let name = format!("lakehost_test_{}", lakehost::store::new_id());
    let mut admin = sqlx::PgConnection::connect(&admin_url)
        .await
        .unwrap_or_else(|e| panic!("the Postgres server at {admin_url} answers: {e}"));
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let base = admin_url.rsplit_once('/').unwrap().0;
    format!("{base}/{name}")
}

/// The Python interpreter with the real upload clients (boto3, requests,
/// pyarrow) and the Comotion SDK that `.ci/python` prepares
/// (`LAKEHOST_TEST_PYTHON`), for tests marked
/// `#[cfg_attr(not(lakehost_has_python), ignore = ...)]`.
pub fn test_python() -> PathBuf {
    PathBuf::from(needed_variable("LAKEHOST_TEST_PYTHON", ".ci/python"))
}

/// The Python interpreter with Superset's Flight SQL driver (flightsql-dbapi
/// on SQLAlchemy 1.4) that `.ci/python` prepares in a venv of its own
/// (`LAKEHOST_TEST_SUPERSET_PYTHON`), for tests marked
/// `#[cfg_attr(not(lakehost_has_superset), ignore = ...)]`.
pub fn superset_python() -> PathBuf {
    PathBuf::from(needed_variable(
        "LAKEHOST_TEST_SUPERSET_PYTHON",
        ".ci/python",
    ))
}

/// The S3 endpoint of the throwaway S3 server `.ci/s3` starts
/// (`LAKEHOST_TEST_S3_ENDPOINT`; the lake reads the standard `AWS_*`
/// variables it exports too), for tests marked
/// `#[cfg_attr(not(lakehost_has_s3), ignore = ...)]`.
pub fn s3_endpoint() -> String {
    needed_variable("LAKEHOST_TEST_S3_ENDPOINT", ".ci/s3")
}

/// The value of `variable`, which tests/build.rs saw set (or `CI` is set,
/// where every part must be there): its absence fails the test that needs it.
pub fn needed_variable(variable: &str, script: &str) -> String {
    std::env::var(variable)
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "{variable} is not set, but this build runs the tests that need it \
                 (it was set when the tests were built, or CI is): eval \"$({script})\""
            )
        })
}

/// Runs one command of `tests/python/upload_client.py` (a real boto3,
/// requests or pyarrow call) and returns the JSON it prints.
pub async fn upload_client(python: &std::path::Path, command: &str, args: &Value) -> Value {
    python_client(python, "upload_client.py", command, args).await
}

/// A self-signed certificate for `localhost` (and 127.0.0.1), written as `cert.pem` and
/// `key.pem` in `dir`: its PEM text and the two paths (`server.tls_cert`,
/// `server.tls_key`).
pub fn localhost_certificate(dir: &std::path::Path) -> (String, PathBuf, PathBuf) {
    let names = vec!["localhost".into(), "127.0.0.1".into()];
    let cert = rcgen::generate_simple_self_signed(names).unwrap();
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    (cert.cert.pem(), cert_path, key_path)
}

/// Runs one command of `tests/python/pg_client.py` (psycopg 3) and returns
/// the JSON it prints.
pub async fn pg_client(python: &std::path::Path, command: &str, args: &Value) -> Value {
    python_client(python, "pg_client.py", command, args).await
}

/// Runs one command of `tests/python/flight_client.py` (ADBC's Flight SQL
/// driver, or pyarrow.flight) and returns the JSON it prints.
pub async fn flight_client(python: &std::path::Path, command: &str, args: &Value) -> Value {
    python_client(python, "flight_client.py", command, args).await
}

/// Runs one command of `tests/python/superset_client.py` (flightsql-dbapi's
/// SQLAlchemy dialect, as Superset drives Flight SQL) with the interpreter of
/// [`superset_python`] and returns the JSON it prints.
pub async fn superset_client(python: &std::path::Path, command: &str, args: &Value) -> Value {
    python_client(python, "superset_client.py", command, args).await
}

/// Runs one command of `tests/python/sdk_client.py` (the real Comotion SDK)
/// with `env` (see `comotion_sdk.rs`) and returns the JSON it prints.
pub async fn sdk_client(
    python: &std::path::Path,
    command: &str,
    args: &Value,
    env: &[(String, String)],
) -> Value {
    let script = python_dir().join("sdk_client.py");
    let mut run = tokio::process::Command::new(python);
    run.arg(script)
        .arg(command)
        .arg(args.to_string())
        .envs(env.iter().cloned());
    json_of("sdk_client.py", command, run).await
}

async fn python_client(
    python: &std::path::Path,
    script: &str,
    command: &str,
    args: &Value,
) -> Value {
    let mut run = tokio::process::Command::new(python);
    run.arg(python_dir().join(script))
        .arg(command)
        .arg(args.to_string());
    json_of(script, command, run).await
}

/// `tests/python`, the test clients' scripts.
pub fn python_dir() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

async fn json_of(script: &str, command: &str, mut run: tokio::process::Command) -> Value {
    let output = run.output().await.expect("python runs");
    assert!(
        output.status.success(),
        "{script} {command} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} {command} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// A parquet file of `batch`, as the parquet crate writes it.
pub fn parquet_bytes(batch: &RecordBatch) -> Vec<u8> {
    parquet_bytes_repeated(batch, 1)
}

/// A parquet file of `batch` written `times` times over (many rows in a
/// small file when the batch compresses well).
pub fn parquet_bytes_repeated(batch: &RecordBatch, times: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
    for _ in 0..times {
        writer.write(batch).unwrap();
    }
    writer.close().unwrap();
    bytes
}

/// The repository's default load manifest (`pipelines/load.toml`).
pub fn default_load_manifest() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../pipelines/load.toml"
    ))
    .expect("pipelines/load.toml")
}

/// A pipelines folder (for `pipeline.dir`) whose demo org runs `manifest` as
/// its load pipeline; it lasts as long as the returned directory.
pub fn demo_load_pipelines(manifest: &str) -> tempfile::TempDir {
    let pipelines = tempfile::tempdir().expect("temp dir");
    let org_dir = pipelines.path().join("orgs/demo");
    std::fs::create_dir_all(&org_dir).expect("orgs/demo");
    std::fs::write(org_dir.join("load.toml"), manifest).expect("load.toml");
    pipelines
}

/// Points `config.pipeline.dir` at a fresh directory whose demo org runs
/// `manifest` as its daily pipeline.
pub fn with_daily_manifest(config: &mut Config, manifest: &str) {
    let dir = config.storage.data_dir.join("pipelines");
    std::fs::create_dir_all(dir.join("orgs/demo")).unwrap();
    std::fs::write(dir.join("orgs/demo/daily.toml"), manifest).unwrap();
    config.pipeline.dir = dir;
}

/// A daily run of one test step that spins `ms` and then passes.
pub fn pause_manifest(ms: u64) -> String {
    format!(
        "version = 1\n[[steps]]\nname = \"pause\"\ncomponent = \"builtin:daily_pause\"\n\
         [steps.config]\nms = {ms}\n"
    )
}

pub const LOAD: &str = "/v2/load";

impl TestApp {
    /// The upload endpoint's address, as the descriptors name it.
    pub fn upload_endpoint(&self) -> String {
        format!("http://localhost:{}", self.upload_addr.port())
    }

    /// POST `path` with a raw body on `host`; status and JSON body.
    pub async fn post_raw(
        &self,
        host: &str,
        path: &str,
        token: &str,
        body: &str,
    ) -> (StatusCode, Value) {
        let response = self
            .request(reqwest::Method::POST, host, path)
            .bearer_auth(token)
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("request sent");
        read(response).await
    }

    /// POST /load on the demo Org API; panics unless 202; returns the loadId.
    pub async fn create_load(&self, token: &str, body: &Value) -> String {
        let (status, reply) = self
            .post_raw(ORG_HOST, LOAD, token, &body.to_string())
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
        reply["loadId"].as_str().expect("loadId").to_string()
    }

    /// POST /load/{id}/file on the demo Org API; panics unless 200.
    pub async fn file_descriptor(
        &self,
        token: &str,
        load_id: &str,
        file_key: Option<&str>,
    ) -> Value {
        self.file_descriptor_on(ORG_HOST, token, load_id, file_key)
            .await
    }

    /// POST /load/{id}/file on `host`'s API; panics unless 200.
    pub async fn file_descriptor_on(
        &self,
        host: &str,
        token: &str,
        load_id: &str,
        file_key: Option<&str>,
    ) -> Value {
        let body = match file_key {
            Some(key) => json!({ "file_key": key }).to_string(),
            None => String::new(),
        };
        let (status, reply) = self
            .post_raw(host, &format!("{LOAD}/{load_id}/file"), token, &body)
            .await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        reply
    }

    /// The staged bytes of a descriptor's object, if any.
    pub async fn staged_object(&self, descriptor: &Value) -> Option<Vec<u8>> {
        use object_store::ObjectStoreExt as _;
        let path = lakehost::load::staging_path(descriptor["path"].as_str().unwrap());
        match self.lake.object_store().get(&path).await {
            Ok(result) => Some(result.bytes().await.unwrap().to_vec()),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("reading staging: {e}"),
        }
    }
}

impl TestApp {
    /// Puts `batch` as parquet (the parquet crate's writer) into staging as
    /// the file `file_key` of `load_id` and records the upload, as a finished
    /// upload would (the upload routes have their own tests).
    pub async fn stage_file(
        &self,
        token: &str,
        load_id: &str,
        file_key: &str,
        batch: &RecordBatch,
    ) {
        self.stage_file_on(ORG_HOST, token, load_id, file_key, batch)
            .await
    }

    /// `stage_file` for a load of `host`'s API (a Zone API, say).
    pub async fn stage_file_on(
        &self,
        host: &str,
        token: &str,
        load_id: &str,
        file_key: &str,
        batch: &RecordBatch,
    ) {
        self.stage_bytes_on(host, token, load_id, file_key, parquet_bytes(batch))
            .await
    }

    /// Uploads `bytes` as a file of the load, whatever they are, as the
    /// upload endpoint records it.
    pub async fn stage_bytes_on(
        &self,
        host: &str,
        token: &str,
        load_id: &str,
        file_key: &str,
        bytes: Vec<u8>,
    ) {
        use object_store::ObjectStoreExt as _;
        let descriptor = self
            .file_descriptor_on(host, token, load_id, Some(file_key))
            .await;
        let size = bytes.len() as i64;
        let path = lakehost::load::staging_path(descriptor["path"].as_str().unwrap());
        self.lake
            .object_store()
            .put(&path, bytes.into())
            .await
            .unwrap();
        assert!(
            self.store
                .record_upload(load_id, file_key, size, 1)
                .await
                .unwrap()
        );
    }

    /// POST /load on `host`, one staged file of `batch`, POST commit (202):
    /// the loadId of a commit now running.
    pub async fn start_commit_on(
        &self,
        host: &str,
        token: &str,
        batch: &RecordBatch,
        check_sum: Value,
    ) -> String {
        let body = json!({"load_type": "APPEND_ONLY", "table_name": "trips"});
        let (status, created) = self.post_raw(host, LOAD, token, &body.to_string()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{created}");
        let id = created["loadId"].as_str().expect("loadId").to_string();
        self.stage_file_on(host, token, &id, "part_1", batch).await;
        let commit = json!({ "check_sum": check_sum }).to_string();
        let (status, reply) = self
            .post_raw(host, &format!("{LOAD}/{id}/commit"), token, &commit)
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
        id
    }

    /// POST /load/{id}/commit with a raw body.
    pub async fn commit(&self, token: &str, load_id: &str, body: &str) -> (StatusCode, Value) {
        self.post_raw(ORG_HOST, &format!("{LOAD}/{load_id}/commit"), token, body)
            .await
    }

    /// Polls GET /load/{id} until SUCCESS or FAIL (at most 60 s); the body.
    pub async fn wait_for_load(&self, token: &str, load_id: &str) -> Value {
        self.wait_for_load_on(ORG_HOST, token, load_id).await
    }

    /// [`Self::wait_for_load`] on `host`'s API.
    pub async fn wait_for_load_on(&self, host: &str, token: &str, load_id: &str) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (status, body) = self
                .get(host, &format!("{LOAD}/{load_id}"), Some(token))
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            if matches!(body["LoadStatus"].as_str(), Some("SUCCESS" | "FAIL")) {
                return body;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "load {load_id} still {body}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The demo org's DailyRun API host and paths.
pub const DAILYRUN_HOST: &str = "api.demo.localhost";
pub const DAILYRUN_START: &str = "/dailyRun/start_execution";
pub const DAILYRUN_STATUS: &str = "/dailyRun/execution_status";

/// A daily run of one `sql_transform` step, named refresh, that replaces
/// `table` of the insights database with the rows of `sql`; `limits` are
/// more keys of the step (`time_limit_ms = 500`), or empty.
pub fn refresh_manifest_with(table: &str, sql: &str, limits: &str) -> String {
    format!(
        "version = 1\n[[steps]]\nname = \"refresh\"\ncomponent = \"builtin:sql_transform\"\n\
         grants = [\"lake-sql\", \"log\"]\n{limits}\n[[steps.config.tables]]\ntable = \"{table}\"\nsql = \"{sql}\"\n"
    )
}

/// [`refresh_manifest_with`] the step's default limits.
pub fn refresh_manifest(table: &str, sql: &str) -> String {
    refresh_manifest_with(table, sql, "")
}

impl TestApp {
    /// A daily-run token with every dailyrun scope of the demo org.
    pub fn daily_token(&self) -> String {
        let mut claims = self.valid_claims("demo");
        claims["scope"] = json!(
            "dailyrun:enabled:read dailyrun:enabled:write dailyrun:execution:read dailyrun:execution:write"
        );
        self.sign("demo", &claims)
    }

    /// POST /dailyRun/start_execution of the demo org.
    pub async fn start_daily_run(&self, token: &str) -> (StatusCode, Value) {
        self.post_raw(DAILYRUN_HOST, DAILYRUN_START, token, "")
            .await
    }

    /// The demo org's latest execution once it is no longer RUNNING (at
    /// most 30 s).
    pub async fn wait_for_daily_run(&self, token: &str) -> Value {
        let latest = format!("{DAILYRUN_STATUS}?mode=latest");
        for _ in 0..600 {
            let (code, run) = self.get(DAILYRUN_HOST, &latest, Some(token)).await;
            assert_eq!(code, StatusCode::OK, "{run}");
            if run["status"] != "RUNNING" {
                return run;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the daily run did not end within 30 s");
    }
}

/// The most the test process's resident memory (VmRSS in /proc) grew above
/// what it was while `work` ran, in bytes, sampled every 2 ms. The server
/// runs in this process, so its memory is in the figure, along with that of
/// any test running meanwhile (which can only add to it); two measurements
/// never overlap.
pub async fn rss_growth_while<T>(work: impl std::future::Future<Output = T>) -> (T, u64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _measuring = ONE_AT_A_TIME.lock().await;
    fn resident_bytes() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .expect("VmRSS in /proc/self/status");
        kib * 1024
    }
    let before = resident_bytes();
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(before));
    let sampler = {
        let (done, peak) = (done.clone(), peak.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(resident_bytes(), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let outcome = work.await;
    done.store(true, Ordering::Relaxed);
    sampler.join().expect("the sampler ends");
    let peak = peak.load(Ordering::Relaxed).max(resident_bytes());
    (outcome, peak.saturating_sub(before))
}

/// Runs one command of `tests/python/result_client.py` (pyarrow, pandas and
/// DuckDB reading a typed result from a URL) and returns the JSON it prints.
pub async fn result_client(python: &std::path::Path, command: &str, args: &Value) -> Value {
    python_client(python, "result_client.py", command, args).await
}

/// POST /query with `Prefer` set to `prefer`; status, `Preference-Applied`, body.
pub async fn submit_preferring(
    app: &TestApp,
    token: &str,
    prefer: &str,
    body: &Value,
) -> (StatusCode, Option<String>, Value) {
    let response = app
        .request(reqwest::Method::POST, ORG_HOST, QUERY)
        .bearer_auth(token)
        .header("Prefer", prefer)
        .json(body)
        .send()
        .await
        .unwrap();
    let applied = response
        .headers()
        .get("preference-applied")
        .map(|v| v.to_str().unwrap().to_string());
    let (status, body) = read(response).await;
    (status, applied, body)
}
