//! The DailyRun API (spec "GET/POST /dailyRun/dailyRun_enabled", "GET
//! /dailyRun/execution_status", "POST /dailyRun/start_execution", "DailyRun
//! errors"): the flag (404 until first set, the accepted spellings, the exact
//! 400, scopes, prefix, per org); executions started by hand and by the
//! schedule on an injected clock, one RUNNING per org, TIMED_OUT, ABORTED
//! after a restart, FAILED with the step's reason, insights refreshed by
//! the SQL-transform step and read back through the query API, and a run
//! that keeps the components it began with when its manifest is swapped.

use chrono::{DateTime, Utc};
use lakehost::clock::ManualClock;
use lakehost_tests::*;
use serde_json::{Value, json};

const FLAG: &str = "/dailyRun/dailyRun_enabled";

fn token(app: &TestApp, org: &str, scopes: &str) -> String {
    let mut claims = app.valid_claims(org);
    claims["scope"] = json!(scopes);
    app.sign(org, &claims)
}

async fn post(
    app: &TestApp,
    host: &str,
    path: &str,
    token: &str,
    body: &str,
) -> (StatusCode, Value) {
    app.post_raw(host, path, token, body).await
}

#[tokio::test]
async fn the_flag_is_not_found_until_set_then_reads_back() {
    let app = spawn_app().await;
    let both = token(&app, "demo", "dailyrun:enabled:read dailyrun:enabled:write");
    let (status, body) = app.get(DAILYRUN_HOST, FLAG, Some(&both)).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"message": "DailyRun not found"})
        )
    );

    let bad = json!({"message": "Body must be valid JSON with 'dailyRun' set to true or false."});
    for body in [
        "",
        "{",
        "[]",
        "{}",
        r#"{"dailyRun": "maybe"}"#,
        r#"{"dailyRun": 2}"#,
        r#"{"dailyRun": null}"#,
    ] {
        let (status, reply) = post(&app, DAILYRUN_HOST, FLAG, &both, body).await;
        assert_eq!(
            (status, reply),
            (StatusCode::BAD_REQUEST, bad.clone()),
            "{body}"
        );
    }
    let (status, _) = app.get(DAILYRUN_HOST, FLAG, Some(&both)).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "nothing was written by a bad body"
    );

    for (body, expected) in [
        (r#"{"dailyRun": true}"#, true),
        (r#"{"dailyRun": "no"}"#, false),
        (r#"{"dailyRun": "YES"}"#, true),
        (r#"{"dailyRun": 0}"#, false),
        (r#"{"dailyRun": 1}"#, true),
        (r#"{"dailyRun": "false"}"#, false),
    ] {
        let (status, reply) = post(&app, DAILYRUN_HOST, FLAG, &both, body).await;
        assert_eq!(
            (status, reply),
            (StatusCode::OK, json!({"dailyRun": expected})),
            "{body}"
        );
        let (status, reply) = app.get(DAILYRUN_HOST, FLAG, Some(&both)).await;
        assert_eq!(
            (status, reply),
            (StatusCode::OK, json!({"dailyRun": expected}))
        );
    }

    // The same flag under the prefix and on the bare host (default org).
    let (status, reply) = app
        .get(DAILYRUN_HOST, &format!("/superset{FLAG}"), Some(&both))
        .await;
    assert_eq!(
        (status, reply),
        (StatusCode::OK, json!({"dailyRun": false}))
    );
    let (status, reply) = app.get("localhost", FLAG, Some(&both)).await;
    assert_eq!(
        (status, reply),
        (StatusCode::OK, json!({"dailyRun": false}))
    );
}

#[tokio::test]
async fn the_flag_needs_its_scopes_and_is_per_org() {
    let app = spawn_app().await;
    let read_only = token(&app, "demo", "dailyrun:enabled:read");
    let write_only = token(&app, "demo", "dailyrun:enabled:write");
    let forbidden = json!({"message": "Forbidden"});
    let (status, body) = post(
        &app,
        DAILYRUN_HOST,
        FLAG,
        &read_only,
        r#"{"dailyRun": true}"#,
    )
    .await;
    assert_eq!((status, body), (StatusCode::FORBIDDEN, forbidden.clone()));
    let (status, body) = app.get(DAILYRUN_HOST, FLAG, Some(&write_only)).await;
    assert_eq!((status, body), (StatusCode::FORBIDDEN, forbidden));
    let (status, body) = app.get(DAILYRUN_HOST, FLAG, None).await;
    assert_eq!((status, body), (StatusCode::UNAUTHORIZED, unauthorized()));

    let (status, _) = post(
        &app,
        DAILYRUN_HOST,
        FLAG,
        &write_only,
        r#"{"dailyRun": true}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let other = token(
        &app,
        "other",
        "dailyrun:enabled:read dailyrun:enabled:write",
    );
    let (status, body) = app.get("api.other.localhost", FLAG, Some(&other)).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"message": "DailyRun not found"})
        )
    );
    // A demo token is not valid on the other org's API.
    let (status, _) = app.get("api.other.localhost", FLAG, Some(&read_only)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

async fn status(app: &TestApp, token: &str, query: &str) -> (StatusCode, Value) {
    app.get(
        DAILYRUN_HOST,
        &format!("{DAILYRUN_STATUS}{query}"),
        Some(token),
    )
    .await
}

/// `2026-11-22T02:00:00.123456+00:00`: ISO 8601, microseconds, UTC offset.
fn is_iso_micros(text: &str) -> bool {
    DateTime::parse_from_rfc3339(text).is_ok()
        && text.len() == 32
        && text.as_bytes()[19] == b'.'
        && text.ends_with("+00:00")
}

fn assert_execution_name(name: &str) {
    let stamp = name
        .strip_prefix("DailyScheduledETL_demo_")
        .unwrap_or_else(|| panic!("{name}"));
    assert_eq!(stamp.len(), 22, "{name}");
    assert!(
        stamp[..8].bytes().all(|b| b.is_ascii_digit())
            && &stamp[8..9] == "T"
            && stamp[9..21].bytes().all(|b| b.is_ascii_digit())
            && stamp.ends_with('Z'),
        "{name}"
    );
}

#[tokio::test]
async fn a_manual_run_refreshes_insights_that_queries_then_read() {
    let app = spawn_app_with(|c| {
        with_daily_manifest(
            c,
            &refresh_manifest(
                "trips_per_client",
                "SELECT service_client_id, count(*) AS trips FROM ${lake}.trips GROUP BY service_client_id",
            ),
        )
    }).await;
    seed_demo_lake(&app).await;
    let token = app.daily_token();

    // Nothing yet, in each mode.
    assert_eq!(
        status(&app, &token, "").await,
        (StatusCode::OK, json!({"executions": []}))
    );
    assert_eq!(
        status(&app, &token, "?mode=latest").await,
        (StatusCode::OK, Value::Null)
    );
    let (code, none) = status(&app, &token, "?mode=last_successful").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        none,
        json!({"message": "No successful execution of the Daily ETL pipeline was found."})
    );

    // The flag was never set: a manual start works whatever the flag.
    let (code, started) = app.start_daily_run(&token).await;
    assert_eq!(code, StatusCode::OK, "{started}");
    let keys: Vec<&str> = started
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "executionArn",
            "executionName",
            "message",
            "startDate",
            "started",
            "stateMachineArn"
        ]
    );
    assert_eq!(started["started"], true);
    assert_eq!(started["message"], "Daily ETL pipeline execution started.");
    let name = started["executionName"].as_str().unwrap().to_string();
    assert_execution_name(&name);
    assert!(
        is_iso_micros(started["startDate"].as_str().unwrap()),
        "{started}"
    );
    assert_eq!(
        started["executionArn"],
        format!("arn:lakehost:states:demo:execution:DailyScheduledETL_demo:{name}")
    );
    assert_eq!(
        started["stateMachineArn"],
        "arn:lakehost:states:demo:stateMachine:DailyScheduledETL_demo"
    );

    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(ended["status"], "SUCCEEDED", "{ended}");
    assert_eq!(ended["name"], name);
    assert_eq!(ended["startDate"], started["startDate"]);
    assert!(
        is_iso_micros(ended["stopDate"].as_str().unwrap()),
        "{ended}"
    );
    assert_eq!(
        (&ended["error"], &ended["cause"]),
        (&Value::Null, &Value::Null)
    );

    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let sql = "SELECT service_client_id, trips FROM demo_insights.trips_per_client \
               ORDER BY service_client_id";
    let counts = |rows: Vec<Vec<Option<String>>>| {
        rows.into_iter()
            .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
            .collect::<Vec<_>>()
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        counts(app.rows_of(ORG_HOST, &admin, sql).await),
        [pair("1", "2"), pair("2", "2"), pair("901", "2")]
    );
    // The insights rows keep their service clients: an own-client analyst of
    // client 1 reads client 1 (and the public 901) through the filter.
    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    assert_eq!(
        counts(
            app.rows_of(
                ORG_HOST,
                &analyst,
                "SELECT service_client_id, trips FROM demo_insights.trips_per_client \
                 WHERE service_client_id IN (1, 901) ORDER BY service_client_id"
            )
            .await
        ),
        [pair("1", "2"), pair("901", "2")]
    );

    // New lake rows, a second run: the table is replaced, not appended to.
    let first_files = app
        .table_file_paths("demo_insights", "trips_per_client")
        .await;
    app.import(None, "demo_lake_v2", "trips", &[trips_batch(&[1], 3)])
        .await;
    app.clock.advance(chrono::Duration::seconds(5));
    let (code, second) = app.start_daily_run(&token).await;
    assert_eq!(code, StatusCode::OK, "{second}");
    assert_eq!(app.wait_for_daily_run(&token).await["status"], "SUCCEEDED");
    assert_eq!(
        counts(app.rows_of(ORG_HOST, &admin, sql).await),
        [pair("1", "5"), pair("2", "2"), pair("901", "2")]
    );
    // The replaced files outlive queries planned on them, then are swept.
    let second_files = app
        .table_file_paths("demo_insights", "trips_per_client")
        .await;
    assert!(first_files.iter().all(|f| !second_files.contains(f)));
    assert_eq!(app.retired_files.sweep().await.unwrap(), 0);
    for path in &first_files {
        assert!(app.lake_has(path).await, "{path} kept after the swap");
    }
    // Both in the list, most recent first; limit clamps; modes in any case.
    let (_, list) = status(&app, &token, "?mode=LIST").await;
    let names: Vec<&str> = list["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [second["executionName"].as_str().unwrap(), name.as_str()]
    );
    for (query, expected) in [
        ("?limit=1", 1),
        ("?limit=0", 1),
        ("?limit=-3", 1),
        ("?limit=500", 2),
    ] {
        let (code, list) = status(&app, &token, query).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            list["executions"].as_array().unwrap().len(),
            expected,
            "{query}"
        );
    }
    let (_, latest) = status(&app, &token, "?mode=Latest").await;
    assert_eq!(latest["name"], second["executionName"]);
    let (_, successful) = status(&app, &token, "?mode=LAST_SUCCESSFUL").await;
    assert_eq!(successful["name"], second["executionName"]);

    let invalid = json!({"message": "mode is not valid, mode should be one of: list, latest, last_successful"});
    for query in ["?mode=all", "?mode=", "?mode=latest%20"] {
        assert_eq!(
            status(&app, &token, query).await,
            (StatusCode::BAD_REQUEST, invalid.clone()),
            "{query}"
        );
    }
    assert_eq!(
        status(&app, &token, "?limit=ten").await,
        (
            StatusCode::BAD_REQUEST,
            json!({"message": "limit must be an integer"})
        )
    );

    // Past the query time limit (the tokens above have expired by then) the
    // replaced files are swept; the current ones stay.
    let limit = lakehost::Config::default().query.time_limit_s as i64;
    app.clock.advance(chrono::Duration::seconds(limit + 1));
    assert_eq!(app.retired_files.sweep().await.unwrap(), first_files.len());
    for path in first_files.iter().chain(&second_files) {
        assert_eq!(
            app.lake_has(path).await,
            second_files.contains(path),
            "{path}"
        );
    }
}

#[tokio::test]
async fn fifty_concurrent_starts_start_one_run() {
    let app = spawn_app_with(|c| with_daily_manifest(c, &pause_manifest(1500))).await;
    let daily = app.daily_token();
    let starts: Vec<_> = (0..50)
        .map(|_| {
            let request = app
                .request(reqwest::Method::POST, DAILYRUN_HOST, DAILYRUN_START)
                .bearer_auth(&daily);
            tokio::spawn(async move { read(request.send().await.unwrap()).await })
        })
        .collect();
    let mut replies = Vec::new();
    for start in starts {
        replies.push(start.await.unwrap());
    }
    let winners: Vec<&Value> = replies
        .iter()
        .filter(|(code, _)| *code == StatusCode::OK)
        .map(|(_, body)| body)
        .collect();
    assert_eq!(winners.len(), 1, "{replies:?}");
    let winner = winners[0];
    for (code, body) in &replies {
        if *code == StatusCode::OK {
            continue;
        }
        assert_eq!(*code, StatusCode::CONFLICT, "{body}");
        assert_eq!(
            *body,
            json!({
                "message": "Daily ETL pipeline is already running for this client; no execution started.",
                "started": false,
                "executionName": null,
                "runningExecution": {
                    "name": winner["executionName"],
                    "status": "RUNNING",
                    "startDate": winner["startDate"],
                },
                "stateMachineArn": "arn:lakehost:states:demo:stateMachine:DailyScheduledETL_demo",
            })
        );
    }
    let (_, list) = status(&app, &daily, "").await;
    assert_eq!(list["executions"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(app.wait_for_daily_run(&daily).await["status"], "SUCCEEDED");
    // Once it ended, the next start is accepted.
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.start_daily_run(&daily).await.0, StatusCode::OK);

    // Scopes: reading status needs execution:read, starting execution:write.
    let read_only = token(&app, "demo", "dailyrun:execution:read");
    let write_only = token(&app, "demo", "dailyrun:execution:write");
    let forbidden = (StatusCode::FORBIDDEN, json!({"message": "Forbidden"}));
    assert_eq!(app.start_daily_run(&read_only).await, forbidden);
    assert_eq!(status(&app, &write_only, "").await, forbidden);
    assert_eq!(
        app.get(DAILYRUN_HOST, DAILYRUN_STATUS, None).await,
        (StatusCode::UNAUTHORIZED, unauthorized())
    );
    // The same API under the prefix and on the bare host (the default org).
    let (code, listed) = app
        .get(
            DAILYRUN_HOST,
            &format!("/superset{DAILYRUN_STATUS}?limit=5"),
            Some(&daily),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        listed["executions"].as_array().unwrap().len(),
        2,
        "{listed}"
    );
    let (code, latest) = app
        .get(
            "localhost",
            &format!("{DAILYRUN_STATUS}?mode=latest"),
            Some(&daily),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(latest, listed["executions"][0]);
    // Another org sees none of demo's executions.
    let other = token(&app, "other", "dailyrun:execution:read");
    assert_eq!(
        app.get("api.other.localhost", DAILYRUN_STATUS, Some(&other))
            .await,
        (StatusCode::OK, json!({"executions": []}))
    );
}

#[tokio::test]
async fn a_failing_step_ends_the_run_failed_with_its_reason() {
    let missing_table = refresh_manifest(
        "daily_totals",
        "SELECT service_client_id, count(*) AS n FROM ${lake}.trips_nowhere GROUP BY service_client_id",
    );
    let app = spawn_app_with(|c| with_daily_manifest(c, &missing_table)).await;
    let token = app.daily_token();
    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(ended["status"], "FAILED", "{ended}");
    assert_eq!(ended["error"], "TransformError");
    let cause = ended["cause"].as_str().unwrap();
    assert!(
        cause.starts_with("step refresh: demo_insights.daily_totals: ")
            && cause.contains("trips_nowhere"),
        "{cause}"
    );
    assert!(is_iso_micros(ended["stopDate"].as_str().unwrap()));
    let (_, none) = status(&app, &token, "?mode=last_successful").await;
    assert!(
        none["message"].is_string(),
        "a FAILED run is not successful: {none}"
    );

    // A step's own failure, and a manifest that does not parse.
    let manifest = app.data_dir.join("pipelines/orgs/demo/daily.toml");
    std::fs::write(
        &manifest,
        "version = 1\n[[steps]]\nname = \"check\"\ncomponent = \"builtin:daily_pause\"\n\
         [steps.config]\nfail = \"the source was empty\"\n",
    )
    .unwrap();
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(
        (&ended["status"], &ended["error"], &ended["cause"]),
        (
            &json!("FAILED"),
            &json!("TestFailure"),
            &json!("step check: the source was empty")
        )
    );
    std::fs::write(
        &manifest,
        "version = 1\n[[steps]]\nname = \"x\"\ncomponent = \"builtin:insert\"\n",
    )
    .unwrap();
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(ended["status"], "FAILED");
    assert_eq!(ended["error"], "ManifestError");
    let cause = ended["cause"].as_str().unwrap();
    assert!(
        cause.starts_with("orgs/demo/daily.toml: steps[0].component"),
        "{cause}"
    );
}

#[tokio::test]
async fn the_schedule_starts_one_run_per_slot_when_the_flag_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::starting_at(
        DateTime::parse_from_rfc3339("2026-11-22T01:59:00Z")
            .unwrap()
            .with_timezone(&Utc),
    );
    // Only the startup tick and the ticks this test runs.
    let adjust = |c: &mut lakehost::Config| {
        with_daily_manifest(c, &pause_manifest(0));
        c.dailyrun.tick_ms = 3_600_000;
        for org in &mut c.orgs {
            org.daily_run_schedule = "0 2 * * *".into();
        }
    };
    let app = spawn_in(dir.path().to_path_buf(), clock.clone(), adjust).await;
    let token = app.daily_token();
    let runs = |app: &TestApp| {
        let store = app.store.clone();
        async move { store.daily_runs("demo", 200, false).await.unwrap() }
    };

    app.daily_runs.tick().await.unwrap();
    assert!(runs(&app).await.is_empty(), "01:59: not due");
    clock.advance(chrono::Duration::seconds(65));
    app.daily_runs.tick().await.unwrap();
    assert!(
        runs(&app).await.is_empty(),
        "02:00:05, flag never set: no run"
    );
    let (code, _) = post(&app, DAILYRUN_HOST, FLAG, &token, r#"{"dailyRun": false}"#).await;
    assert_eq!(code, StatusCode::OK);
    app.daily_runs.tick().await.unwrap();
    assert!(runs(&app).await.is_empty(), "flag false: no run");

    post(&app, DAILYRUN_HOST, FLAG, &token, r#"{"dailyRun": "yes"}"#).await;
    app.daily_runs.tick().await.unwrap();
    let started = runs(&app).await;
    assert_eq!(started.len(), 1, "flag true at 02:00:05: the 02:00 run");
    let slot = DateTime::parse_from_rfc3339("2026-11-22T02:00:00Z").unwrap();
    assert_eq!(started[0].scheduled_for, Some(slot.timestamp_micros()));
    assert_eq!(
        started[0].name,
        "DailyScheduledETL_demo_20261122T020005000000Z"
    );
    assert_eq!(app.wait_for_daily_run(&token).await["status"], "SUCCEEDED");

    // A second replica on the same store, and more ticks: still one run for
    // the slot. The other org's flag is unset: none for it.
    let replica = spawn_in(dir.path().to_path_buf(), clock.clone(), adjust).await;
    for _ in 0..3 {
        app.daily_runs.tick().await.unwrap();
        replica.daily_runs.tick().await.unwrap();
    }
    assert_eq!(runs(&app).await.len(), 1);

    // The next night both replicas tick at once: one run.
    clock.advance(chrono::Duration::days(1));
    let (a, b) = tokio::join!(app.daily_runs.tick(), replica.daily_runs.tick());
    a.unwrap();
    b.unwrap();
    assert_eq!(runs(&app).await.len(), 2);
    let token = app.daily_token();
    assert_eq!(app.wait_for_daily_run(&token).await["status"], "SUCCEEDED");

    // Down over a whole night and back after the catch-up hour: nothing is
    // started for the missed slot.
    clock.advance(chrono::Duration::days(1) + chrono::Duration::minutes(90));
    app.daily_runs.tick().await.unwrap();
    assert_eq!(runs(&app).await.len(), 2);
    assert!(
        app.store
            .daily_runs("other", 10, false)
            .await
            .unwrap()
            .is_empty(),
        "the other org never switched its flag on"
    );
}

#[tokio::test]
async fn a_run_past_its_maximum_duration_ends_timed_out() {
    let app = spawn_app_with(|c| {
        with_daily_manifest(c, &pause_manifest(2000));
        c.dailyrun.max_duration_s = 60;
        c.dailyrun.tick_ms = 3_600_000;
        // The clock jumps a minute: the hold must outlast the jump.
        c.dailyrun.lease_s = 600;
    })
    .await;
    let token = app.daily_token();
    let (code, started) = app.start_daily_run(&token).await;
    assert_eq!(code, StatusCode::OK);
    app.clock.advance(chrono::Duration::seconds(59));
    app.daily_runs.tick().await.unwrap();
    let (_, latest) = status(&app, &token, "?mode=latest").await;
    assert_eq!(latest["status"], "RUNNING", "59 s: still within its time");
    assert_eq!(latest["stopDate"], Value::Null);
    app.clock.advance(chrono::Duration::seconds(2));
    app.daily_runs.tick().await.unwrap();
    let (_, latest) = status(&app, &token, "?mode=latest").await;
    assert_eq!(latest["name"], started["executionName"]);
    assert_eq!(latest["status"], "TIMED_OUT", "{latest}");
    assert_eq!(latest["error"], "States.Timeout");
    assert!(is_iso_micros(latest["stopDate"].as_str().unwrap()));
    // The org is free again at once.
    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_run_left_running_by_a_stopped_server_is_aborted_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let adjust = |c: &mut lakehost::Config| {
        with_daily_manifest(c, &pause_manifest(3000));
        c.dailyrun.lease_s = 3;
    };
    let first = spawn_in(dir.path().to_path_buf(), clock.clone(), adjust).await;
    let token = first.daily_token();
    let (code, started) = first.start_daily_run(&token).await;
    assert_eq!(code, StatusCode::OK);
    first.stop_abruptly().await;

    // The server is gone; its hold lapses; a new server starts.
    clock.advance(chrono::Duration::seconds(10));
    let second = spawn_in(dir.path().to_path_buf(), clock.clone(), adjust).await;
    let token = second.daily_token();
    let ended = second.wait_for_daily_run(&token).await;
    assert_eq!(ended["name"], started["executionName"]);
    assert_eq!(ended["status"], "ABORTED", "{ended}");
    assert_eq!(ended["error"], "Aborted");
    assert!(is_iso_micros(ended["stopDate"].as_str().unwrap()));
    // The org can run again; a body (the spec has none) is ignored.
    let (code, body) = post(&second, DAILYRUN_HOST, DAILYRUN_START, &token, "{not json").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["started"], true);
}

#[tokio::test]
async fn the_default_run_refreshes_a_dictionary_of_the_lake_every_caller_reads() {
    // No daily.toml in pipeline.dir: the built-in default runs.
    let app = spawn_app_with(|c| c.pipeline.dir = c.storage.data_dir.join("no-pipelines")).await;
    seed_demo_lake(&app).await;
    let token = app.daily_token();
    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(ended["status"], "SUCCEEDED", "{ended}");

    // Public rows (service client 901): an own-client analyst of client 1
    // reads them without a filter.
    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    let rows = app
        .rows_of(
            ORG_HOST,
            &analyst,
            "SELECT table_name, column_name, data_type FROM demo_insights.lake_columns \
             ORDER BY table_name, position",
        )
        .await;
    let columns: Vec<(String, String)> = rows
        .into_iter()
        .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
        .collect();
    assert!(
        columns.contains(&("trips".into(), "trip_id".into()))
            && columns.contains(&("trips".into(), "service_client_id".into())),
        "{columns:?}"
    );
    assert!(
        columns.iter().all(|(table, _)| table == "trips"),
        "only the lake database's tables: {columns:?}"
    );
}

#[tokio::test]
async fn a_failing_store_gets_the_spec_500_messages() {
    let app = spawn_app().await;
    let token = app.daily_token();
    // Warm the validator's key cache, then take the store away.
    assert_eq!(status(&app, &token, "").await.0, StatusCode::OK);
    app.store.close().await;
    let error = |message: &str| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "message": message }),
        )
    };
    assert_eq!(
        app.get(DAILYRUN_HOST, FLAG, Some(&token)).await,
        error("Error reading ClientMetaData")
    );
    assert_eq!(
        post(&app, DAILYRUN_HOST, FLAG, &token, r#"{"dailyRun": true}"#).await,
        error("Error updating ClientMetaData")
    );
    assert_eq!(
        app.start_daily_run(&token).await,
        error("Error starting Daily ETL pipeline execution")
    );
    assert_eq!(
        status(&app, &token, "?mode=latest").await,
        error("Error reading DailyRun executions")
    );
}

#[tokio::test]
async fn transforms_that_write_elsewhere_or_lack_a_service_client_fail_and_write_nothing() {
    let app =
        spawn_app_with(|c| with_daily_manifest(c, &refresh_manifest("placeholder", "SELECT 1")))
            .await;
    seed_demo_lake(&app).await;
    let token = app.daily_token();
    let manifest = app.data_dir.join("pipelines/orgs/demo/daily.toml");
    let deep_sql = format!(
        "SELECT service_client_id, {} AS n FROM ${{lake}}.trips",
        vec!["1"; 1500].join("+")
    );
    for (table, sql, reason) in [
        // Only a SELECT runs: no DDL or DML through a transform.
        (
            "dropped",
            "DROP TABLE ${lake}.trips",
            "only a SELECT (or WITH ... SELECT) runs here",
        ),
        (
            "copied",
            "INSERT INTO ${lake}.trips SELECT * FROM ${lake}.trips",
            "only a SELECT (or WITH ... SELECT) runs here",
        ),
        // Every lake row belongs to a service client.
        (
            "no_client",
            "SELECT count(*) AS n FROM ${lake}.trips",
            "needs a service_client_id column",
        ),
        // A table name that is not a plain identifier.
        (
            "Bad-Name",
            "SELECT service_client_id FROM ${lake}.trips",
            "table name 'Bad-Name' is not allowed",
        ),
        // An expression chain that would overflow the planner's stack.
        (
            "too_deep",
            deep_sql.as_str(),
            "expressions nest more than 256 levels deep",
        ),
    ] {
        std::fs::write(&manifest, refresh_manifest(table, sql)).unwrap();
        app.clock.advance(chrono::Duration::seconds(1));
        assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
        let ended = app.wait_for_daily_run(&token).await;
        assert_eq!(
            (&ended["status"], &ended["error"]),
            (&json!("FAILED"), &json!("TransformError")),
            "{sql}: {ended}"
        );
        let cause = ended["cause"].as_str().unwrap();
        assert!(cause.contains(reason), "{sql}: {cause}");
    }
    // Nothing was created in insights, and the lake table kept its rows.
    let insights: Vec<String> = app
        .store
        .catalog_of("demo", None)
        .await
        .unwrap()
        .1
        .into_iter()
        .map(|t| t.name)
        .collect();
    for table in ["dropped", "copied", "no_client", "Bad-Name", "too_deep"] {
        assert!(!insights.contains(&table.to_string()), "{insights:?}");
    }
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    assert_eq!(
        app.rows_of(ORG_HOST, &admin, "SELECT count(*) FROM demo_lake_v2.trips")
            .await,
        vec![vec![Some("6".to_string())]]
    );
}

#[tokio::test]
async fn manual_starts_in_one_microsecond_get_names_of_their_own() {
    // The test clock stands still, so every start happens in one microsecond:
    // the name of an ended run must not make the next start a 500.
    let app = spawn_app().await;
    let daily = app.daily_token();
    let mut names = Vec::new();
    for _ in 0..3 {
        let (code, started) = app.start_daily_run(&daily).await;
        assert_eq!(code, StatusCode::OK, "{started}");
        let name = started["executionName"].as_str().unwrap().to_string();
        assert_execution_name(&name);
        assert_eq!(app.wait_for_daily_run(&daily).await["name"], name);
        names.push(name);
    }
    names.dedup();
    assert_eq!(names.len(), 3, "{names:?}");
    let (code, list) = status(&app, &daily, "?mode=list").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(list["executions"].as_array().unwrap().len(), 3, "{list}");
}

/// A daily SQL the per-call bounds allow that would run for minutes (a
/// 2,000-value list sorted for each of sixteen million rows): the step's
/// time limit ends it in the middle of its SQL, the run fails with the step's
/// time-limit reason, another org is served meanwhile, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_sql_running_past_its_steps_time_limit_fails_the_run_at_the_limit() {
    let sql = "SELECT 1 AS service_client_id, \
               sum(cardinality(array_sort(range(value % 7 + 2000, 0, -1)))) AS n \
               FROM generate_series(1, 16000000)";
    let manifest = refresh_manifest_with("sorted", sql, "time_limit_ms = 500");
    let app = spawn_app_with(|c| with_daily_manifest(c, &manifest)).await;
    let token = app.daily_token();
    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);

    let other = app.org_token_for("other", &["ZoneAdmin"], "[0]");
    let theirs = app.submit_sql(OTHER_ORG_HOST, &other, "SELECT 1").await;
    app.wait_for(OTHER_ORG_HOST, &other, &theirs, Some("SUCCEEDED"))
        .await;
    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(
        (&ended["status"], &ended["error"], &ended["cause"]),
        (
            &json!("FAILED"),
            &json!("InternalError"),
            &json!("step refresh ran past its time limit of 500 ms")
        ),
        "{ended}"
    );
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    app.assert_no_table(&admin, "demo_insights.sorted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_daily_steps_end_their_runs_failed_naming_the_step_while_other_orgs_are_served() {
    let manifest = |limits: &str, config: &str| {
        format!(
            "version = 1\n[[steps]]\nname = \"hostile\"\ncomponent = \"builtin:daily_pause\"\n\
             {limits}\n[steps.config]\n{config}\n"
        )
    };
    let app = spawn_app_with(|c| with_daily_manifest(c, &pause_manifest(0))).await;
    let path = app.data_dir.join("pipelines/orgs/demo/daily.toml");
    let token = app.daily_token();
    let other = app.org_token_for("other", &["ZoneAdmin"], "[0]");
    for (limits, config, error, cause) in [
        (
            "time_limit_ms = 300",
            "ms = 600000",
            "InternalError",
            "step hostile ran past its time limit of 300 ms",
        ),
        (
            "memory_limit_bytes = 16777216",
            "how = \"grow_memory\"",
            "InternalError",
            "step hostile needed more than its memory limit",
        ),
        (
            "",
            "how = \"recurse\"",
            "InternalError",
            "step hostile trapped",
        ),
        (
            "",
            "how = \"panic\"",
            "InternalError",
            "step hostile trapped",
        ),
        (
            "grants = [\"log\"]",
            "how = \"query\"",
            "TestFailure",
            "step hostile: lake-sql: not granted",
        ),
    ] {
        std::fs::write(&path, manifest(limits, config)).unwrap();
        app.clock.advance(chrono::Duration::seconds(1));
        assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
        // Another org's query finishes while the run goes on or ends.
        let theirs = app.submit_sql(OTHER_ORG_HOST, &other, "SELECT 1").await;
        app.wait_for(OTHER_ORG_HOST, &other, &theirs, Some("SUCCEEDED"))
            .await;
        let ended = app.wait_for_daily_run(&token).await;
        assert_eq!(
            (&ended["status"], &ended["error"]),
            (&json!("FAILED"), &json!(error)),
            "{config}: {ended}"
        );
        let text = ended["cause"].as_str().unwrap_or_default();
        assert!(text.starts_with(cause), "{config}: {ended}");
        // A trap tells what the step wrote to stderr: a panic's message.
        if config.contains("panic") {
            assert!(text.contains("this step panics on purpose"), "{ended}");
        }
    }
    // Megabytes of log lines are cut, and the run goes on to its end.
    std::fs::write(
        &path,
        manifest("grants = [\"log\"]", "how = \"flood_logs\""),
    )
    .unwrap();
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(ended["status"], "SUCCEEDED", "{ended}");
}

/// Whether the demo org's insights database holds `table`.
async fn insights_table_exists(app: &TestApp, table: &str) -> bool {
    let database = app
        .store
        .database("demo", None, "demo_insights")
        .await
        .unwrap()
        .expect("the insights database");
    app.store
        .table(&database.id, table)
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn a_manifest_swapped_while_a_daily_run_runs_changes_only_the_runs_after_it() {
    let pipelines = tempfile::tempdir().unwrap();
    let org_dir = pipelines.path().join("orgs/demo");
    std::fs::create_dir_all(&org_dir).unwrap();
    let refresh = lakehost::pipeline::builtin::component("sql_transform")
        .unwrap()
        .1;
    std::fs::write(org_dir.join("refresh.wasm"), refresh).unwrap();
    // One step refreshing `table` with the file component.
    let refresh_step = |name: &str, table: &str| {
        format!(
            "[[steps]]\nname = \"{name}\"\ncomponent = \"refresh.wasm\"\n\
             grants = [\"lake-sql\", \"log\"]\n[[steps.config.tables]]\ntable = \"{table}\"\n\
             sql = \"SELECT 901 AS service_client_id, 1 AS n\"\n"
        )
    };
    // The first run: a refresh whose table shows that the run has taken its
    // components, a pause, and the same file component once more.
    let first_manifest = format!(
        "version = 1\n{}[[steps]]\nname = \"pause\"\ncomponent = \"builtin:daily_pause\"\n\
         [steps.config]\nms = 3000\n{}",
        refresh_step("before", "before_swap"),
        refresh_step("after", "after_swap"),
    );
    std::fs::write(org_dir.join("daily.toml"), &first_manifest).unwrap();
    let dir = pipelines.path().to_path_buf();
    let app = spawn_app_with(|config| {
        config.pipeline.dir = dir;
        config.pipeline.test_steps = true;
    })
    .await;
    let token = app.daily_token();

    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !insights_table_exists(&app, "before_swap").await {
        assert!(
            std::time::Instant::now() < deadline,
            "the first step never refreshed its table"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Meanwhile, in the pause: a component that is no component at all, and
    // a manifest naming other tables.
    std::fs::write(org_dir.join("refresh.wasm"), b"\0asm no longer a component").unwrap();
    let second_manifest = format!("version = 1\n{}", refresh_step("only", "second_run"));
    std::fs::write(org_dir.join("daily.toml"), &second_manifest).unwrap();

    // The run ends with the components and config it began with.
    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(ended["status"], "SUCCEEDED", "{ended}");
    assert!(insights_table_exists(&app, "after_swap").await);
    assert!(!insights_table_exists(&app, "second_run").await);

    // The next run takes the new manifest and the broken file: it fails
    // naming the file, without a server folder in the message.
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(
        (&ended["status"], &ended["error"]),
        (&json!("FAILED"), &json!("InternalError")),
        "{ended}"
    );
    let cause = ended["cause"].as_str().unwrap();
    assert!(cause.contains("refresh.wasm"), "{cause}");
    assert!(
        !cause.contains(&pipelines.path().display().to_string()),
        "{cause}"
    );

    // With the good file back, the new manifest runs.
    std::fs::write(org_dir.join("refresh.wasm"), refresh).unwrap();
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(app.start_daily_run(&token).await.0, StatusCode::OK);
    let ended = app.wait_for_daily_run(&token).await;
    assert_eq!(ended["status"], "SUCCEEDED", "{ended}");
    assert!(insights_table_exists(&app, "second_run").await);
}
