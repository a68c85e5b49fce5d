//! Fair sharing: one org, or one caller, flooding the query and commit
//! workers cannot starve the others. Each replica runs at most
//! `query.max_running_per_org` queries of one org and
//! `query.max_running_per_caller` of one caller (3 and 2 of its 4 workers by
//! default), commits likewise (`pipeline.max_commits_per_*`, 1 of 2), and the
//! next job comes from the org running the fewest. Asserted by what finished
//! while the flood was still there, not by timing.

use lakehost_tests::*;
use serde_json::{Value, json};

/// Runs until cancelled (or the query time limit).
const HEAVY: &str = "SELECT count(*) FROM generate_series(1, 1000000000000)";

async fn state_of(app: &TestApp, host: &str, token: &str, id: &str) -> String {
    let (status, body) = app.query_status(host, token, id).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["status"]["state"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_queries_from_one_org_leaves_room_for_the_others() {
    let app = spawn_app().await;
    // Two callers of the demo org submit a hundred heavy queries each.
    let flooders = [
        app.token_of("flooder-a", &["ZoneAdmin"], "[0]"),
        app.token_of("flooder-b", &["ZoneAdmin"], "[0]"),
    ];
    let mut flood = Vec::new();
    for _ in 0..100 {
        for token in &flooders {
            flood.push((token, app.submit_sql(ORG_HOST, token, HEAVY).await));
        }
    }

    // Another org's small query runs to its end meanwhile.
    let other = app.org_token_for("other", &["ZoneAdmin"], "[0]");
    let theirs = app.submit_sql(OTHER_ORG_HOST, &other, "SELECT 1").await;
    let done = app
        .wait_for(OTHER_ORG_HOST, &other, &theirs, Some("SUCCEEDED"))
        .await;
    assert_eq!(done["status"]["state"], "SUCCEEDED");

    // The flood holds at most the org's cap of workers, each caller at most
    // theirs; the rest waits QUEUED.
    let mut running = [0usize; 2];
    for (token, id) in &flood {
        if state_of(&app, ORG_HOST, token, id).await == "RUNNING" {
            running[usize::from(*token == &flooders[1])] += 1;
        }
    }
    let caps = lakehost::Config::default().query;
    assert!(
        running
            .iter()
            .all(|&n| n >= 1 && n <= caps.max_running_per_caller)
            && running.iter().sum::<usize>() <= caps.max_running_per_org,
        "running per flooding caller: {running:?}"
    );

    // Cancelled, the flood ends; nothing crashed.
    for (token, id) in &flood {
        let response = app
            .request(reqwest::Method::DELETE, ORG_HOST, &format!("{QUERY}/{id}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    for (token, id) in &flood {
        let ended = app.wait_for(ORG_HOST, token, id, None).await;
        assert_eq!(ended["status"]["state"], "CANCELLED", "{ended}");
    }
}

/// A commit of two trips of service client 1 on `host`, started; the loadId.
async fn two_trips(app: &TestApp, host: &str, token: &str) -> String {
    app.start_commit_on(host, token, &trips_batch(&[1], 2), json!({"count(*)": 2}))
        .await
}

async fn load_status(app: &TestApp, host: &str, token: &str, id: &str) -> Value {
    let (status, body) = app.get(host, &format!("{LOAD}/{id}"), Some(token)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// A server whose demo org's commits take a second and a half each (a pause
/// step after the default ones); the pipelines folder lives as long as the
/// first value.
async fn app_with_slow_commits() -> (tempfile::TempDir, TestApp) {
    let pipelines = demo_load_pipelines(&format!(
        "{}\n[[steps]]\nname = \"slow\"\ncomponent = \"builtin:pause\"\n\
         [steps.config]\nms = 1500\n",
        default_load_manifest()
    ));
    let dir = pipelines.path().to_path_buf();
    let app = spawn_app_with(|c| c.pipeline.dir = dir).await;
    (pipelines, app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_commits_from_one_org_leaves_room_for_the_others() {
    let (_pipelines, app) = app_with_slow_commits().await;

    let demo = app.token_for(&["ZoneAdmin"], "[0]");
    let mut flood = Vec::new();
    for _ in 0..20 {
        flood.push(two_trips(&app, ORG_HOST, &demo).await);
    }
    let other = app.org_token_for("other", &["ZoneAdmin"], "[0]");
    let theirs = two_trips(&app, OTHER_ORG_HOST, &other).await;
    let done = app.wait_for_load_on(OTHER_ORG_HOST, &other, &theirs).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    // It did not wait for the flood: most of it is still to come.
    let mut waiting = 0;
    for id in &flood {
        if load_status(&app, ORG_HOST, &demo, id).await["LoadStatus"] == "PROCESSING" {
            waiting += 1;
        }
    }
    assert!(
        waiting >= 10,
        "only {waiting} of the flood still PROCESSING"
    );
    // And the flood itself ends, every load of it.
    for id in &flood {
        assert_eq!(app.wait_for_load(&demo, id).await["LoadStatus"], "SUCCESS");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_org_flooding_queries_and_commits_at_once_leaves_room_for_anothers_query_and_commit() {
    let (_pipelines, app) = app_with_slow_commits().await;
    let demo = app.token_for(&["ZoneAdmin"], "[0]");
    let mut queries = Vec::new();
    let mut commits = Vec::new();
    for i in 0..100 {
        queries.push(app.submit_sql(ORG_HOST, &demo, HEAVY).await);
        if i % 10 == 0 {
            commits.push(two_trips(&app, ORG_HOST, &demo).await);
        }
    }

    // The other org's query and commit both end while the flood is there.
    let other = app.org_token_for("other", &["ZoneAdmin"], "[0]");
    let their_query = app.submit_sql(OTHER_ORG_HOST, &other, "SELECT 1").await;
    let their_commit = two_trips(&app, OTHER_ORG_HOST, &other).await;
    app.wait_for(OTHER_ORG_HOST, &other, &their_query, Some("SUCCEEDED"))
        .await;
    let done = app
        .wait_for_load_on(OTHER_ORG_HOST, &other, &their_commit)
        .await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let mut queued = 0;
    for id in &queries {
        if state_of(&app, ORG_HOST, &demo, id).await == "QUEUED" {
            queued += 1;
        }
    }
    let mut processing = 0;
    for id in &commits {
        if load_status(&app, ORG_HOST, &demo, id).await["LoadStatus"] == "PROCESSING" {
            processing += 1;
        }
    }
    assert!(
        queued >= 90 && processing >= 5,
        "still waiting of the flood: {queued} queries, {processing} commits"
    );

    // The flood ends: its queries cancelled, every commit of it done.
    for id in &queries {
        let response = app
            .request(reqwest::Method::DELETE, ORG_HOST, &format!("{QUERY}/{id}"))
            .bearer_auth(&demo)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    for id in &commits {
        assert_eq!(app.wait_for_load(&demo, id).await["LoadStatus"], "SUCCESS");
    }
}
