//! Result reuse (issue 19): opt-in per request (`Prefer: reuse=N`) or per
//! org (`query.reuse_max_age_s`); a hit is a new query, SUCCEEDED at once,
//! naming the query it reused and reading the same rows; a load commit, a
//! SQL write or a daily refresh of a table the query reads, another access
//! fingerprint, an old result or a function like `random()` is a miss.

use lakehost_tests::{
    ORG_HOST, QUERY, TestApp, page_rows, read, seed_demo_lake, spawn_app, spawn_app_with,
    trips_batch,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

const TRIPS: &str = "SELECT trip_id, fare, city FROM demo_lake_v2.trips ORDER BY trip_id";

fn admin(app: &TestApp) -> String {
    app.token_for(&["ZoneAdmin"], "[0]")
}

/// POST /query with `Prefer: wait=10` plus `prefer`; the ended body.
async fn run_preferring(app: &TestApp, token: &str, prefer: &str, sql: &str) -> Value {
    let prefer = if prefer.is_empty() {
        "wait=10".to_string()
    } else {
        format!("wait=10, {prefer}")
    };
    let response = app
        .request(reqwest::Method::POST, ORG_HOST, QUERY)
        .bearer_auth(token)
        .header("Prefer", prefer)
        .json(&json!({ "query": sql }))
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    assert_eq!(status, StatusCode::OK, "{sql}: {body}");
    assert_eq!(body["status"]["state"], "SUCCEEDED", "{body}");
    body
}

fn id_of(body: &Value) -> &str {
    body["queryId"].as_str().unwrap()
}

fn reused_from(body: &Value) -> Option<&str> {
    body["reusedQueryId"].as_str()
}

#[tokio::test]
async fn a_hit_is_a_new_succeeded_query_with_the_same_rows_naming_the_one_it_reused() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let first = run_preferring(&app, &token, "", TRIPS).await;
    assert!(reused_from(&first).is_none(), "{first}");
    // Another spelling of the same statement.
    let respelled = "select trip_id, fare, city\n  from demo_lake_v2.trips   order by trip_id";
    let second = run_preferring(&app, &token, "reuse=300", respelled).await;
    assert_ne!(id_of(&second), id_of(&first));
    assert_eq!(reused_from(&second), Some(id_of(&first)));
    assert_eq!(second["query"], respelled);
    assert_eq!(page_rows(&second), page_rows(&first));
    assert_eq!(page_rows(&second).len(), 7);
    // GET answers it the same way, and its CSV link works.
    let (_, resource) = app.query_status(ORG_HOST, &token, id_of(&second)).await;
    assert_eq!(resource["reusedQueryId"], id_of(&first));
    assert_eq!(resource["status"]["state"], "SUCCEEDED");
    let csv = app
        .request(
            reqwest::Method::GET,
            ORG_HOST,
            &format!("{QUERY}/{}/csv", id_of(&second)),
        )
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(csv.status(), StatusCode::FOUND);
    // The Query resource of a query that ran has no such field.
    let (_, resource) = app.query_status(ORG_HOST, &token, id_of(&first)).await;
    assert!(resource.get("reusedQueryId").is_none(), "{resource}");
}

#[tokio::test]
async fn functions_lakehost_bounds_keep_their_values_and_are_reused() {
    // `concat`, `repeat` and `||` are wrapped (volatile to the optimizer so
    // no constant is folded uncounted) but their values are fixed.
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let sql = "SELECT concat(city, '!'), repeat('x', 3), city || '?' FROM demo_lake_v2.trips";
    let first = run_preferring(&app, &token, "", sql).await;
    let again = run_preferring(&app, &token, "reuse=300", sql).await;
    assert_eq!(reused_from(&again), Some(id_of(&first)));
}

#[tokio::test]
async fn without_opting_in_every_query_runs() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let first = run_preferring(&app, &token, "", TRIPS).await;
    let second = run_preferring(&app, &token, "", TRIPS).await;
    assert!(reused_from(&second).is_none(), "{second}");
    let (status, applied) = {
        let response = app
            .request(reqwest::Method::POST, ORG_HOST, QUERY)
            .bearer_auth(&token)
            .json(&json!({ "query": TRIPS }))
            .send()
            .await
            .unwrap();
        let applied = response.headers().get("preference-applied").cloned();
        (response.status(), applied)
    };
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(applied.is_none());
    assert_ne!(id_of(&first), id_of(&second));
}

#[tokio::test]
async fn a_load_commit_into_a_table_the_query_reads_is_a_miss() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let first = run_preferring(&app, &token, "", TRIPS).await;
    // A commit into another table changes nothing this query reads.
    let other = app
        .create_load(
            &token,
            &json!({"load_type": "APPEND_ONLY", "table_name": "elsewhere"}),
        )
        .await;
    app.stage_file(&token, &other, "part_1", &trips_batch(&[1], 1))
        .await;
    let (status, _) = app
        .commit(
            &token,
            &other,
            &json!({"check_sum": {"count(*)": 1}}).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(
        app.wait_for_load(&token, &other).await["LoadStatus"],
        "SUCCESS"
    );
    let still = run_preferring(&app, &token, "reuse=300", TRIPS).await;
    assert_eq!(reused_from(&still), Some(id_of(&first)));

    let load = app
        .create_load(
            &token,
            &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
        )
        .await;
    app.stage_file(&token, &load, "part_1", &trips_batch(&[1], 2))
        .await;
    let (status, _) = app
        .commit(
            &token,
            &load,
            &json!({"check_sum": {"count(*)": 2}}).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(
        app.wait_for_load(&token, &load).await["LoadStatus"],
        "SUCCESS"
    );
    let after = run_preferring(&app, &token, "reuse=300", TRIPS).await;
    assert!(reused_from(&after).is_none(), "{after}");
    assert_eq!(page_rows(&after).len(), 9);
    // And the new result is what the next reuse answers with.
    let again = run_preferring(&app, &token, "reuse=300", TRIPS).await;
    assert_eq!(reused_from(&again), Some(id_of(&after)));
}

#[tokio::test]
async fn a_sql_write_or_ddl_on_a_table_the_query_reads_is_a_miss() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let sql = "SELECT count(*) FROM demo_sandbox.scratch";
    let first = run_preferring(&app, &token, "", sql).await;
    run_preferring(
        &app,
        &token,
        "",
        "INSERT INTO demo_sandbox.scratch SELECT * FROM demo_sandbox.scratch",
    )
    .await;
    let after_insert = run_preferring(&app, &token, "reuse=300", sql).await;
    assert!(reused_from(&after_insert).is_none(), "{after_insert}");
    assert_ne!(page_rows(&after_insert), page_rows(&first));
    // A dropped and re-created table of the same name and rows is a new table.
    run_preferring(&app, &token, "", "DROP TABLE demo_sandbox.scratch").await;
    run_preferring(
        &app,
        &token,
        "",
        "CREATE TABLE demo_sandbox.scratch AS SELECT * FROM demo_lake_v2.trips LIMIT 4",
    )
    .await;
    let after_ddl = run_preferring(&app, &token, "reuse=300", sql).await;
    assert!(reused_from(&after_ddl).is_none(), "{after_ddl}");
}

#[tokio::test]
async fn a_daily_refresh_of_a_table_the_query_reads_is_a_miss() {
    let app = spawn_app_with(|c| c.pipeline.dir = c.storage.data_dir.join("no-pipelines")).await;
    seed_demo_lake(&app).await;
    let daily = app.daily_token();
    assert_eq!(app.start_daily_run(&daily).await.0, StatusCode::OK);
    assert_eq!(app.wait_for_daily_run(&daily).await["status"], "SUCCEEDED");
    let token = admin(&app);
    let sql = "SELECT table_name, column_name FROM demo_insights.lake_columns ORDER BY 1, 2";
    let first = run_preferring(&app, &token, "", sql).await;
    let hit = run_preferring(&app, &token, "reuse=300", sql).await;
    assert_eq!(reused_from(&hit), Some(id_of(&first)));

    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.start_daily_run(&daily).await.0, StatusCode::OK);
    assert_eq!(app.wait_for_daily_run(&daily).await["status"], "SUCCEEDED");
    let after = run_preferring(&app, &token, "reuse=300", sql).await;
    assert!(reused_from(&after).is_none(), "{after}");
    assert_eq!(page_rows(&after), page_rows(&first));
}

#[tokio::test]
async fn callers_with_other_access_never_share_a_result() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let sql = "SELECT trip_id FROM demo_lake_v2.trips WHERE service_client_id = 1 ORDER BY trip_id";
    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    let first = run_preferring(&app, &analyst, "", sql).await;
    // Other service clients, other roles: their own run.
    let other_client = app.token_for(&["OwnServiceClientAnalyst"], "[1 2]");
    let theirs = run_preferring(&app, &other_client, "reuse=300", sql).await;
    assert!(reused_from(&theirs).is_none(), "{theirs}");
    let admin = admin(&app);
    let admins = run_preferring(&app, &admin, "reuse=300", sql).await;
    assert!(reused_from(&admins).is_none(), "{admins}");
    // Another user with the very same roles and service clients may.
    let colleague = app.token_of("colleague", &["OwnServiceClientAnalyst"], "[1]");
    let colleagues = run_preferring(&app, &colleague, "reuse=300", sql).await;
    assert_eq!(reused_from(&colleagues), Some(id_of(&first)));
    // The owner of the reused query is not revealed: the colleague's own
    // query id is the one they can read; the reused one stays NotFound.
    let (status, _) = app.query_status(ORG_HOST, &colleague, id_of(&first)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A caller refused the rows is refused before any reuse.
    let outsider = app.token_for(&["OwnServiceClientAnalyst"], "[3]");
    let (status, body) = {
        let response = app
            .request(reqwest::Method::POST, ORG_HOST, QUERY)
            .bearer_auth(&outsider)
            .header("Prefer", "reuse=300")
            .json(&json!({ "query": "SELECT trip_id FROM demo_lake_v2.trips ORDER BY trip_id" }))
            .send()
            .await
            .unwrap();
        read(response).await
    };
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}

#[tokio::test]
async fn results_older_than_asked_and_changing_functions_are_not_reused() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let first = run_preferring(&app, &token, "", TRIPS).await;
    app.clock.advance(chrono::Duration::seconds(61));
    let old = run_preferring(&app, &token, "reuse=60", TRIPS).await;
    assert!(reused_from(&old).is_none(), "{old}");
    let fresh = run_preferring(&app, &token, "reuse=60", TRIPS).await;
    assert_eq!(reused_from(&fresh), Some(id_of(&old)));
    assert_ne!(id_of(&first), id_of(&old));

    for sql in [
        "SELECT trip_id, random() FROM demo_lake_v2.trips",
        "SELECT trip_id, now() FROM demo_lake_v2.trips",
        "SELECT table_name FROM information_schema.tables",
        "SELECT value FROM generate_series(1, 3)",
    ] {
        run_preferring(&app, &token, "", sql).await;
        let again = run_preferring(&app, &token, "reuse=300", sql).await;
        assert!(reused_from(&again).is_none(), "{sql}: {again}");
    }
}

#[tokio::test]
async fn an_org_can_turn_reuse_on_and_a_request_can_turn_it_off() {
    let app = spawn_app_with(|c| {
        c.query.reuse_max_age_s.insert("demo".into(), 300);
    })
    .await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let first = run_preferring(&app, &token, "", TRIPS).await;
    let hit = run_preferring(&app, &token, "", TRIPS).await;
    assert_eq!(reused_from(&hit), Some(id_of(&first)));
    let off = run_preferring(&app, &token, "reuse=0", TRIPS).await;
    assert!(reused_from(&off).is_none(), "{off}");
}

#[tokio::test]
async fn bad_reuse_values_are_refused() {
    let app = spawn_app().await;
    let token = admin(&app);
    for prefer in ["reuse=86401", "reuse=-5", "reuse=a while", "reuse"] {
        let response = app
            .request(reqwest::Method::POST, ORG_HOST, QUERY)
            .bearer_auth(&token)
            .header("Prefer", prefer)
            .json(&json!({ "query": "SELECT 1" }))
            .send()
            .await
            .unwrap();
        let (status, body) = read(response).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{prefer}");
        assert_eq!(
            body,
            json!({"message": "InvalidParameterError: Prefer reuse must be a whole number of seconds from 0 to 86400."})
        );
    }
}
