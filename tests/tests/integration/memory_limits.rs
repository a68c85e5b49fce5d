//! Functions whose result can dwarf their arguments (issue: one
//! PublicConsumer query took the server to 6 GB): past the per-call cap a
//! query ends with DataFusion's "Resources exhausted" error, a check_sum key
//! fails its load, and the server keeps serving.

use lakehost_tests::*;
use serde_json::json;

const EXHAUSTED: &str = "Resources exhausted";

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
