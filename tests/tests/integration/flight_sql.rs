//! Arrow Flight SQL (issue 20, its first part): real clients on a real port.
//! ADBC's Flight SQL driver and pyarrow.flight (tests/python/flight_client.py)
//! run statements with a bearer token and with a client id and secret; the
//! same refusals as REST (the spec's texts), the same rows, jobs that
//! `GET /v2/query/{id}` shows; catalog listings that hide what the caller
//! may not read; zone callers; bad credentials and garbage bytes.

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use lakehost_tests::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

const ORG_HOST: &str = "demo.api.localhost";
const TRIPS: &str = "SELECT trip_id, fare, city, service_client_id FROM demo_lake_v2.trips \
                     ORDER BY trip_id";

async fn flight_app() -> TestApp {
    let app = spawn_app_with(|config| {
        config.server.flight_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    seed_demo_lake(&app).await;
    app
}

fn uri(app: &TestApp) -> String {
    format!("grpc://{}", app.flight_addr.expect("flight listener"))
}

/// `args` plus the server's address.
fn with_uri(app: &TestApp, mut args: Value) -> Value {
    args["uri"] = json!(uri(app));
    args
}

fn error_of(answer: &Value) -> &str {
    answer["error"]
        .as_str()
        .unwrap_or_else(|| panic!("expected a refusal, got {answer}"))
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn adbc_reads_what_rest_reads_with_the_engines_types() {
    let python = test_python();
    let app = flight_app().await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let answer = flight_client(
        &python,
        "adbc_query",
        &with_uri(&app, json!({ "token": token, "sql": TRIPS })),
    )
    .await;
    assert_eq!(
        answer["columns"],
        json!(["trip_id", "fare", "city", "service_client_id"]),
        "{answer}"
    );
    assert_eq!(
        answer["types"],
        json!(["int64", "double", "string", "int64"])
    );
    let rest = app.rows_of(ORG_HOST, &token, TRIPS).await;
    let flight: Vec<Vec<Option<String>>> = answer["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| match v {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone()),
                    other => Some(other.to_string()),
                })
                .collect()
        })
        .collect();
    assert_eq!(flight.len(), 6);
    // REST's strings are the engine's text; numbers compare as numbers.
    for (flight_row, rest_row) in flight.iter().zip(&rest) {
        assert_eq!(flight_row[0], rest_row[0]);
        let fare = |v: &Option<String>| v.as_deref().map(|s| s.parse::<f64>().unwrap());
        assert_eq!(fare(&flight_row[1]), fare(&rest_row[1]));
        assert_eq!(flight_row[2], rest_row[2]);
        assert_eq!(flight_row[3], rest_row[3]);
    }
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_statement_is_a_query_job_that_rest_shows() {
    let python = test_python();
    let app = flight_app().await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let sql = "SELECT count(*) AS n FROM demo_lake_v2.trips";
    let answer = flight_client(
        &python,
        "raw_statement",
        &with_uri(&app, json!({ "token": token, "sql": sql, "again": true })),
    )
    .await;
    assert_eq!(answer["announced"], json!(["int64"]), "{answer}");
    assert_eq!(answer["endpoints"], json!(1));
    assert_eq!(answer["rows"], json!([[6]]));
    let id = answer["app_metadata"]["queryId"]
        .as_str()
        .expect("query id");
    let (status, job) = app.query_status(ORG_HOST, &token, id).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(job["status"]["state"], "SUCCEEDED", "{job}");
    assert_eq!(job["query"], sql);
    // Its rows were streamed as it ran: the job says so, and kept no result.
    assert_eq!(job["via"], "flight-sql", "{job}");
    let not_kept = format!("Query {id} was streamed to its Flight SQL client as it ran");
    // (The spec's /csv answers 500 to any problem; `format` asks for a clear one.)
    for path in ["result", "csv?format=csv"] {
        let (status, body) = app
            .get(ORG_HOST, &format!("/v2/query/{id}/{path}"), Some(&token))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{path}: {body}");
        assert!(body.to_string().contains(&not_kept), "{path}: {body}");
    }
    // The spec's own /csv keeps its one failure answer.
    let (status, body) = app
        .get(ORG_HOST, &format!("/v2/query/{id}/csv"), Some(&token))
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body, json!({ "message": "Internal Server Error" }));
    // The ticket runs once: asked again, it says the rows were not kept.
    let again = answer["again"]["error"].as_str().expect("asked again");
    assert!(again.contains(&not_kept), "{answer}");
    // A query submitted over REST has no "via".
    let rest = app.submit_sql(ORG_HOST, &token, sql).await;
    let job = app.wait_for(ORG_HOST, &token, &rest, None).await;
    assert!(job.get("via").is_none(), "{job}");
    // Another caller cannot read it, over either front end.
    let other = app.token_of("user-2", &["ZoneAdmin"], "[0]");
    let (status, _) = app.query_status(ORG_HOST, &other, id).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let calls = flight_client(
        &python,
        "raw_query_calls",
        &with_uri(&app, json!({ "token": other, "query_id": id })),
    )
    .await;
    let refused = calls["do_get"]["error"].as_str().expect("DoGet refused");
    assert!(
        refused.contains(&format!("query {id} not found")),
        "{calls}"
    );
    // A ticket naming no query is refused the same way, and cancels nothing.
    let unknown = flight_client(
        &python,
        "raw_query_calls",
        &with_uri(
            &app,
            json!({ "token": token, "query_id": "no-such-query", "cancel": true }),
        ),
    )
    .await;
    for call in ["do_get", "cancel"] {
        let refused = unknown[call]["error"].as_str().expect("refused");
        assert!(
            refused.contains("query no-such-query not found"),
            "{unknown}"
        );
    }
    // Its owner asking by its id is told the rows were not kept.
    let again = flight_client(
        &python,
        "raw_query_calls",
        &with_uri(&app, json!({ "token": token, "query_id": id })),
    )
    .await;
    let refused = again["do_get"]["error"].as_str().expect("refused");
    assert!(refused.contains(&not_kept), "{again}");
    // A statement that is not a read runs as a stored job: its ticket is
    // its id, and its count can be fetched again.
    let create = "CREATE TABLE demo_sandbox.flight_made AS SELECT 1 AS x, 1 AS service_client_id";
    let answer = flight_client(
        &python,
        "raw_statement",
        &with_uri(
            &app,
            json!({ "token": token, "sql": create, "again": true }),
        ),
    )
    .await;
    assert_eq!(answer["rows"], json!([[1]]), "{answer}");
    assert_eq!(answer["again"], "rows", "{answer}");
    let id = answer["app_metadata"]["queryId"].as_str().unwrap();
    let job = app.wait_for(ORG_HOST, &token, id, Some("SUCCEEDED")).await;
    assert!(job.get("via").is_none(), "{job}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn rows_stream_while_the_query_runs_and_a_short_end_is_an_error() {
    let python = test_python();
    let app = flight_app().await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let stream = |sql: &str, leave_after: Option<u32>| {
        let args = with_uri(
            &app,
            json!({ "token": token, "sql": sql, "leave_after": leave_after }),
        );
        let python = python.clone();
        async move { flight_client(&python, "raw_stream", &args).await }
    };

    // Many batches, every row, in order of arrival.
    let many = "SELECT value FROM generate_series(1, 300000)";
    let answer = stream(many, None).await;
    assert_eq!(answer["end"], "complete", "{answer}");
    assert_eq!(answer["rows"], json!(300_000), "{answer}");
    assert!(answer["batches"].as_u64().unwrap() > 1, "{answer}");
    let id = answer["queryId"].as_str().unwrap();
    let job = app.wait_for(ORG_HOST, &token, id, Some("SUCCEEDED")).await;
    assert_eq!(job["via"], "flight-sql", "{job}");

    // A query that fails after sending rows: the stream ends with its
    // reason, never as if the rows were all of them, and the job FAILED.
    let failing = "SELECT 10 / (value - 200000) AS q FROM generate_series(1, 300000)";
    let answer = stream(failing, None).await;
    let error = answer["end"]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(error.contains("Divide by zero"), "{answer}");
    let id = answer["queryId"].as_str().unwrap();
    let job = app.wait_for(ORG_HOST, &token, id, Some("FAILED")).await;
    let reason = job["status"]["stateChangeReason"].as_str().unwrap();
    assert!(reason.contains("Divide by zero"), "{job}");

    // A client that leaves mid-stream stops the query.
    let endless = "SELECT value FROM generate_series(1, 1000000000000)";
    let answer = stream(endless, Some(2)).await;
    assert_eq!(answer["end"], "left", "{answer}");
    let id = answer["queryId"].as_str().unwrap();
    let job = app.wait_for(ORG_HOST, &token, id, Some("FAILED")).await;
    let reason = job["status"]["stateChangeReason"].as_str().unwrap();
    assert!(reason.contains("went away"), "{job}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn cancel_flight_info_stops_a_streaming_query() {
    let python = test_python();
    let app = flight_app().await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let endless = "SELECT count(*) FROM generate_series(1, 1000000000000)";
    let answer = flight_client(
        &python,
        "raw_cancel_while_streaming",
        &with_uri(
            &app,
            json!({ "token": token, "sql": endless, "rest": app.base, "host": ORG_HOST }),
        ),
    )
    .await;
    assert_eq!(answer["seen"], "RUNNING", "{answer}");
    assert_eq!(answer["cancel"], json!(["0801"]), "{answer}");
    let refused = answer["do_get"]["error"].as_str().expect("DoGet refused");
    assert!(refused.contains("cancelled"), "{answer}");
    let id = answer["queryId"].as_str().unwrap();
    let job = app.wait_for(ORG_HOST, &token, id, Some("CANCELLED")).await;
    assert_eq!(job["via"], "flight-sql", "{job}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_read_ticket_grants_nothing_and_its_run_keeps_the_time_limit() {
    let python = test_python();
    let app = spawn_app_with(|config| {
        config.server.flight_listen = Some("127.0.0.1:0".parse().unwrap());
        config.query.time_limit_s = 1;
    })
    .await;
    seed_demo_lake(&app).await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    // The admin's ticket, presented by an analyst of client 1: run with the
    // analyst's access, so refused with the spec's text, and nothing stored.
    let answer = flight_client(
        &python,
        "raw_statement",
        &with_uri(
            &app,
            json!({ "token": admin, "sql": TRIPS, "do_get_token": analyst }),
        ),
    )
    .await;
    assert!(error_of(&answer).contains(DATA_DENIED), "{answer}");
    let id = answer["app_metadata"]["queryId"].as_str().unwrap();
    for token in [&admin, &analyst] {
        let (status, _) = app.query_status(ORG_HOST, token, id).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    }
    // Its rows filtered to client 1, the analyst's ticket is the analyst's.
    let filtered =
        "SELECT trip_id FROM demo_lake_v2.trips WHERE service_client_id = 1 ORDER BY trip_id";
    let answer = flight_client(
        &python,
        "raw_statement",
        &with_uri(
            &app,
            json!({ "token": admin, "sql": filtered, "do_get_token": analyst }),
        ),
    )
    .await;
    assert_eq!(answer["rows"], json!([[100], [101]]), "{answer}");
    let id = answer["app_metadata"]["queryId"].as_str().unwrap();
    let (status, job) = app.query_status(ORG_HOST, &analyst, id).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["via"], "flight-sql", "{job}");

    // A streamed query past the time limit ends the stream with its reason.
    let endless = "SELECT count(*) FROM generate_series(1, 1000000000000)";
    let answer = flight_client(
        &python,
        "raw_stream",
        &with_uri(&app, json!({ "token": admin, "sql": endless })),
    )
    .await;
    let error = answer["end"]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(error.contains("time limit of 1 seconds"), "{answer}");
    let id = answer["queryId"].as_str().unwrap();
    let job = app.wait_for(ORG_HOST, &admin, id, Some("FAILED")).await;
    assert_eq!(job["via"], "flight-sql", "{job}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn refusals_keep_the_specs_texts_and_the_filter_reads() {
    let python = test_python();
    let app = flight_app().await;
    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    let query = |token: &str, sql: &str| with_uri(&app, json!({ "token": token, "sql": sql }));
    let refused = flight_client(&python, "adbc_query", &query(&analyst, TRIPS)).await;
    assert!(error_of(&refused).contains(DATA_DENIED), "{refused}");
    assert!(error_of(&refused).contains("PermissionDenied"), "{refused}");
    let filtered =
        "SELECT trip_id FROM demo_lake_v2.trips WHERE service_client_id = 1 ORDER BY trip_id";
    let answer = flight_client(&python, "adbc_query", &query(&analyst, filtered)).await;
    assert_eq!(answer["rows"], json!([[100], [101]]), "{answer}");

    let public = app.token_for(&["PublicConsumer"], "[1]");
    let refused = flight_client(&python, "adbc_query", &query(&public, TRIPS)).await;
    assert!(error_of(&refused).contains(EXECUTE_DENIED), "{refused}");

    let bad_sql = flight_client(&python, "adbc_query", &query(&analyst, "SELEC nonsense")).await;
    assert!(error_of(&bad_sql).contains("INVALID_ARGUMENT"), "{bad_sql}");

    // A query that fails while it runs: its reason, as the REST job shows it.
    let failing = flight_client(
        &python,
        "adbc_query",
        &query(
            &analyst,
            "SELECT CAST(city AS INT) FROM demo_lake_v2.trips WHERE service_client_id = 1",
        ),
    )
    .await;
    assert!(error_of(&failing).contains("Aborted"), "{failing}");
    assert!(error_of(&failing).contains("Cannot cast"), "{failing}");

    // Each call is counted by RPC and outcome, as REST requests are. ADBC
    // prepares every statement (DoAction), so its refusals come from there.
    let metrics = reqwest::get(format!("http://{}/metrics", app.metrics_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        r#"lakehost_flight_calls_total{call="DoAction",outcome="permission_denied"}"#,
        r#"lakehost_flight_calls_total{call="DoAction",outcome="invalid_argument"}"#,
        r#"lakehost_flight_calls_total{call="GetFlightInfo",outcome="ok"}"#,
        r#"lakehost_flight_calls_total{call="DoGet",outcome="ok"}"#,
    ] {
        assert!(metrics.contains(series), "{series} missing");
    }
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn prepared_statements_are_checked_when_prepared_and_run_as_jobs() {
    let python = test_python();
    let app = flight_app().await;
    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    let filtered = "SELECT trip_id, city FROM demo_lake_v2.trips WHERE service_client_id = 1 \
                    ORDER BY trip_id";
    let answer = flight_client(
        &python,
        "adbc_prepared",
        &with_uri(&app, json!({ "token": analyst, "sql": filtered })),
    )
    .await;
    assert_eq!(answer["types"], json!(["int64", "string"]), "{answer}");
    assert_eq!(answer["rows"], json!([[100, "city-0"], [101, "city-1"]]));
    let refused = flight_client(
        &python,
        "adbc_prepared",
        &with_uri(&app, json!({ "token": analyst, "sql": TRIPS })),
    )
    .await;
    assert!(error_of(&refused).contains(DATA_DENIED), "{refused}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn parameters_bound_to_a_prepared_statement_run_with_their_values() {
    let python = test_python();
    let app = flight_app().await;
    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    let run = |sql: &str, params: Value| {
        let args = with_uri(
            &app,
            json!({ "token": analyst, "sql": sql, "params": params }),
        );
        let python = python.clone();
        async move { flight_client(&python, "adbc_prepared", &args).await }
    };
    let filtered = "SELECT trip_id, city FROM demo_lake_v2.trips \
                    WHERE service_client_id = ? AND trip_id >= ? ORDER BY trip_id";
    let answer = run(filtered, json!([1, 101])).await;
    assert_eq!(answer["rows"], json!([[101, "city-1"]]), "{answer}");
    // A value is a value: quotes and comment marks stay in it.
    let answer = run("SELECT ? AS s, ? AS n", json!(["it's -- no comment", -2.5])).await;
    assert_eq!(
        answer["rows"],
        json!([["it's -- no comment", -2.5]]),
        "{answer}"
    );
    // The values are checked like the SQL: another client's rows are refused.
    let refused = run(filtered, json!([3, 0])).await;
    assert!(error_of(&refused).contains(DATA_DENIED), "{refused}");
    // Too few values: refused, not run.
    let refused = run("SELECT ?, ?", json!([1])).await;
    assert!(
        error_of(&refused).contains("1 parameters were bound, but the statement uses ?"),
        "{refused}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn bad_parameter_bindings_are_refused_clearly() {
    let python = test_python();
    let app = flight_app().await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let bind = |sql: &str, types: Value, batches: Value| {
        let args = with_uri(
            &app,
            json!({ "token": token, "sql": sql, "types": types, "batches": batches }),
        );
        let python = python.clone();
        async move { flight_client(&python, "raw_bind", &args).await }
    };
    // One row: the new handle runs the statement with its values.
    let answer = bind(
        "SELECT ? + 1, ?",
        json!(["int64", "string"]),
        json!([[[41, "x"]]]),
    )
    .await;
    assert_eq!(answer["rows"], json!([[42, "x"]]), "{answer}");
    // Several rows, in one batch or several, to a read: refused (an
    // INSERT ... VALUES takes them: flight_params.rs).
    for batches in [json!([[[1], [2]]]), json!([[[1]], [[2]]])] {
        let answer = bind("SELECT ?", json!(["int64"]), batches).await;
        assert!(error_of(&answer).contains("INSERT ... VALUES"), "{answer}");
    }
    // No values at all, or a batch without rows.
    for batches in [json!([]), json!([[]])] {
        let answer = bind("SELECT ?", json!(["int64"]), batches).await;
        assert!(
            error_of(&answer).contains("no parameter values"),
            "{answer}"
        );
    }
    // More values than placeholders.
    let answer = bind("SELECT ?", json!(["int64", "int64"]), json!([[[1, 2]]])).await;
    assert!(
        error_of(&answer).contains("2 parameters were bound"),
        "{answer}"
    );
    // A value of a type with no SQL literal (a null column has one: NULL).
    let answer = bind("SELECT ?", json!(["null"]), json!([[[null]]])).await;
    assert_eq!(answer["rows"], json!([[null]]), "{answer}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn cancel_flight_info_cancels_the_query_job() {
    let python = test_python();
    let app = flight_app().await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let endless = "SELECT count(*) FROM generate_series(1, 1000000000000)";
    let answer = flight_client(
        &python,
        "raw_cancel",
        &with_uri(&app, json!({ "token": token, "sql": endless })),
    )
    .await;
    // CancelFlightInfoResult { status: CANCEL_STATUS_CANCELLED (1) }.
    assert_eq!(answer["cancel"], json!(["0801"]), "{answer}");
    let id = answer["queryId"].as_str().expect("query id");
    let job = app.wait_for(ORG_HOST, &token, id, Some("CANCELLED")).await;
    assert_eq!(job["status"]["state"], "CANCELLED", "{job}");
    let refused = answer["do_get"]["error"].as_str().expect("DoGet refused");
    assert!(refused.contains("cancelled"), "{answer}");
    // Cancelling it again: CancelFlightInfoResult { status: NOT_CANCELLABLE (3) }.
    let again = flight_client(
        &python,
        "raw_query_calls",
        &with_uri(
            &app,
            json!({ "token": token, "query_id": id, "cancel": true }),
        ),
    )
    .await;
    assert_eq!(again["cancel"], json!(["0803"]), "{again}");

    // Another caller cannot cancel a running query, nor learn it exists.
    let running = app.submit_sql(ORG_HOST, &token, endless).await;
    app.wait_for(ORG_HOST, &token, &running, Some("RUNNING"))
        .await;
    let other = app.token_of("user-2", &["ZoneAdmin"], "[0]");
    let refused = flight_client(
        &python,
        "raw_query_calls",
        &with_uri(
            &app,
            json!({ "token": other, "query_id": running, "cancel": true }),
        ),
    )
    .await;
    assert!(
        refused["cancel"]["error"]
            .as_str()
            .unwrap()
            .contains("not found"),
        "{refused}"
    );
    let (_, job) = app.query_status(ORG_HOST, &token, &running).await;
    assert_eq!(job["status"]["state"], "RUNNING", "{job}");
    let stopped = app
        .request(
            reqwest::Method::DELETE,
            ORG_HOST,
            &format!("/v2/query/{running}"),
        )
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status(), StatusCode::OK);
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn tokens_are_checked_like_rest_and_credentials_are_exchanged() {
    let python = test_python();
    let app = flight_app().await;
    let count = "SELECT count(*) AS n FROM demo_insights.summary";
    // No token, a token of another org, a token without query:write.
    let none = flight_client(
        &python,
        "adbc_query",
        &with_uri(&app, json!({ "sql": count })),
    )
    .await;
    assert!(error_of(&none).contains("Unauthorized"), "{none}");
    assert!(error_of(&none).contains("UNAUTHENTICATED"), "{none}");
    let other_org = app.org_token_for("other", &["ZoneAdmin"], "[0]");
    let refused = flight_client(
        &python,
        "adbc_query",
        &with_uri(&app, json!({ "token": other_org, "sql": count })),
    )
    .await;
    assert!(error_of(&refused).contains("UNAUTHENTICATED"), "{refused}");
    let mut claims = app.valid_claims("demo");
    claims["scope"] = json!("query:read");
    let read_only = app.sign("demo", &claims);
    let refused = flight_client(
        &python,
        "adbc_query",
        &with_uri(&app, json!({ "token": read_only, "sql": count })),
    )
    .await;
    assert!(error_of(&refused).contains("Forbidden"), "{refused}");

    // A client id and secret of the embedded provider, through the handshake.
    let answer = flight_client(
        &python,
        "adbc_query",
        &with_uri(
            &app,
            json!({ "username": "demo-admin", "password": "demo-admin-secret", "sql": count }),
        ),
    )
    .await;
    assert_eq!(answer["rows"], json!([[3]]), "{answer}");
    let raw = flight_client(
        &python,
        "raw_statement",
        &with_uri(
            &app,
            json!({
                "username": "demo-own-analyst",
                "password": "demo-own-analyst-secret",
                "sql": "SELECT count(*) AS n FROM demo_insights.summary \
                        WHERE service_client_id IN (1, 2)",
            }),
        ),
    )
    .await;
    assert_eq!(raw["rows"], json!([[2]]), "{raw}");
    let wrong = flight_client(
        &python,
        "adbc_query",
        &with_uri(
            &app,
            json!({ "username": "demo-admin", "password": "not-the-secret", "sql": count }),
        ),
    )
    .await;
    assert!(error_of(&wrong).contains("Unauthorized"), "{wrong}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn over_tls_with_the_servers_certificate() {
    let python = test_python();
    let dir = tempfile::tempdir().unwrap();
    let (cert_pem, cert_path, key_path) = localhost_certificate(dir.path());
    let app = spawn_app_with(|config| {
        config.server.flight_listen = Some("127.0.0.1:0".parse().unwrap());
        config.server.tls_cert = Some(cert_path.clone());
        config.server.tls_key = Some(key_path.clone());
    })
    .await;
    let port = app.flight_addr.unwrap().port();
    // The handshake exchanges the secret with the embedded provider, which is
    // served over the same TLS.
    let answer = flight_client(
        &python,
        "adbc_query",
        &json!({
            "uri": format!("grpc+tls://localhost:{port}"),
            "tls_root_certs": cert_pem,
            "username": "demo-admin",
            "password": "demo-admin-secret",
            "sql": "SELECT 40 + 2 AS answer",
        }),
    )
    .await;
    assert_eq!(answer["rows"], json!([[42]]), "{answer}");
    // Plain gRPC to the TLS port gets nothing.
    let plain = flight_client(
        &python,
        "adbc_query",
        &json!({
            "uri": format!("grpc://localhost:{port}"),
            "username": "demo-admin",
            "password": "demo-admin-secret",
            "sql": "SELECT 1",
        }),
    )
    .await;
    assert!(plain["error"].is_string(), "{plain}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_zone_caller_reads_its_zone_and_only_with_a_zone_token() {
    let python = test_python();
    let app = flight_app().await;
    let zone_token = app.zone_token_for("lab", &["ZoneAdmin"], "[0]");
    let lab = json!({ "x-lakehost-zone": "lab" });
    let sql = "SELECT count(*) AS n FROM lab_lake.trips";
    let answer = flight_client(
        &python,
        "adbc_query",
        &with_uri(
            &app,
            json!({ "token": zone_token, "headers": lab, "sql": sql }),
        ),
    )
    .await;
    assert_eq!(answer["rows"], json!([[4]]), "{answer}");
    let org_token = app.token_for(&["ZoneAdmin"], "[0]");
    let refused = flight_client(
        &python,
        "adbc_query",
        &with_uri(
            &app,
            json!({ "token": org_token, "headers": lab, "sql": sql }),
        ),
    )
    .await;
    assert!(error_of(&refused).contains("UNAUTHENTICATED"), "{refused}");
    let unknown = flight_client(
        &python,
        "adbc_query",
        &with_uri(
            &app,
            json!({ "token": zone_token, "headers": { "x-lakehost-zone": "nope" }, "sql": sql }),
        ),
    )
    .await;
    assert!(error_of(&unknown).contains("no zone"), "{unknown}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn catalog_listings_hide_what_the_caller_may_not_read() {
    let python = test_python();
    let app = flight_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let listing = flight_client(
        &python,
        "adbc_objects",
        &with_uri(&app, json!({ "token": admin })),
    )
    .await;
    let tables = listing["tables"].as_array().expect("tables");
    for expected in [
        json!(["lakehost", "demo_lake_v2", "trips"]),
        json!(["lakehost", "demo_insights", "summary"]),
        json!(["lakehost", "demo_sandbox", "scratch"]),
    ] {
        assert!(tables.contains(&expected), "{expected} missing: {listing}");
    }
    let public = app.token_for(&["PublicConsumer"], "[1]");
    let listing = flight_client(
        &python,
        "adbc_objects",
        &with_uri(&app, json!({ "token": public })),
    )
    .await;
    let tables = listing["tables"].as_array().expect("tables");
    assert!(
        tables.contains(&json!(["lakehost", "demo_insights", "summary"])),
        "{listing}"
    );
    assert!(
        tables.iter().all(|t| t[1] == "demo_insights"),
        "a PublicConsumer sees only the insights: {listing}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn xdbc_type_info_lists_the_engines_types_to_a_caller_with_a_token() {
    let python = test_python();
    let app = flight_app().await;
    let token = app.token_for(&["PublicConsumer"], "[1]");
    let all = flight_client(
        &python,
        "raw_type_info",
        &with_uri(&app, json!({ "token": token })),
    )
    .await;
    let types = all["types"].as_array().unwrap_or_else(|| panic!("{all}"));
    let names: Vec<&str> = types.iter().filter_map(|t| t[0].as_str()).collect();
    for name in [
        "BOOLEAN",
        "INTEGER",
        "BIGINT",
        "DOUBLE",
        "DECIMAL",
        "VARCHAR",
        "DATE",
        "TIMESTAMP",
    ] {
        assert!(names.contains(&name), "{name} missing: {all}");
    }
    // Each type is one the engine plans: a cast to it runs.
    let casts: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, name)| format!("CAST(NULL AS {name}) AS c{i}"))
        .collect();
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let cast = flight_client(
        &python,
        "raw_statement",
        &with_uri(
            &app,
            json!({ "token": admin, "sql": format!("SELECT {}", casts.join(", ")) }),
        ),
    )
    .await;
    assert_eq!(cast["rows"].as_array().map(Vec::len), Some(1), "{cast}");
    assert!(
        types.contains(&json!(["VARCHAR", 12, "'"])),
        "text literals are quoted: {all}"
    );
    // One data type (XDBC BIGINT is -5), as JDBC's getTypeInfo filters.
    let bigint = flight_client(
        &python,
        "raw_type_info",
        &with_uri(&app, json!({ "token": token, "data_type": -5 })),
    )
    .await;
    assert_eq!(bigint["types"], json!([["BIGINT", -5, null]]), "{bigint}");
    // No token, no answer.
    let anonymous = flight_client(&python, "raw_type_info", &with_uri(&app, json!({}))).await;
    assert_eq!(
        anonymous["code"], "FlightUnauthenticatedError",
        "{anonymous}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn garbage_bytes_close_the_connection_and_the_server_goes_on() {
    let python = test_python();
    // Short timeouts: a connection left half-way through HTTP/2's opening
    // is closed by the idle timeout, as on every listener.
    let app = spawn_app_with(|config| {
        config.server.flight_listen = Some("127.0.0.1:0".parse().unwrap());
        config.server.request_timeout_s = 1;
        config.server.idle_timeout_s = 2;
        config.server.wire_idle_timeout_s = 2;
        config.query.time_limit_s = 1;
    })
    .await;
    let address = app.flight_addr.unwrap();
    for garbage in [
        &b"\x00\x01\x02 not a preface at all \xff\xfe"[..],
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04",
    ] {
        let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
        socket.write_all(garbage).await.unwrap();
        let mut answer = Vec::new();
        // The server ends the connection (EOF or a reset), it does not hang.
        let ended = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            socket.read_to_end(&mut answer),
        )
        .await;
        assert!(ended.is_ok(), "still open after 30 s");
    }
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let answer = flight_client(
        &python,
        "adbc_query",
        &with_uri(&app, json!({ "token": token, "sql": "SELECT 1 AS one" })),
    )
    .await;
    assert_eq!(answer["rows"], json!([[1]]), "{answer}");
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_drain_ends_a_streaming_query_failed_since_no_replica_can_go_on() {
    let python = test_python();
    let mut app = spawn_app_with(|config| {
        config.server.flight_listen = Some("127.0.0.1:0".parse().unwrap());
        config.server.drain_s = 2;
    })
    .await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let endless = "SELECT count(*) FROM generate_series(1, 1000000000000)";
    let args = with_uri(&app, json!({ "token": token, "sql": endless }));
    let client = tokio::spawn(async move { flight_client(&python, "raw_stream", &args).await });
    // Its job started (stored RUNNING when its rows were asked for).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while app.store.job_counts().await.unwrap().queries_running == 0 {
        assert!(std::time::Instant::now() < deadline, "never started");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    app.drain();
    app.drained().await;
    let answer = client.await.unwrap();
    let id = answer["queryId"].as_str().unwrap();
    // The stopped server's store, opened again.
    let store = lakehost::store::Store::open_sqlite(&app.data_dir.join("lakehost.db"))
        .await
        .unwrap();
    let job = store.query_job(id).await.unwrap().unwrap();
    assert_eq!(job.state.as_str(), "FAILED", "{job:?}");
    let reason = job.state_change_reason.unwrap_or_default();
    assert!(reason.contains("server stopped"), "{reason}");
    // Its client was told it ended short (how depends on whether the
    // status left before the listener closed), never a complete result.
    assert_ne!(answer["end"], "complete", "{answer}");
}

/// Superset's Flight SQL driver (flightsql-dbapi's SQLAlchemy dialect,
/// `datafusion+flightsql://`), driven as Superset drives a database: connect
/// (GetSqlInfo), list schemas, tables and columns, run a chart's SQL. Each
/// caller sees and reads only what REST lets it, refusals keep the spec's
/// texts, and client credentials go through the handshake.
#[tokio::test]
#[cfg_attr(
    not(lakehost_has_superset),
    ignore = "needs Superset's Flight SQL driver: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn superset_lists_and_queries_through_its_flight_sql_dialect() {
    let python = superset_python();
    let app = flight_app().await;
    let port = app.flight_addr.expect("flight listener").port();
    let superset = |auth: Value, more: Value| {
        let mut args = json!({ "host": "127.0.0.1", "port": port });
        for (key, value) in auth
            .as_object()
            .unwrap()
            .iter()
            .chain(more.as_object().unwrap())
        {
            args[key] = value.clone();
        }
        let python = python.clone();
        async move { superset_client(&python, "superset", &args).await }
    };

    // An admin adding the database with its client id and secret.
    let admin = json!({ "username": "demo-admin", "password": "demo-admin-secret" });
    let answer = superset(
        admin.clone(),
        json!({ "schema": "demo_lake_v2", "table": "trips", "sql": TRIPS }),
    )
    .await;
    assert!(answer.get("error").is_none(), "{answer}");
    for schema in ["demo_lake_v2", "demo_insights", "demo_sandbox"] {
        assert!(
            answer["schemas"]
                .as_array()
                .unwrap()
                .contains(&json!(schema)),
            "{schema} missing: {answer}"
        );
    }
    assert_eq!(answer["tables"], json!(["trips"]), "{answer}");
    let columns: Vec<&str> = answer["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // The partition columns are columns, as every front end shows them.
    assert_eq!(
        columns,
        [
            "trip_id",
            "fare",
            "city",
            "service_client_id",
            "svc$load_id"
        ]
    );
    assert_eq!(answer["rows"].as_array().unwrap().len(), 6, "{answer}");
    assert_eq!(answer["rows"][0][0], json!(100), "{answer}");

    // An own-client analyst with a token: all the trips are refused loudly,
    // its own service client's rows are read.
    let analyst = json!({ "token": app.token_for(&["OwnServiceClientAnalyst"], "[1]") });
    let refused = superset(analyst.clone(), json!({ "sql": TRIPS })).await;
    assert_eq!(refused["error"]["step"], "query", "{refused}");
    let message = refused["error"]["error"].as_str().unwrap();
    assert!(message.contains(DATA_DENIED), "{refused}");
    let filtered =
        "SELECT trip_id FROM demo_lake_v2.trips WHERE service_client_id = 1 ORDER BY trip_id";
    let answer = superset(analyst, json!({ "sql": filtered })).await;
    assert_eq!(answer["rows"], json!([[100], [101]]), "{answer}");

    // A PublicConsumer's listing holds only what it may read.
    let public = json!({ "token": app.token_for(&["PublicConsumer"], "[1]") });
    let answer = superset(public.clone(), json!({ "schema": "demo_insights" })).await;
    assert_eq!(answer["schemas"], json!(["demo_insights"]), "{answer}");
    assert_eq!(answer["tables"], json!(["summary"]), "{answer}");
    let refused = superset(public, json!({ "sql": TRIPS })).await;
    assert!(
        refused["error"]["error"]
            .as_str()
            .is_some_and(|m| m.contains(EXECUTE_DENIED)),
        "{refused}"
    );

    // A wrong secret is refused at connect.
    let wrong = superset(
        json!({ "username": "demo-admin", "password": "not-the-secret" }),
        json!({}),
    )
    .await;
    assert_eq!(wrong["error"]["step"], "connect", "{wrong}");
}
