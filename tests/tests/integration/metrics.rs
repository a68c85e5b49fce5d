//! `GET /metrics` (issue 16): served on its own listener in the Prometheus
//! text format, never on the API listener; after a query and loads through
//! the API it shows them by route template, state, outcome and ErrorType,
//! and nothing a caller sent (SQL, ids, tokens, table names).
//!
//! The recorder is one per test process, shared by every server the
//! binary starts, so figures are checked as "at least", never exactly.

use std::collections::BTreeMap;

use lakehost_tests::*;
use serde_json::json;

/// One sample of the scrape: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of a Prometheus text exposition (label values here never
/// hold `,` or `"`, which the parser relies on).
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once('=').expect("key=value");
                    (key.to_string(), value.trim_matches('"').to_string())
                })
                .collect();
            Sample {
                name: name.to_string(),
                labels,
                value: value.parse().unwrap_or_else(|_| panic!("value of {line}")),
            }
        })
        .collect()
}

/// The largest value among samples named `name` whose labels include `want`.
fn value_of(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            want.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .reduce(f64::max)
}

async fn scrape(app: &TestApp) -> String {
    let response = reqwest::get(format!("http://{}/metrics", app.metrics_addr))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    response.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_shows_queries_and_loads_by_template_state_and_outcome_and_no_caller_input() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");

    // A read that scans the lake, with text that must not reach the scrape.
    let sql = "SELECT sum(fare) AS metrics_probe_sum FROM trips WHERE fare > -4242";
    let (query_id, query) = app.run_sql(ORG_HOST, &admin, sql).await;
    assert_eq!(query["status"]["state"], "SUCCEEDED", "{query}");
    // The same read again: its pages come from memory this time.
    let (_, again) = app.run_sql(ORG_HOST, &admin, sql).await;
    assert_eq!(again["status"]["state"], "SUCCEEDED", "{again}");
    // A load that passes and one whose check_sum is wrong.
    let table = "metrics_probe_table";
    let mut load_ids = Vec::new();
    for (check_sum, ends) in [(4, "SUCCESS"), (5, "FAIL")] {
        let load_id = app
            .create_load(
                &admin,
                &json!({"load_type": "APPEND_ONLY", "table_name": table}),
            )
            .await;
        app.stage_file(&admin, &load_id, "part_1", &trips_batch(&[1, 2], 2))
            .await;
        let (status, body) = app
            .commit(
                &admin,
                &load_id,
                &json!({"check_sum": {"count(*)": check_sum}}).to_string(),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let done = app.wait_for_load(&admin, &load_id).await;
        assert_eq!(done["LoadStatus"], ends, "{done}");
        load_ids.push(load_id);
    }
    // A keyed submit, its retry, and the key reused for another body.
    for (sql, status) in [
        ("SELECT 1", StatusCode::ACCEPTED),
        ("SELECT 1", StatusCode::ACCEPTED),
        ("SELECT 2", StatusCode::CONFLICT),
    ] {
        let response = app
            .request(reqwest::Method::POST, ORG_HOST, "/v2/query")
            .bearer_auth(&admin)
            .header("Idempotency-Key", "metrics_probe_key")
            .json(&json!({ "query": sql }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{sql}");
    }
    // A 404 and a refused token.
    assert_eq!(
        app.get(ORG_HOST, "/v2/no-such-path", Some(&admin)).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.get(ORG_HOST, SECURITY_METADATA, Some("not-a-token"))
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );

    let text = scrape(&app).await;
    let all = samples(&text);
    let at_least_one = |name: &str, want: &[(&str, &str)]| {
        let value = value_of(&all, name, want);
        assert!(
            value.is_some_and(|v| v >= 1.0),
            "{name} {want:?} is {value:?} in:\n{text}"
        );
    };
    // Keyed requests by operation and what the key held.
    for outcome in ["first", "replayed", "conflict"] {
        at_least_one(
            "lakehost_idempotent_requests_total",
            &[("operation", "submit_query"), ("outcome", outcome)],
        );
    }
    // Requests by API, route template and status.
    let requests = "lakehost_http_requests_total";
    at_least_one(
        requests,
        &[
            ("api", "org"),
            ("method", "POST"),
            ("route", "/v2/query"),
            ("status", "202"),
        ],
    );
    at_least_one(
        requests,
        &[
            ("api", "org"),
            ("method", "GET"),
            ("route", "/v2/query/{query_id}"),
            ("status", "200"),
        ],
    );
    at_least_one(
        requests,
        &[
            ("method", "POST"),
            ("route", "/v2/load/{load_id}/commit"),
            ("status", "202"),
        ],
    );
    at_least_one(
        requests,
        &[("api", "org"), ("route", "unmatched"), ("status", "404")],
    );
    at_least_one(
        "lakehost_http_request_duration_seconds_count",
        &[("route", "/v2/query"), ("status", "202")],
    );
    // Queries by end state and statement type; bytes.
    at_least_one(
        "lakehost_queries_ended_total",
        &[("state", "SUCCEEDED"), ("statement_type", "DML")],
    );
    at_least_one(
        "lakehost_queries_submitted_total",
        &[("statement_type", "DML")],
    );
    // A DML's result (its row count) is small: kept in the store's row.
    at_least_one(
        "lakehost_query_result_bytes_total",
        &[("statement_type", "DML"), ("kept", "store")],
    );
    at_least_one("lakehost_query_scanned_bytes_total", &[]);
    for outcome in ["hit", "miss"] {
        at_least_one("lakehost_read_cache_bytes_total", &[("outcome", outcome)]);
    }
    // Load commits by outcome and ErrorType, steps by name.
    at_least_one(
        "lakehost_load_commits_total",
        &[("outcome", "SUCCESS"), ("error_type", "none")],
    );
    at_least_one(
        "lakehost_load_commits_total",
        &[("outcome", "FAIL"), ("error_type", "CheckSumError")],
    );
    at_least_one(
        "lakehost_pipeline_step_duration_seconds_count",
        &[
            ("pipeline", "load"),
            ("step", "verify_checksums"),
            ("outcome", "failed"),
        ],
    );
    at_least_one(
        "lakehost_pipeline_step_duration_seconds_count",
        &[
            ("pipeline", "load"),
            ("step", "insert"),
            ("outcome", "passed"),
        ],
    );
    at_least_one(
        "lakehost_token_rejections_total",
        &[("reason", "malformed")],
    );
    at_least_one(
        "lakehost_jwks_fetches_total",
        &[("reason", "stale"), ("outcome", "ok")],
    );
    // Gauges sampled by the scrape.
    at_least_one("lakehost_store_pool_connections", &[("state", "open")]);
    for kind in ["query", "load_commit"] {
        assert!(
            value_of(&all, "lakehost_jobs_queued", &[("kind", kind)]).is_some(),
            "{kind}: {text}"
        );
    }

    // Nothing the caller sent is a label.
    let token_signature = admin.rsplit('.').next().unwrap();
    let mut caller_input = vec![
        "metrics_probe",
        "4242",
        "trips",
        "no-such-path",
        "not-a-token",
        query_id.as_str(),
        admin.as_str(),
        token_signature,
    ];
    caller_input.extend(load_ids.iter().map(String::as_str));
    // Every line but its value (a counter or a sum may hold any digits,
    // 4242 among them); comment lines whole.
    let series: Vec<&str> = text
        .lines()
        .map(|line| match line.rsplit_once(' ') {
            Some((series, _value)) if !line.starts_with('#') => series,
            _ => line,
        })
        .collect();
    for input in caller_input {
        let holding: Vec<&&str> = series.iter().filter(|s| s.contains(input)).collect();
        assert!(
            holding.is_empty(),
            "the scrape holds {input:?}: {holding:?}"
        );
    }
}

#[tokio::test]
async fn metrics_are_served_on_their_own_listener_only() {
    let app = spawn_app().await;
    // Not on the API listener, on any host.
    for host in [ORG_HOST, "localhost", "lab.demo.api.localhost"] {
        let (status, _) = app.get(host, "/metrics", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{host}");
    }
    // The metrics listener serves /metrics and nothing else.
    let other = reqwest::get(format!("http://{}/v2/openapi.json", app.metrics_addr))
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    // A second server in the same process renders the shared recorder too.
    let second = spawn_app().await;
    assert_ne!(second.metrics_addr, app.metrics_addr);
    let text = scrape(&second).await;
    assert!(text.contains("lakehost_store_pool_connections"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daily_runs_their_steps_and_lease_takeovers_are_counted() {
    use lakehost::{
        clock::Clock as _,
        store::{JobCaps, queries::NewQuery},
    };
    // No daily.toml in pipeline.dir: the built-in default runs.
    let app = spawn_app_with(|c| c.pipeline.dir = c.storage.data_dir.join("no-pipelines")).await;
    seed_demo_lake(&app).await;
    let token = app.daily_token();
    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(ended["status"], "SUCCEEDED", "{ended}");

    // A query a dead worker claimed: this server ends it FAILED once its
    // lease lapses (never run again).
    let now = app.clock.now().timestamp_micros();
    let job = NewQuery {
        id: uuid_like(),
        org: "demo".into(),
        zone: None,
        owner_sub: "user-1".into(),
        access_fingerprint: lakehost::auth::claims::access_fingerprint(&["ZoneAdmin".into()], &[0]),
        sql: "SELECT 1 AS one".into(),
        database: "demo_lake_v2".into(),
        statement_type: "DML".into(),
        access_json: json!({ "roles": ["ZoneAdmin"], "service_clients": [0] }).to_string(),
        result_first: Default::default(),
    };
    app.store.insert_query(&job, now).await.unwrap();
    app.store
        .claim_query("dead-worker", now, now + 1_000_000, JobCaps::NONE)
        .await
        .unwrap()
        .expect("the job is claimed");
    app.clock.advance(chrono::Duration::seconds(2));
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let done = app.wait_for(ORG_HOST, &admin, &job.id, None).await;
    assert_eq!(done["status"]["state"], "FAILED", "{done}");

    let text = scrape(&app).await;
    let all = samples(&text);
    let at_least_one = |name: &str, want: &[(&str, &str)]| {
        let value = value_of(&all, name, want);
        assert!(
            value.is_some_and(|v| v >= 1.0),
            "{name} {want:?} is {value:?} in:\n{text}"
        );
    };
    at_least_one(
        "lakehost_daily_runs_ended_total",
        &[("status", "SUCCEEDED")],
    );
    at_least_one(
        "lakehost_pipeline_step_duration_seconds_count",
        &[("pipeline", "daily"), ("outcome", "passed")],
    );
    at_least_one(
        "lakehost_http_requests_total",
        &[("api", "dailyrun"), ("method", "POST"), ("status", "200")],
    );
    at_least_one(
        "lakehost_lease_takeovers_total",
        &[("kind", "query"), ("how", "holder_died")],
    );
    assert!(!text.contains(&job.id), "no query id in the scrape");
}
