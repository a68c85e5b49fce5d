//! Functions and operators whose result can dwarf their arguments (issue:
//! one PublicConsumer query took the server to 6 GB): past the per-call cap
//! or the query's memory pool a query ends FAILED with DataFusion's
//! "Resources exhausted" error, a check_sum key fails its load and a daily
//! SQL its run, the server's resident memory stays within the pool, and the
//! server keeps serving.

use lakehost_tests::*;
use serde_json::{Value, json};

const EXHAUSTED: &str = "Resources exhausted";

/// The query memory limit of the servers whose memory is measured here.
const MEMORY_LIMIT: u64 = 512 << 20;

/// The most a refused statement may grow the process's resident memory: its
/// memory limit, one call's cap, and room for whatever other tests do
/// meanwhile (each statement here took 1.8 to 4.7 GB before it was refused).
const RSS_BOUND: u64 = 3 << 29;

/// `||` doubling a 200 MB value through CTEs: 1.6 GB at the fourth level
/// (2.5 GB of resident memory before `||` was bounded).
const DOUBLING_CTES: &str = "WITH a AS (SELECT repeat('x', 200000000) s), \
    b AS (SELECT s || s s FROM a), c AS (SELECT s || s s FROM b), \
    d AS (SELECT s || s s FROM c) SELECT length(s) AS n FROM d";

async fn spawn_measured_app(adjust: impl FnOnce(&mut lakehost::Config)) -> TestApp {
    spawn_app_with(|config| {
        config.query.memory_limit_bytes = MEMORY_LIMIT;
        adjust(config);
    })
    .await
}

async fn failed_query(app: &TestApp, token: &str, sql: &str) -> Value {
    let id = app.submit_sql(ORG_HOST, token, sql).await;
    app.wait_for(ORG_HOST, token, &id, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_whose_function_result_would_be_huge_is_refused() {
    let app = spawn_app().await;
    let public = app.token_for(&["PublicConsumer"], "[3]");
    for sql in [
        "SELECT length(repeat('x', 1500000000)) AS n",
        "SELECT cardinality(range(1, 400000000)) AS n",
        "SELECT length(lpad('x', 1500000000)) AS n",
    ] {
        let (status, body) = app
            .submit(ORG_HOST, &public, &json!({ "query": sql }))
            .await;
        let message = if status == StatusCode::ACCEPTED {
            let id = body["queryId"].as_str().unwrap();
            let ended = app.wait_for(ORG_HOST, &public, id, None).await;
            assert_eq!(ended["status"]["state"], "FAILED", "{sql}: {ended}");
            ended["status"]["stateChangeReason"].to_string()
        } else {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{sql}: {body}");
            body["message"].to_string()
        };
        assert!(message.contains(EXHAUSTED), "{sql}: {message}");
    }
    // Below the cap the same functions work, and the server is fine.
    let id = app
        .submit_sql(
            ORG_HOST,
            &public,
            "SELECT length(repeat('x', 1000000)) AS n",
        )
        .await;
    let done = app
        .wait_for(ORG_HOST, &public, &id, Some("SUCCEEDED"))
        .await;
    assert_eq!(done["status"]["state"], "SUCCEEDED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_sum_key_whose_function_result_would_be_huge_fails_the_load() {
    let app = spawn_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let id = app
        .create_load(
            &admin,
            &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
        )
        .await;
    app.stage_file(&admin, &id, "part_1", &trips_batch(&[1], 400))
        .await;
    let key = "sum(length(repeat('x', 100000000 + trip_id)))";
    let (status, body) = app
        .commit(&admin, &id, &json!({"check_sum": {key: 1}}).to_string())
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let failed = app.wait_for_load(&admin, &id).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    assert!(failed.to_string().contains(EXHAUSTED), "{failed}");
    // Nothing was written: the table does not exist.
    let (status, body) = app
        .submit(
            ORG_HOST,
            &admin,
            &json!({"query": "SELECT count(*) FROM trips"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concatenation_and_constants_copied_into_rows_fail_the_query_within_its_memory() {
    let app = spawn_measured_app(|_| {}).await;
    let public = app.token_for(&["PublicConsumer"], "[3]");
    for sql in [
        DOUBLING_CTES,
        // Arrays: 240 MB, then 480, 720, 960 MB.
        "SELECT cardinality(a || a || a || a) AS n FROM (SELECT range(1, 30000000) a)",
        // 100 MB once, copied into each of twenty rows: 2 GB.
        "SELECT max(length(s)) AS n FROM (SELECT repeat('x', 100000000) s FROM generate_series(1, 20))",
        // Four 200 MB values alive in one row, each under the per-call cap.
        "SELECT repeat('a', 200000000) a, repeat('b', 200000000) b, \
         repeat('c', 200000000) c, repeat('d', 200000000) d",
    ] {
        let (ended, grown) = rss_growth_while(failed_query(&app, &public, sql)).await;
        assert_eq!(ended["status"]["state"], "FAILED", "{sql}: {ended}");
        let reason = ended["status"]["stateChangeReason"].to_string();
        assert!(reason.contains(EXHAUSTED), "{sql}: {reason}");
        assert!(
            grown < RSS_BOUND,
            "{sql}: resident memory grew {grown} bytes"
        );
    }
    // The same concatenations below the cap work.
    let rows = app
        .rows_of(
            ORG_HOST,
            &public,
            "SELECT length(s || s) AS n, 'a' || NULL AS nothing FROM (SELECT repeat('x', 1000) s)",
        )
        .await;
    assert_eq!(rows, [[Some("2000".to_string()), None]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_sum_key_doubling_through_concatenation_fails_the_load_within_its_memory() {
    let app = spawn_measured_app(|_| {}).await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    // Two rows of a six-letter city: each repeat is 240 MB, under the cap.
    let copy = "repeat(city, 20000000)";
    let key = format!("max(length({copy} || {copy} || {copy} || {copy}))");
    let (failed, grown) = rss_growth_while(async {
        let id = app
            .start_commit_on(ORG_HOST, &admin, &trips_batch(&[1], 2), json!({ key: 1 }))
            .await;
        app.wait_for_load(&admin, &id).await
    })
    .await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    assert!(failed.to_string().contains(EXHAUSTED), "{failed}");
    assert!(grown < RSS_BOUND, "resident memory grew {grown} bytes");
    app.assert_no_table(&admin, "trips").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_sql_doubling_through_concatenation_fails_the_run_within_its_memory() {
    let sql = DOUBLING_CTES.replace(
        "SELECT length(s)",
        "SELECT 1 AS service_client_id, length(s)",
    );
    let app = spawn_measured_app(|config| {
        with_daily_manifest(config, &refresh_manifest("doubled", &sql))
    })
    .await;
    let token = app.daily_token();
    let (ended, grown) = rss_growth_while(async {
        assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
        app.wait_for_daily_run(&token).await
    })
    .await;
    assert_eq!(ended["status"], "FAILED", "{ended}");
    assert!(ended["cause"].to_string().contains(EXHAUSTED), "{ended}");
    assert!(grown < RSS_BOUND, "resident memory grew {grown} bytes");
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    app.assert_no_table(&admin, "demo_insights.doubled").await;
}
