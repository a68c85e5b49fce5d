//! Golden bodies: what a spec client sees, byte for byte, when it sends none
//! of lakehost's opt-in extensions (`Prefer`, `Accept` beyond JSON,
//! `Idempotency-Key`). Every response of a query's and a load's life is
//! compared with `tests/golden/*.txt`, ids, times and signatures replaced by
//! `{placeholders}`. Blessed on the code before issue 19 added the opt-ins;
//! `LAKEHOST_BLESS=1` writes them again (then read the diff).

use std::path::PathBuf;

use lakehost_tests::{LOAD, ORG_HOST, QUERY, TestApp, seed_demo_lake, spawn_app, trips_batch};
use reqwest::Method;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden")
}

/// The status line and body of one exchange, with `replace`'s values
/// turned into their placeholders.
async fn exchange(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    body: Option<&str>,
    replace: &[(String, String)],
) -> (u16, String, String) {
    let mut request = app.request(method, ORG_HOST, path).bearer_auth(token);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = String::from_utf8(response.bytes().await.unwrap().to_vec()).unwrap();
    exchange_replaced((status, content_type, text), replace)
}

/// Compares (or, blessing, writes) `name`'s golden text.
fn check(name: &str, (status, content_type, body): &(u16, String, String)) {
    let actual = format!("{status} {content_type}\n{body}\n");
    let path = golden_dir().join(format!("{name}.txt"));
    if std::env::var_os("LAKEHOST_BLESS").is_some() {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (LAKEHOST_BLESS=1 writes it)", path.display()));
    assert_eq!(actual, expected, "{name} differs from {}", path.display());
}

fn spec_time(app: &TestApp) -> String {
    chrono::DateTime::from_timestamp(app.now(), 0)
        .unwrap()
        .format("%m-%d-%Y %H:%M:%S")
        .to_string()
}

#[tokio::test]
async fn a_query_without_opt_ins_answers_the_golden_bodies() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let time = (spec_time(&app), "{time}".to_string());

    let sql = r#"{"query": "SELECT trip_id, fare, city FROM demo_lake_v2.trips ORDER BY trip_id LIMIT 3"}"#;
    let submitted = exchange(&app, Method::POST, QUERY, &token, Some(sql), &[]).await;
    let id: serde_json::Value = serde_json::from_str(&submitted.2).unwrap();
    let id = id["queryId"].as_str().unwrap().to_string();
    let ids = [(id.clone(), "{queryId}".to_string()), time.clone()];
    check("query_submitted", &exchange_replaced(submitted, &ids));
    app.wait_for(ORG_HOST, &token, &id, Some("SUCCEEDED")).await;
    let path = format!("{QUERY}/{id}");
    check(
        "query_succeeded",
        &exchange(&app, Method::GET, &path, &token, None, &ids).await,
    );
    check(
        "query_result_page",
        &exchange(
            &app,
            Method::GET,
            &format!("{path}/result"),
            &token,
            None,
            &ids,
        )
        .await,
    );
    let csv = exchange(
        &app,
        Method::GET,
        &format!("{path}/csv"),
        &token,
        None,
        &ids,
    )
    .await;
    let location: serde_json::Value = serde_json::from_str(&csv.2).unwrap();
    let location = location["location"].as_str().unwrap().to_string();
    check(
        "query_csv_link",
        &exchange_replaced(csv, &[(location, "{location}".into())]),
    );
    check(
        "query_cancel_after_end",
        &exchange(&app, Method::DELETE, &path, &token, None, &ids).await,
    );
    check(
        "query_bad_sql",
        &exchange(
            &app,
            Method::POST,
            QUERY,
            &token,
            Some(r#"{"query": "SELEC 1"}"#),
            &ids,
        )
        .await,
    );
    check(
        "query_unknown",
        &exchange(
            &app,
            Method::GET,
            &format!("{QUERY}/00000000-0000-0000-0000-000000000000"),
            &token,
            None,
            &ids,
        )
        .await,
    );
}

fn exchange_replaced(
    (status, content_type, mut body): (u16, String, String),
    replace: &[(String, String)],
) -> (u16, String, String) {
    for (value, placeholder) in replace {
        if !value.is_empty() {
            body = body.replace(value, placeholder);
        }
    }
    (status, content_type, body)
}

#[tokio::test]
async fn a_load_without_opt_ins_answers_the_golden_bodies() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let request = r#"{"load_type": "APPEND_ONLY", "table_name": "trips"}"#;
    let created = exchange(&app, Method::POST, LOAD, &token, Some(request), &[]).await;
    let id: serde_json::Value = serde_json::from_str(&created.2).unwrap();
    let id = id["loadId"].as_str().unwrap().to_string();
    let ids = [(id.clone(), "{loadId}".to_string())];
    check("load_created", &exchange_replaced(created, &ids));
    app.stage_file(&token, &id, "part_1", &trips_batch(&[1], 2))
        .await;
    let commit = format!("{LOAD}/{id}/commit");
    check(
        "load_commit",
        &exchange(
            &app,
            Method::POST,
            &commit,
            &token,
            Some(r#"{"check_sum": {"count(*)": 2}}"#),
            &ids,
        )
        .await,
    );
    app.wait_for_load(&token, &id).await;
    check(
        "load_succeeded",
        &exchange(
            &app,
            Method::GET,
            &format!("{LOAD}/{id}"),
            &token,
            None,
            &ids,
        )
        .await,
    );
    check(
        "load_commit_again",
        &exchange(&app, Method::POST, &commit, &token, Some("{}"), &ids).await,
    );
}
