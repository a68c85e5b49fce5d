//! `Prefer: wait=N` on POST /query (issue 19): a query that ends within the
//! wait answers 200 with its Query resource and first page in one round
//! trip; one that does not answers the usual 202; a cancel or a failure ends
//! the wait with the final state; bad values are refused; and the answer
//! without the header is unchanged.

use std::time::Duration;

use lakehost_tests::{
    ORG_HOST, QUERY, TestApp, seed_demo_lake, spawn_app, spawn_app_with, spawn_in,
    submit_preferring,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A query that runs until stopped (a trillion rows).
const ENDLESS: &str = "SELECT count(*) FROM generate_series(1, 1000000000000)";

fn admin(app: &TestApp) -> String {
    app.token_for(&["ZoneAdmin"], "[0]")
}

#[tokio::test]
async fn a_query_that_ends_in_time_answers_with_its_resource_and_first_page() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let sql = "SELECT trip_id, city FROM demo_lake_v2.trips ORDER BY trip_id LIMIT 3";
    let (status, applied, body) =
        submit_preferring(&app, &token, "wait=10", &json!({ "query": sql })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(applied.as_deref(), Some("wait=10"));
    let id = body["queryId"].as_str().unwrap().to_string();
    // The same Query resource and page a poll and a GET /result would give.
    let (_, resource) = app.query_status(ORG_HOST, &token, &id).await;
    let (_, page) = app.result_page(ORG_HOST, &token, &id, None).await;
    let mut expected = resource.as_object().unwrap().clone();
    expected.extend(page.as_object().unwrap().clone());
    assert_eq!(body, Value::Object(expected));
    assert_eq!(body["status"]["state"], "SUCCEEDED");
    assert_eq!(body["query"], sql);
    assert_eq!(
        body["resultSet"]["Rows"][1]["Data"],
        json!([{"VarCharValue": "100"}, {"VarCharValue": "city-0"}])
    );
    assert_eq!(body["resultSet"]["Rows"].as_array().unwrap().len(), 4);
    assert!(body.get("nextToken").is_none(), "{body}");
}

#[tokio::test]
async fn a_longer_result_continues_with_the_next_token() {
    let app = spawn_app().await;
    let token = admin(&app);
    let sql = "SELECT value FROM generate_series(1, 2500) ORDER BY value";
    let (status, _, body) =
        submit_preferring(&app, &token, "wait=10", &json!({ "query": sql })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["resultSet"]["Rows"].as_array().unwrap().len(), 1001);
    let id = body["queryId"].as_str().unwrap();
    let token_text = body["nextToken"].as_str().expect("a next token");
    let (status, second) = app
        .result_page(ORG_HOST, &token, id, Some(token_text))
        .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(
        second["resultSet"]["Rows"][0]["Data"][0]["VarCharValue"],
        "1001"
    );
}

#[tokio::test]
async fn a_query_still_running_when_the_wait_passes_is_accepted_as_usual() {
    let app = spawn_app().await;
    let token = admin(&app);
    let started = std::time::Instant::now();
    let (status, applied, body) =
        submit_preferring(&app, &token, "wait=1", &json!({ "query": ENDLESS })).await;
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(applied.as_deref(), Some("wait=1"));
    let id = body["queryId"].as_str().unwrap();
    assert_eq!(body, json!({ "queryId": id }));
    let (_, resource) = app.query_status(ORG_HOST, &token, id).await;
    assert_eq!(resource["status"]["state"], "RUNNING");
    let cancelled = app
        .request(reqwest::Method::DELETE, ORG_HOST, &format!("{QUERY}/{id}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), StatusCode::OK);
}

/// The app's SQLite store, read-only.
async fn read_store(app: &TestApp) -> sqlx::SqlitePool {
    let url = format!(
        "sqlite://{}?mode=ro",
        app.data_dir.join("lakehost.db").display()
    );
    sqlx::SqlitePool::connect(&url).await.unwrap()
}

/// The ids of the caller's queries, read from the SQLite store.
async fn stored_query_ids(app: &TestApp) -> Vec<String> {
    use sqlx::Row as _;
    let pool = read_store(app).await;
    let rows = sqlx::query("SELECT id FROM query_jobs")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    rows.iter().map(|row| row.get::<String, _>("id")).collect()
}

#[tokio::test]
async fn a_cancel_while_waiting_ends_the_wait_with_the_cancelled_query() {
    let app = std::sync::Arc::new(spawn_app().await);
    let token = admin(&app);
    let waiting = {
        let (app, token) = (app.clone(), token.clone());
        tokio::spawn(async move {
            submit_preferring(&app, &token, "wait=20", &json!({ "query": ENDLESS })).await
        })
    };
    let id = loop {
        if let Some(id) = stored_query_ids(&app).await.pop() {
            break id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let cancelled = app
        .request(reqwest::Method::DELETE, ORG_HOST, &format!("{QUERY}/{id}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), StatusCode::OK);
    // The wait ends with the cancel: 200 CANCELLED, not the 202 of a wait run out.
    let (status, _, body) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["queryId"], id.as_str());
    assert_eq!(body["status"]["state"], "CANCELLED");
    assert!(body.get("resultSet").is_none(), "{body}");
}

#[tokio::test]
async fn a_query_that_fails_while_waiting_answers_its_reason() {
    let app = spawn_app_with(|config| config.query.time_limit_s = 1).await;
    let token = admin(&app);
    let (status, _, body) =
        submit_preferring(&app, &token, "wait=20", &json!({ "query": ENDLESS })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"]["state"], "FAILED");
    assert_eq!(
        body["status"]["stateChangeReason"],
        "Query exhausted its time limit of 1 seconds."
    );
    assert!(body.get("resultSet").is_none(), "{body}");
}

#[tokio::test]
async fn bad_waits_are_refused_and_nothing_runs() {
    let app = spawn_app().await;
    let token = admin(&app);
    for prefer in ["wait=26", "wait=-1", "wait=soon", "wait", "wait=1.5"] {
        let (status, applied, body) =
            submit_preferring(&app, &token, prefer, &json!({ "query": "SELECT 1" })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{prefer}: {body}");
        assert_eq!(
            body,
            json!({"message": "InvalidParameterError: Prefer wait must be a whole number of seconds from 0 to 25."}),
            "{prefer}"
        );
        assert!(applied.is_none());
    }
    assert!(stored_query_ids(&app).await.is_empty());
    // Preferences lakehost does not know are ignored, as RFC 7240 asks.
    let (status, applied, body) = submit_preferring(
        &app,
        &token,
        "respond-async, handling=lenient",
        &json!({ "query": "SELECT 1" }),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(applied.is_none());
    // SQL errors still answer the POST, wait or not.
    let (status, _, body) =
        submit_preferring(&app, &token, "wait=5", &json!({ "query": "SELEC 1" })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn wait_zero_looks_once() {
    let app = spawn_app().await;
    let token = admin(&app);
    let (status, applied, body) =
        submit_preferring(&app, &token, "wait=0", &json!({ "query": ENDLESS })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(applied.as_deref(), Some("wait=0"));
    let id = body["queryId"].as_str().unwrap();
    let cancelled = app
        .request(reqwest::Method::DELETE, ORG_HOST, &format!("{QUERY}/{id}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_wait_longer_than_the_gateway_allows_still_answers_the_query_id() {
    let app = spawn_app_with(|config| config.server.request_timeout_s = 3).await;
    let token = admin(&app);
    // Without the cut, the gateway's 504 would answer after 3 s.
    let (status, applied, body) =
        submit_preferring(&app, &token, "wait=25", &json!({ "query": ENDLESS })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(applied.as_deref(), Some("wait=25"));
    let id = body["queryId"].as_str().unwrap();
    let (_, resource) = app.query_status(ORG_HOST, &token, id).await;
    assert_eq!(resource["status"]["state"], "RUNNING");
}

#[tokio::test]
async fn a_query_another_replica_runs_ends_the_wait_through_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = lakehost::clock::ManualClock::new();
    let busy = spawn_in(dir.path().to_path_buf(), clock.clone(), |config| {
        config.query.workers = 1;
    })
    .await;
    let token = admin(&busy);
    let endless = busy.submit_sql(ORG_HOST, &token, ENDLESS).await;
    busy.wait_for(ORG_HOST, &token, &endless, Some("RUNNING"))
        .await;
    let idle = spawn_in(dir.path().to_path_buf(), clock, |_| {}).await;
    // The busy replica has no free worker: the query waits QUEUED for the
    // idle one, which claims and runs it; the busy one's wait sees its end.
    let (status, _, body) = submit_preferring(
        &busy,
        &token,
        "wait=20",
        &json!({ "query": "SELECT 42 AS n" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"]["state"], "SUCCEEDED");
    assert_eq!(
        body["resultSet"]["Rows"][1]["Data"],
        json!([{"VarCharValue": "42"}])
    );
    let (_, ran_it) = idle
        .query_status(ORG_HOST, &admin(&idle), body["queryId"].as_str().unwrap())
        .await;
    assert_eq!(ran_it["status"]["state"], "SUCCEEDED", "{ran_it}");
    let cancelled = busy
        .request(
            reqwest::Method::DELETE,
            ORG_HOST,
            &format!("{QUERY}/{endless}"),
        )
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), StatusCode::OK);
}

#[tokio::test]
async fn the_waited_page_comes_in_the_shape_accept_asks_for() {
    let app = spawn_app().await;
    let token = admin(&app);
    let sql = "SELECT 7 AS n, 'x' AS s, CAST(NULL AS INT) AS z";
    let response = app
        .request(reqwest::Method::POST, ORG_HOST, QUERY)
        .bearer_auth(&token)
        .header("Prefer", "wait=10")
        .header("Accept", "application/json; types=native")
        .json(&json!({ "query": sql }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/json; types=native"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["resultSet"]["Rows"][1]["Data"], json!([7, "x", null]));
    // An Accept that allows no JSON is refused before anything runs.
    let response = app
        .request(reqwest::Method::POST, ORG_HOST, QUERY)
        .bearer_auth(&token)
        .header("Prefer", "wait=10")
        .header("Accept", "text/html")
        .json(&json!({ "query": sql }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_ACCEPTABLE);
    assert_eq!(stored_query_ids(&app).await.len(), 1);
    // Without a wait, Accept is not read: the spec's 202.
    let response = app
        .request(reqwest::Method::POST, ORG_HOST, QUERY)
        .bearer_auth(&token)
        .header("Accept", "text/html")
        .json(&json!({ "query": sql }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}

/// The stored row of query `id`: (state, attempts, lease owner, submitted,
/// started and completed at).
async fn stored_job(app: &TestApp, id: &str) -> (String, i64, Option<String>, i64, i64, i64) {
    use sqlx::Row as _;
    let pool = read_store(app).await;
    let row = sqlx::query(
        "SELECT state, attempts, lease_owner, submitted_at, started_at, completed_at \
         FROM query_jobs WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    (
        row.get("state"),
        row.get("attempts"),
        row.get("lease_owner"),
        row.get("submitted_at"),
        row.get("started_at"),
        row.get("completed_at"),
    )
}

/// The files under the lake's `_results` directory.
fn result_files(app: &TestApp) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, found);
            } else {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(&app.data_dir.join("lake").join("_results"), &mut found);
    found
}

#[tokio::test]
async fn a_waited_query_that_ends_at_once_is_stored_once_final_and_reads_back_the_same() {
    // By default a small result lives in its job's row and writes no file
    // until a link asks for one; with `result_in_store_bytes = 0` its CSV is
    // written to the lake at once (an integer reads back from the CSV: its
    // Arrow copy is made when first asked for).
    for in_store in [64 * 1024, 0] {
        let app = spawn_app_with(|config| config.query.result_in_store_bytes = in_store).await;
        let token = admin(&app);
        let (status, _, body) = submit_preferring(
            &app,
            &token,
            "wait=10",
            &json!({ "query": "SELECT 1 AS one" }),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let id = body["queryId"].as_str().unwrap();
        let (state, attempts, lease_owner, submitted, started, completed) =
            stored_job(&app, id).await;
        assert_eq!(
            (state.as_str(), attempts, lease_owner),
            ("SUCCEEDED", 1, None)
        );
        assert!(
            submitted <= started && started <= completed,
            "{submitted} {started} {completed}"
        );
        let (_, resource) = app.query_status(ORG_HOST, &token, id).await;
        assert_eq!(resource["status"], body["status"]);
        assert_eq!(resource["statistics"], body["statistics"]);
        let files = result_files(&app);
        assert_eq!(files.len(), if in_store > 0 { 0 } else { 1 }, "{files:?}");

        // The link serves the CSV either way; kept in the row, the link
        // writes it to the lake first (once).
        for _ in 0..2 {
            let location = app.csv_link(ORG_HOST, &token, id).await;
            let csv = reqwest::get(location).await.unwrap().text().await.unwrap();
            assert_eq!(csv, "\"one\"\n\"1\"\n");
        }
        let files = result_files(&app);
        let csv = files
            .iter()
            .find(|path| path.extension().is_some_and(|e| e == "csv"))
            .expect("a result CSV");
        assert_eq!(std::fs::read_to_string(csv).unwrap(), "\"one\"\n\"1\"\n");
        assert_eq!(files.len(), 1, "the CSV alone: {files:?}");
    }
}

#[tokio::test]
async fn a_waited_query_that_fails_at_once_is_stored_failed_and_leaves_no_result() {
    let app = spawn_app().await;
    let token = admin(&app);
    // Planned fine; the division fails while it runs.
    let sql = "SELECT 10 / (value - 3) AS q FROM generate_series(1, 5)";
    let (status, _, body) =
        submit_preferring(&app, &token, "wait=10", &json!({ "query": sql })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"]["state"], "FAILED", "{body}");
    let reason = body["status"]["stateChangeReason"].as_str().unwrap();
    assert!(reason.contains("Divide by zero"), "{reason}");
    assert!(body.get("resultSet").is_none(), "{body}");
    let id = body["queryId"].as_str().unwrap();
    let (_, resource) = app.query_status(ORG_HOST, &token, id).await;
    assert_eq!(resource["status"], body["status"]);
    assert_eq!(stored_job(&app, id).await.0, "FAILED");
    assert_eq!(result_files(&app), Vec::<std::path::PathBuf>::new());
}

#[tokio::test]
async fn a_waited_statement_that_changes_the_catalog_commits_with_its_end() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let ctas = "CREATE TABLE demo_lake_v2.trip_copy AS SELECT * FROM demo_lake_v2.trips";
    let (status, _, body) =
        submit_preferring(&app, &token, "wait=10", &json!({ "query": ctas })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"]["state"], "SUCCEEDED", "{body}");
    let id = body["queryId"].as_str().unwrap();
    assert_eq!(stored_job(&app, id).await.0, "SUCCEEDED");
    let count = |table: &'static str| {
        let (app, token) = (&app, &token);
        async move {
            let sql = format!("SELECT count(*) AS n FROM demo_lake_v2.{table}");
            let (status, _, body) =
                submit_preferring(app, token, "wait=10", &json!({ "query": sql })).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body["resultSet"]["Rows"][1]["Data"][0]["VarCharValue"].clone()
        }
    };
    assert_eq!(count("trip_copy").await, count("trips").await);
    // Again: the table exists now, so the same statement fails, and the
    // first copy's rows stay as they were.
    let (status, _, body) =
        submit_preferring(&app, &token, "wait=10", &json!({ "query": ctas })).await;
    assert!(
        status == StatusCode::CONFLICT || body["status"]["state"] == "FAILED",
        "{status} {body}"
    );
    assert_eq!(count("trip_copy").await, count("trips").await);
}
