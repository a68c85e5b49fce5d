//! Health and the graceful stop (issue 16): `/livez` and `/readyz` on every
//! host without a token, readiness naming the part that is down and coming
//! back by itself, and a drain that fails readiness at once, queues new
//! queries for other replicas, and hands a running query back so the next
//! server runs it again.

use lakehost_tests::{DAILYRUN_HOST, ORG_HOST, QUERY, spawn_app_with, spawn_in};
use reqwest::StatusCode;

const ZONE_HOST: &str = "lab.demo.api.localhost";
const BARE_HOST: &str = "localhost";

/// A query that runs until stopped (a trillion rows).
const ENDLESS: &str = "SELECT count(*) FROM generate_series(1, 1000000000000)";

#[tokio::test]
async fn livez_and_readyz_answer_on_every_host_without_a_token() {
    let app = spawn_app_with(|_| {}).await;
    for host in [ORG_HOST, ZONE_HOST, DAILYRUN_HOST, BARE_HOST] {
        let (status, live) = app.get(host, "/livez", None).await;
        assert_eq!(
            (status, live),
            (StatusCode::OK, serde_json::json!({"status": "live"})),
            "{host}"
        );
        let (status, ready) = app.get(host, "/readyz", None).await;
        assert_eq!(status, StatusCode::OK, "{host}: {ready}");
        assert_eq!(
            ready,
            serde_json::json!({
                "status": "ready",
                "checks": {"store": "ok", "migrations": "ok", "lake": "ok", "drain": "ok"}
            }),
            "{host}"
        );
    }
    // Each host's document lists them.
    for host in [ORG_HOST, ZONE_HOST, DAILYRUN_HOST] {
        let (_, doc) = app.get(host, "/v2/openapi.json", None).await;
        for path in ["/livez", "/readyz"] {
            assert!(doc["paths"].get(path).is_some(), "{host} lacks {path}");
        }
        assert!(
            doc["paths"]["/readyz"]["get"]["responses"]
                .get("503")
                .is_some()
        );
    }
}

#[tokio::test]
async fn readyz_names_the_lake_while_it_is_gone_and_recovers_without_a_restart() {
    let app = spawn_app_with(|_| {}).await;
    let lake = app.data_dir.join("lake");
    let parked = app.data_dir.join("lake-parked");
    std::fs::rename(&lake, &parked).unwrap();
    let (status, body) = app.get(ORG_HOST, "/readyz", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["status"], "not ready");
    let message = body["message"].as_str().unwrap();
    assert!(message.starts_with("lake: "), "{body}");
    assert_eq!(body["checks"]["store"], "ok");
    assert_ne!(body["checks"]["lake"], "ok");
    // Liveness does not depend on the parts.
    assert_eq!(app.get(ORG_HOST, "/livez", None).await.0, StatusCode::OK);
    std::fs::rename(&parked, &lake).unwrap();
    let (status, body) = app.get(ORG_HOST, "/readyz", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_fails_readiness_queues_new_queries_and_hands_a_running_one_back() {
    let dir = tempfile::tempdir().unwrap();
    let clock = lakehost::clock::ManualClock::new();
    let adjust = |config: &mut lakehost::Config| {
        config.server.drain_s = 2;
        config.server.drain_notice_ms = 1500;
    };
    let mut first = spawn_in(dir.path().to_path_buf(), clock.clone(), adjust).await;
    let token = first.token_for(&["ZoneAdmin"], "[0]");
    let running = first.submit_sql(ORG_HOST, &token, ENDLESS).await;
    first
        .wait_for(ORG_HOST, &token, &running, Some("RUNNING"))
        .await;

    first.drain();
    // During the notice: not ready, still answering, and a new query waits
    // QUEUED for another replica instead of running here.
    let (status, body) = loop {
        let (status, body) = first.get(ORG_HOST, "/readyz", None).await;
        if status != StatusCode::OK {
            break (status, body);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["message"], "drain: draining", "{body}");
    let queued = first.submit_sql(ORG_HOST, &token, "SELECT 1").await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (_, status) = first.query_status(ORG_HOST, &token, &queued).await;
    assert_eq!(status["status"]["state"], "QUEUED", "{status}");

    // The drain ends: the endless query is handed back, not failed.
    first.drained().await;
    drop(first);
    let store = lakehost::store::Store::open_sqlite(&dir.path().join("lakehost.db"))
        .await
        .unwrap();
    let job = store.query_job(&running).await.unwrap().unwrap();
    assert_eq!(
        (job.state.as_str(), job.attempts),
        ("QUEUED", 1),
        "handed back"
    );

    // The next server runs both: the queued one to its end, the handed-back
    // one again from the start (cancelled here: it never ends).
    let second = spawn_in(dir.path().to_path_buf(), clock, |_| {}).await;
    let token = second.token_for(&["ZoneAdmin"], "[0]");
    let done = second.wait_for(ORG_HOST, &token, &queued, None).await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
    second
        .wait_for(ORG_HOST, &token, &running, Some("RUNNING"))
        .await;
    assert_eq!(
        store.query_job(&running).await.unwrap().unwrap().attempts,
        2,
        "run again"
    );
    let cancelled = second
        .request(
            reqwest::Method::DELETE,
            ORG_HOST,
            &format!("{QUERY}/{running}"),
        )
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), StatusCode::OK);
}
