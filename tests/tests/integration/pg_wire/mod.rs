//! The Postgres wire protocol (issue 20, its second part): psycopg 3
//! (tests/python/pg_client.py) and psql on a real port, over TLS, with a
//! client id and secret as user and password. The same refusals as REST
//! (the spec's texts, SQLSTATE 42501), the same rows, statements that are
//! jobs `GET /v2/query/{id}` shows; parameters; zone databases; bad
//! passwords, plain connections and garbage bytes refused clearly.

mod catalog;
mod catalog_caps;
mod cursors;
mod frames;
mod jdbc;
mod loopback;
mod tools_catalog;
mod tools_params;

use std::path::PathBuf;

use lakehost_tests::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const TRIPS: &str = "SELECT trip_id, fare, city, service_client_id FROM demo_lake_v2.trips \
                     ORDER BY trip_id";
const LAB_TRIPS: &str = "SELECT trip_id, service_client_id FROM lab_lake.trips ORDER BY trip_id";

/// A server with the Postgres listener (and so TLS), its lake seeded.
struct PgApp {
    app: TestApp,
    cert_path: PathBuf,
    _dir: tempfile::TempDir,
}

async fn pg_app() -> PgApp {
    let pg = pg_app_with(|_| {}).await;
    seed_demo_lake(&pg.app).await;
    pg
}

/// A server with the Postgres listener (and so TLS), its configuration
/// changed by `adjust`, its lake empty.
async fn pg_app_with(adjust: impl FnOnce(&mut lakehost::config::Config)) -> PgApp {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert_path, key_path) = localhost_certificate(dir.path());
    let app = spawn_app_with(|config| {
        config.server.pg_listen = Some("127.0.0.1:0".parse().unwrap());
        config.server.tls_cert = Some(cert_path.clone());
        config.server.tls_key = Some(key_path.clone());
        adjust(config);
    })
    .await;
    PgApp {
        app,
        cert_path,
        _dir: dir,
    }
}

impl PgApp {
    /// psycopg connection arguments: the server's certificate verified.
    fn conn(&self, user: &str, password: &str, dbname: &str) -> Value {
        json!({
            "host": "localhost",
            "port": self.app.pg_addr.expect("postgres listener").port(),
            "dbname": dbname,
            "user": user,
            "password": password,
            "sslmode": "verify-full",
            "sslrootcert": self.cert_path,
            "connect_timeout": 10,
        })
    }

    /// The results of `statements` run on one psycopg connection.
    async fn run(&self, python: &std::path::Path, conn: Value, statements: Value) -> Vec<Value> {
        let answer = pg_client(
            python,
            "run",
            &json!({ "conn": conn, "statements": statements }),
        )
        .await;
        answer["results"]
            .as_array()
            .unwrap_or_else(|| panic!("no results: {answer}"))
            .clone()
    }

    /// Why connecting was refused.
    async fn refused(&self, python: &std::path::Path, conn: Value) -> Value {
        let answer = pg_client(python, "run", &json!({ "conn": conn, "statements": [] })).await;
        answer["connect"].clone()
    }
}

fn admin(pg: &PgApp) -> Value {
    pg.conn("demo-admin", "demo-admin-secret", "demo")
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn psycopg_reads_what_rest_reads_and_each_statement_is_a_job() {
    let python = test_python();
    let pg = pg_app().await;
    let results = pg
        .run(
            &python,
            admin(&pg),
            json!([
                { "sql": TRIPS },
                { "sql": TRIPS, "binary": true },
                { "sql": "SELECT %s::BIGINT + 1 AS n, %s AS s", "params": [41, "it's"] },
                { "sql": "SHOW lakehost.last_query_id" },
                { "sql": "select pg_catalog.version()" },
                // Values and strings cannot change the statement around them.
                { "sql": "SELECT count(*) AS n FROM (VALUES (1), (2), (3)) AS t(x) \
                          WHERE x > 0-%s AND x < 0", "params": [-1] },
                { "sql": "SELECT 'FROM pg_catalog.pg_policy pol' AS note" },
                { "sql": "SELECT %s AS note", "params": ["see pg_catalog.pg_class"] },
            ]),
        )
        .await;
    assert_eq!(results[5]["rows"], json!([[0]]), "{}", results[5]);
    assert_eq!(
        results[6]["rows"],
        json!([["FROM pg_catalog.pg_policy pol"]]),
        "{}",
        results[6]
    );
    assert_eq!(results[7]["rows"], json!([["see pg_catalog.pg_class"]]));
    let version = results[4]["rows"][0][0].as_str().unwrap_or_default();
    assert!(
        version.starts_with("PostgreSQL 15.0 (lakehost "),
        "{}",
        results[4]
    );
    let text = &results[0];
    assert_eq!(
        text["columns"],
        json!(["trip_id", "fare", "city", "service_client_id"]),
        "{text}"
    );
    let token = pg.app.client_token("demo", "demo-admin").await;
    let rest = pg.app.rows_of(ORG_HOST, &token, TRIPS).await;
    let rows = text["rows"].as_array().unwrap();
    assert_eq!(rows.len(), rest.len());
    for (row, rest_row) in rows.iter().zip(&rest) {
        assert_eq!(row[0].to_string(), rest_row[0].clone().unwrap());
        let fare = rest_row[1].as_deref().map(|s| s.parse::<f64>().unwrap());
        assert_eq!(row[1].as_f64(), fare);
        assert_eq!(row[2].as_str(), rest_row[2].as_deref());
    }
    assert_eq!(
        results[1]["rows"], text["rows"],
        "binary rows: {}",
        results[1]
    );
    assert_eq!(results[1]["status"], "SELECT 6");
    assert_eq!(results[2]["rows"], json!([[42, "it's"]]), "{}", results[2]);

    // The parameters were inlined: the job shows what ran.
    let id = results[3]["rows"][0][0].as_str().expect("a query id");
    let (status, job) = pg.app.query_status(ORG_HOST, &token, id).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["status"]["state"], "SUCCEEDED", "{job}");
    assert_eq!(
        job["query"],
        "SELECT  (41) ::BIGINT + 1 AS n,  'it''s'  AS s"
    );
    // A read's rows went to the client as they came, and none were kept.
    assert_eq!(job["via"], "pg-wire", "{job}");
    let (status, body) = pg
        .app
        .get(ORG_HOST, &format!("/v2/query/{id}/result"), Some(&token))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let not_kept = format!("Query {id} was streamed to its Postgres client as it ran");
    assert!(body.to_string().contains(&not_kept), "{body}");
}

/// A read streams its rows as the query makes them (a result larger than a
/// channel of batches, none of it kept), and a read failing after its first
/// rows ends the statement with the job's reason; writes stay stored jobs.
#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn reads_stream_their_rows_and_a_failure_midway_ends_the_statement() {
    let python = test_python();
    let pg = pg_app().await;
    let results = pg
        .run(
            &python,
            admin(&pg),
            json!([
                { "sql": "SELECT value FROM generate_series(1, 300000)", "count_rows": true },
                { "sql": "SHOW lakehost.last_query_id" },
                { "sql": "SELECT CASE WHEN value < 250000 THEN value ELSE value / (value - value) \
                          END AS y FROM generate_series(1, 300000)" },
                { "sql": "SHOW lakehost.last_query_id" },
                { "sql": "CREATE TABLE demo_sandbox.streamed AS SELECT 1 AS x, 1 AS service_client_id" },
                { "sql": "SHOW lakehost.last_query_id" },
                // Refused by the text's caps before any parser sees it.
                { "sql": format!("SELECT {}x", "a.b[c@d.e[".repeat(11)) },
                // Past the parser's budget (the libFuzzer `sql` find).
                { "sql": String::from_utf8_lossy(&std::fs::read(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/corpus/fuzz/sql/timeout-nested-brackets"
                )).unwrap()) },
            ]),
        )
        .await;
    assert_eq!(results[0]["row_count"], 300_000, "{}", results[0]);
    assert_eq!(results[0]["status"], "SELECT 300000");
    let token = pg.app.client_token("demo", "demo-admin").await;
    let job_of = |result: &Value| {
        let id = result["rows"][0][0]
            .as_str()
            .expect("a query id")
            .to_string();
        let (app, token) = (&pg.app, token.clone());
        async move { app.wait_for(ORG_HOST, &token, &id, None).await }
    };
    let streamed = job_of(&results[1]).await;
    assert_eq!(streamed["status"]["state"], "SUCCEEDED", "{streamed}");
    assert_eq!(streamed["via"], "pg-wire", "{streamed}");

    let failed = &results[2];
    assert_eq!(failed["sqlstate"], "XX000", "{failed}");
    let message = failed["error"].as_str().unwrap_or_default();
    assert!(message.contains("Divide by zero"), "{failed}");
    let job = job_of(&results[3]).await;
    assert_eq!(job["status"]["state"], "FAILED", "{job}");
    assert!(
        job["status"]["stateChangeReason"]
            .as_str()
            .is_some_and(|reason| reason.contains("Divide by zero")),
        "{job}"
    );

    // A write is a stored job, as before.
    let write = job_of(&results[5]).await;
    assert_eq!(write["status"]["state"], "SUCCEEDED", "{write}");
    assert!(write.get("via").is_none(), "{write}");

    let refused = &results[6];
    assert_eq!(refused["sqlstate"], "42601", "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|m| m.contains("nests square brackets")),
        "{refused}"
    );
    let over_budget = &results[7];
    assert_eq!(over_budget["sqlstate"], "42601", "{over_budget}");
    assert!(
        over_budget["error"]
            .as_str()
            .is_some_and(|m| m.contains("takes the SQL parser more than 1000000 steps")),
        "{over_budget}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_bind_with_the_wrong_number_of_values_is_refused_with_08p01() {
    let python = test_python();
    let pg = pg_app().await;
    let results = pg
        .run(
            &python,
            admin(&pg),
            json!([
                { "sql": "SELECT $1::BIGINT + 1 AS n", "raw_params": ["41", "7"] },
                { "sql": "SELECT $1::BIGINT + $2 AS n", "raw_params": ["41"] },
                { "sql": "SELECT $1::BIGINT + 1 AS n", "raw_params": ["41"] },
                { "sql": "SELECT NULL::BIGINT AS n", "raw_params": [] },
            ]),
        )
        .await;
    assert_eq!(results[0]["sqlstate"], "08P01", "{}", results[0]);
    assert_eq!(
        results[0]["error"],
        "bind message supplies 2 parameters, but the statement requires 1"
    );
    assert_eq!(results[1]["sqlstate"], "08P01", "{}", results[1]);
    assert_eq!(
        results[1]["error"],
        "bind message supplies 1 parameters, but the statement uses $2"
    );
    // The session goes on, and a right binding runs.
    assert_eq!(results[2]["rows"], json!([["42"]]), "{}", results[2]);
    assert_eq!(results[3]["rows"], json!([[null]]), "{}", results[3]);
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn refusals_keep_the_specs_texts_under_sqlstate_42501() {
    let python = test_python();
    let pg = pg_app().await;
    // Zone lab's trips hold service clients 1 and 3; the analyst has 1 and 2.
    let analyst = pg.conn("demo-own-analyst", "demo-own-analyst-secret", "lab.demo");
    let results = pg
        .run(
            &python,
            analyst,
            json!([
                { "sql": LAB_TRIPS },
                { "sql": "SELECT trip_id FROM lab_lake.trips \
                          WHERE service_client_id = 1 ORDER BY trip_id" },
                { "sql": "SELEC nonsense" },
                { "sql": "SELECT CAST(city AS INT) FROM lab_lake.trips \
                          WHERE service_client_id = 1" },
            ]),
        )
        .await;
    assert_eq!(results[0]["error"], DATA_DENIED, "{}", results[0]);
    assert_eq!(results[0]["sqlstate"], "42501");
    assert_eq!(results[0]["severity"], "ERROR");
    assert_eq!(results[1]["rows"], json!([[100], [101]]), "{}", results[1]);
    assert_eq!(results[2]["sqlstate"], "42601", "{}", results[2]);
    assert_eq!(results[3]["sqlstate"], "XX000", "{}", results[3]);
    assert!(
        results[3]["error"]
            .as_str()
            .unwrap()
            .contains("Cannot cast"),
        "{}",
        results[3]
    );

    // Their own and the public service client's rows of the org's lake.
    let analyst = pg.conn("demo-own-analyst", "demo-own-analyst-secret", "demo");
    let results = pg.run(&python, analyst, json!([{ "sql": TRIPS }])).await;
    assert_eq!(results[0]["status"], "SELECT 6", "{}", results[0]);

    let public = pg.conn("demo-public", "demo-public-secret", "demo");
    let results = pg.run(&python, public, json!([{ "sql": TRIPS }])).await;
    assert_eq!(results[0]["error"], EXECUTE_DENIED, "{}", results[0]);
    assert_eq!(results[0]["sqlstate"], "42501");

    // Each statement and connection is counted by kind and SQLSTATE.
    let metrics = scrape(&pg.app).await;
    for series in [
        r#"lakehost_pg_statements_total{kind="query",sqlstate="42501"}"#,
        r#"lakehost_pg_statements_total{kind="query",sqlstate="00000"}"#,
        r#"lakehost_pg_statements_total{kind="session",sqlstate="00000"}"#,
        r#"lakehost_pg_connections_total{outcome="ready"}"#,
    ] {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
}

async fn scrape(app: &TestApp) -> String {
    reqwest::get(format!("http://{}/metrics", app.metrics_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn bad_passwords_databases_and_plain_connections_are_refused_clearly() {
    let python = test_python();
    let pg = pg_app().await;
    // libpq reports a refused connection by its text (psycopg has no SQLSTATE
    // for it); psql shows the same below.
    let refused = |answer: &Value| answer["error"].as_str().unwrap_or_default().to_string();
    let wrong = pg
        .refused(&python, pg.conn("demo-admin", "not-the-secret", "demo"))
        .await;
    assert!(
        refused(&wrong).contains("FATAL:  password authentication failed for user \"demo-admin\""),
        "{wrong}"
    );
    let unknown = pg
        .refused(&python, pg.conn("demo-admin", "demo-admin-secret", "nope"))
        .await;
    assert!(
        refused(&unknown).contains("FATAL:  database \"nope\" does not exist"),
        "{unknown}"
    );
    let no_zone = pg
        .refused(
            &python,
            pg.conn("demo-admin", "demo-admin-secret", "nope.demo"),
        )
        .await;
    assert!(
        refused(&no_zone).contains("database \"nope.demo\" does not exist"),
        "{no_zone}"
    );
    let mut plain = admin(&pg);
    plain["sslmode"] = json!("disable");
    let plain = pg.refused(&python, plain).await;
    assert!(
        refused(&plain).contains("FATAL:  lakehost requires SSL"),
        "{plain}"
    );
    // A client of another org's realm is not one of this org's.
    let other_org = pg
        .refused(&python, pg.conn("demo-admin", "demo-admin-secret", "other"))
        .await;
    assert!(
        refused(&other_org).contains("password authentication failed"),
        "{other_org}"
    );
    let metrics = scrape(&pg.app).await;
    assert!(
        metrics.contains(r#"lakehost_pg_connections_total{outcome="refused"}"#),
        "{metrics}"
    );

    // A zone's database is the Zone API: the zone caller's statements run.
    let zone = pg.conn("demo-admin", "demo-admin-secret", "lab.demo");
    let results = pg
        .run(&python, zone, json!([{ "sql": "SELECT 40 + 2 AS answer" }]))
        .await;
    assert_eq!(results[0]["rows"], json!([[42]]), "{}", results[0]);
}

/// psql with `args`, its password from the environment; (exit ok, stdout,
/// stderr).
async fn psql(
    pg: &PgApp,
    (user, password, dbname): (&str, &str, &str),
    args: &[&str],
) -> (bool, String, String) {
    let conninfo = format!(
        "host=localhost port={} dbname={dbname} user={user} sslmode=verify-full sslrootcert={}",
        pg.app.pg_addr.unwrap().port(),
        pg.cert_path.display()
    );
    psql_at(&conninfo, password, args).await
}

/// psql's exit status, stdout and stderr for `args`, connected with
/// `conninfo` and `password`.
async fn psql_at(conninfo: &str, password: &str, args: &[&str]) -> (bool, String, String) {
    let output = tokio::process::Command::new("psql")
        .arg(conninfo)
        .args(args)
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "10")
        .env_remove("PGSSLMODE")
        .output()
        .await
        .expect("psql runs (Debian's postgresql-client, installed by .ci/postgres)");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_psql),
    ignore = "needs psql: apt-get install postgresql-client (README, Tests)"
)]
async fn psql_runs_statements_and_shows_refusals() {
    let pg = pg_app().await;
    let admin = ("demo-admin", "demo-admin-secret", "demo");
    let (ok, out, err) = psql(
        &pg,
        admin,
        &["-At", "-c", "SELECT count(*) FROM demo_lake_v2.trips"],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "6");
    // Several statements in one simple query, in a transaction block.
    let (ok, out, err) = psql(
        &pg,
        admin,
        &["-At", "-c", "BEGIN; SELECT 1 + 1; SELECT 'two'; COMMIT"],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["BEGIN", "2", "two", "COMMIT"],
        "{out}"
    );
    // A session command does not swallow the statements after it.
    let (ok, _, err) = psql(&pg, admin, &["-c", "SET x = 1; SELEC 1"]).await;
    assert!(!ok, "the bad second statement was dropped");
    assert!(err.contains("ERROR:"), "{err}");
    let (ok, _, err) = psql(
        &pg,
        ("demo-own-analyst", "demo-own-analyst-secret", "lab.demo"),
        &["-At", "-c", LAB_TRIPS],
    )
    .await;
    assert!(!ok);
    assert!(err.contains(&format!("ERROR:  {DATA_DENIED}")), "{err}");
    let (ok, _, err) = psql(&pg, ("demo-admin", "wrong", "demo"), &["-c", "SELECT 1"]).await;
    assert!(!ok);
    assert!(
        err.contains("password authentication failed for user \"demo-admin\""),
        "{err}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn garbage_bytes_close_the_connection_and_the_server_goes_on() {
    let python = test_python();
    let pg = pg_app().await;
    let addr = pg.app.pg_addr.unwrap();
    let garbage: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        // A startup message claiming to be 2 GB long.
        &[0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0],
        // An SSLRequest, then bytes that are no TLS handshake.
        &[
            0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
        ],
        &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 1, 2, 3],
    ];
    for bytes in garbage {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(bytes).await.unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            stream.read_to_end(&mut answer),
        )
        .await;
        assert!(read.is_ok(), "{bytes:?}: the connection was not closed");
    }
    let results = pg
        .run(&python, admin(&pg), json!([{ "sql": "SELECT 1 AS one" }]))
        .await;
    assert_eq!(results[0]["rows"], json!([[1]]), "{}", results[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_session_outlives_its_token_by_exchanging_the_secret_again() {
    let python = test_python();
    let pg = pg_app().await;
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let args = json!({
        "conn": admin(&pg),
        "statements": [
            { "sql": "SELECT 1 AS one" },
            { "wait_for_file": go },
            { "sql": "SELECT 2 AS two" },
            { "sql": "SHOW lakehost.last_query_id" },
        ],
    });
    let client = tokio::spawn(async move { pg_client(&python, "run", &args).await });
    let ready = dir.path().join("go.ready");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ready.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the session never paused"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Past the token's lifetime (300 s with the embedded provider).
    pg.app.clock.advance(chrono::Duration::seconds(3_600));
    std::fs::write(&go, b"").unwrap();
    let answer = client.await.unwrap();
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results[0]["rows"], json!([[1]]), "{answer}");
    assert_eq!(results[1]["rows"], json!([[2]]), "{answer}");
    // The job ran as the same client, with the new token.
    let id = results[2]["rows"][0][0].as_str().expect("a query id");
    let token = pg.app.client_token("demo", "demo-admin").await;
    let (status, job) = pg.app.query_status(ORG_HOST, &token, id).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["status"]["state"], "SUCCEEDED");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_cancel_request_cancels_the_statements_job() {
    let python = test_python();
    let pg = pg_app().await;
    let answer = pg_client(
        &python,
        "cancel",
        &json!({
            "conn": admin(&pg),
            "sql": "SELECT count(*) FROM generate_series(1, 1000000000000)",
            "after_s": 1.5,
        }),
    )
    .await;
    assert_eq!(answer["finished"], true, "{answer}");
    assert_eq!(answer["sqlstate"], "57014", "{answer}");
    assert_eq!(answer["error"], "canceling statement due to user request");
    let id = answer["query_id"].as_str().expect("a query id");
    let token = pg.app.client_token("demo", "demo-admin").await;
    let job = pg.app.wait_for(ORG_HOST, &token, id, None).await;
    assert_eq!(job["status"]["state"], "CANCELLED", "{job}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn idle_sessions_are_closed_and_connections_are_capped() {
    let python = test_python();
    let dir = tempfile::tempdir().unwrap();
    let (_, cert_path, key_path) = localhost_certificate(dir.path());
    let app = spawn_app_with(|config| {
        config.server.pg_listen = Some("127.0.0.1:0".parse().unwrap());
        config.server.tls_cert = Some(cert_path.clone());
        config.server.tls_key = Some(key_path.clone());
        config.server.max_connections = 2;
        config.query.time_limit_s = 1;
        config.server.request_timeout_s = 1;
        config.server.idle_timeout_s = 2;
        config.server.wire_idle_timeout_s = 2;
    })
    .await;
    let pg = PgApp {
        app,
        cert_path,
        _dir: dir,
    };
    let addr = pg.app.pg_addr.unwrap();

    // Past the cap, a connection is closed before anything is read.
    let held = [
        tokio::net::TcpStream::connect(addr).await.unwrap(),
        tokio::net::TcpStream::connect(addr).await.unwrap(),
    ];
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        third.read_to_end(&mut answer),
    )
    .await;
    assert!(matches!(read, Ok(Ok(0))), "the third connection was served");
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    // A session silent for longer than server.wire_idle_timeout_s is closed.
    let go = pg._dir.path().join("go");
    let args = json!({
        "conn": admin(&pg),
        "autocommit": true,
        "statements": [
            { "sql": "SELECT 1 AS one" },
            { "wait_for_file": go },
            { "sql": "SELECT 2 AS two" },
        ],
    });
    let client = tokio::spawn(async move { pg_client(&python, "run", &args).await });
    let ready = pg._dir.path().join("go.ready");
    while !ready.exists() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    std::fs::write(&go, b"").unwrap();
    let answer = client.await.unwrap();
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results[0]["rows"], json!([[1]]), "{answer}");
    assert!(
        results[1]["error"].is_string(),
        "the idle session was kept: {answer}"
    );
}
