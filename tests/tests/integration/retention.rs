//! Retention (issue 49, docs/operating.md "Retention"): a year of days on
//! the injected clock (queries, loads, daily runs, loads left OPEN, a server
//! stopped as kill -9 stops it in the middle of a commit) keeps rows and
//! bytes bounded, answers a swept result with its documented error, and
//! never deletes a file the catalog names. The sweep's lease lets one
//! replica sweep at a time.

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration as StdDuration, Instant, SystemTime},
};

use chrono::Duration;
use lakehost::{
    clock::ManualClock,
    observability::retention::Swept,
    retention::{Sweeper, SweptParts},
    store::retention::RowCounts,
};
use lakehost_tests::*;
use object_store::ObjectStoreExt as _;
use serde_json::json;
use tokio_stream::StreamExt as _;

/// Only the rounds a test runs (and the one at startup).
/// (The startup round runs at once; the next would be an hour later.) The
/// test signs its tokens with the realm's pinned key: no rotation retires
/// it within the simulated year.
fn rounds_by_hand(config: &mut lakehost::Config) {
    config.retention.sweep_every_s = 3600;
    config.idp.key_rotation_hours = 2 * 365 * 24;
}

/// The lake's objects outside lakehost's own `_` folders, with their sizes.
async fn lake_data_files(app: &TestApp) -> Vec<(String, u64)> {
    let mut listing = app.lake.object_store().list(None);
    let mut files = Vec::new();
    while let Some(meta) = listing.next().await {
        let meta = meta.unwrap();
        let path = meta.location.to_string();
        if !path.starts_with('_') {
            files.push((path, meta.size));
        }
    }
    files
}

/// Bytes and objects under `_results/`.
async fn result_files(app: &TestApp) -> (usize, u64) {
    let prefix = object_store::path::Path::from("_results");
    let mut listing = app.lake.object_store().list(Some(&prefix));
    let (mut count, mut bytes) = (0, 0);
    while let Some(meta) = listing.next().await {
        count += 1;
        bytes += meta.unwrap().size;
    }
    (count, bytes)
}

/// Every path a table of the demo org lists.
async fn catalog_paths(app: &TestApp) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for database in app.store.databases("demo", None).await.unwrap() {
        for table in app.store.tables(&database.id).await.unwrap() {
            for file in app.store.files(&table.id).await.unwrap() {
                paths.insert(file.file.path);
            }
        }
    }
    paths
}

/// One committed load of a few trips into `trips`.
async fn commit_trips(app: &TestApp, token: &str, clients: &[i64]) -> String {
    let id = app
        .create_load(
            token,
            &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
        )
        .await;
    app.stage_file(token, &id, "part_1", &trips_batch(clients, 3))
        .await;
    let count = clients.len() * 3;
    let (status, body) = app
        .commit(
            token,
            &id,
            &json!({"check_sum": {"count(*)": count}}).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    id
}

/// Makes a local lake file look last written `age` ago.
fn backdate(app: &TestApp, path: &str, age: StdDuration) {
    let file = std::fs::File::options()
        .write(true)
        .open(app.data_dir.join("lake").join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    file.set_modified(SystemTime::now() - age).unwrap();
}

fn day() -> Duration {
    Duration::days(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_year_of_days_stays_bounded_and_keeps_every_file_the_catalog_names() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let mut app = spawn_in(dir.path().to_path_buf(), clock.clone(), rounds_by_hand).await;
    let results_days = 7;
    let jobs_days = 90;
    let mut first_query = None;
    let mut figures = Vec::new();
    let mut busiest_round = StdDuration::ZERO;
    let mut swept = std::collections::BTreeMap::<&str, u64>::new();
    for today in 0..365 {
        let admin = app.token_for(&["ZoneAdmin"], "[0]");
        // A load a day (committed), a query of the lake, a daily refresh a
        // week, a load left OPEN with its upload a month.
        let load = commit_trips(&app, &admin, &[today % 5 + 1, 7]).await;
        let ended = app.wait_for_load(&admin, &load).await;
        assert_eq!(ended["LoadStatus"], "SUCCESS", "day {today}: {ended}");
        let (query, done) = app
            .run_sql(
                ORG_HOST,
                &admin,
                "SELECT service_client_id, count(*) FROM trips GROUP BY 1 ORDER BY 1",
            )
            .await;
        assert_eq!(done["status"]["state"], "SUCCEEDED", "day {today}: {done}");
        let _ = app.csv_link(ORG_HOST, &admin, &query).await;
        first_query.get_or_insert(query);
        if today % 7 == 3 {
            let daily = app.daily_token();
            let (code, started) = app.start_daily_run(&daily).await;
            assert_eq!(code, StatusCode::OK, "{started}");
            let run = app.wait_for_daily_run(&daily).await;
            assert_eq!(run["status"], "SUCCEEDED", "{run}");
        }
        if today % 7 == 0 {
            let response = app
                .request(reqwest::Method::POST, ORG_HOST, QUERY)
                .bearer_auth(&admin)
                .header("Idempotency-Key", format!("day-{today}"))
                .json(&json!({"query": "SELECT 1"}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::ACCEPTED);
        }
        if today % 30 == 11 {
            let open = app
                .create_load(
                    &admin,
                    &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}),
                )
                .await;
            app.stage_file(&admin, &open, "part_1", &trips_batch(&[1], 2))
                .await;
        }
        if today == 200 {
            // kill -9 in the middle of a commit, then a new process on the
            // same store and lake; the next claim after the lease ends it.
            let stopped_load = commit_trips(&app, &admin, &[1, 2, 3, 4, 5, 6]).await;
            app.stop_abruptly().await;
            app = spawn_in(dir.path().to_path_buf(), clock.clone(), rounds_by_hand).await;
            clock.advance(Duration::minutes(10));
            let admin = app.token_for(&["ZoneAdmin"], "[0]");
            let ended = app.wait_for_load(&admin, &stopped_load).await;
            assert!(
                matches!(ended["LoadStatus"].as_str(), Some("SUCCESS" | "FAIL")),
                "{ended}"
            );
        }
        clock.advance(day());
        let before = Instant::now();
        let round = app.retention.round(today % 7 == 6).await;
        busiest_round = busiest_round.max(before.elapsed());
        for (kind, count) in &round.swept {
            *swept.entry(kind.as_str()).or_default() += count;
        }
        assert!(round.held, "day {today}: one replica, its lease");
        assert!(
            round.failures.is_empty(),
            "day {today}: {:?}",
            round.failures
        );
        let keys = app.store.row_counts().await.unwrap().idempotency_keys;
        assert!(keys <= 1, "day {today}: {keys} idempotency keys");
        if today % 30 == 29 || today == 364 {
            let rows = app.store.row_counts().await.unwrap();
            let (result_count, result_bytes) = result_files(&app).await;
            figures.push((today + 1, rows, result_count, result_bytes));
        }
        if today == results_days + 1 {
            // The first query's result is gone: its pages answer that, its
            // job still reads.
            let first = first_query.clone().unwrap();
            let admin = app.token_for(&["ZoneAdmin"], "[0]");
            let (status, page) = app
                .get(ORG_HOST, &format!("/v2/query/{first}/result"), Some(&admin))
                .await;
            assert_eq!(status, StatusCode::CONFLICT, "{page}");
            let message = page["message"].as_str().unwrap();
            assert!(
                message.contains("result was deleted")
                    && message.contains("retention.results_days"),
                "{message}"
            );
            // The typed download opted in: the same 409 and message. The
            // spec's CSV link: every failure is its 500.
            let (status, arrow) = app
                .get(
                    ORG_HOST,
                    &format!("/v2/query/{first}/csv?format=arrow"),
                    Some(&admin),
                )
                .await;
            assert_eq!((status, &arrow), (StatusCode::CONFLICT, &page));
            let (status, csv) = app
                .get(ORG_HOST, &format!("/v2/query/{first}/csv"), Some(&admin))
                .await;
            assert_eq!(
                (status, csv),
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"message": "Internal Server Error"})
                )
            );
            let (status, job) = app.query_status(ORG_HOST, &admin, &first).await;
            assert_eq!(status, StatusCode::OK, "{job}");
            assert_eq!(job["status"]["state"], "SUCCEEDED");
        }
    }
    println!(
        "day | queries | loads | load files | daily runs | lake files | result files | result bytes"
    );
    for (day, rows, count, bytes) in &figures {
        let RowCounts {
            queries,
            loads,
            load_files,
            daily_runs,
            lake_files,
            ..
        } = rows;
        println!(
            "{day:>3} | {queries:>7} | {loads:>5} | {load_files:>10} | {daily_runs:>10} | \
             {lake_files:>10} | {count:>12} | {bytes:>12}"
        );
    }
    println!("the longest round of the year: {busiest_round:?}");
    println!("removed over the year, by kind: {swept:?}");

    // Rows stay within their days (a day's margin for the sweep's round).
    let rows = app.store.row_counts().await.unwrap();
    assert!(rows.queries <= jobs_days + jobs_days / 7 + 3, "{rows:?}");
    assert!(rows.loads <= jobs_days + 8, "{rows:?}");
    assert!(rows.daily_runs <= jobs_days / 7 + 3, "{rows:?}");
    // The oldest job is gone: 404 as for a query that never was.
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let first = first_query.unwrap();
    let (status, gone) = app.query_status(ORG_HOST, &admin, &first).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let never = "0123456789abcdef0123456789abcdef";
    let (_, unknown) = app.query_status(ORG_HOST, &admin, never).await;
    assert_eq!(
        gone["message"],
        unknown["message"].as_str().unwrap().replace(never, &first),
        "the spec's 404 for an unknown id"
    );
    // Results: at most `results_days` (and the day in hand) of them, each in
    // up to three forms.
    let (count, _) = result_files(&app).await;
    assert!(
        count <= 3 * (results_days as usize + 2),
        "{count} result files"
    );

    // A write killed before its catalog commit leaves files no table lists
    // (the commit stopped on day 200 may have; here is one more, a copy of
    // a committed file): once they are old, the scan deletes them, and only
    // them.
    let named = app.table_file_paths("demo_lake_v2", "trips").await;
    assert!(!named.is_empty());
    let orphan = format!("{}.orphan-0.parquet", named[0].trim_end_matches(".parquet"));
    let store = app.lake.object_store();
    let bytes = store
        .get(&named[0].as_str().into())
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    store
        .put(&orphan.as_str().into(), bytes.into())
        .await
        .unwrap();
    let two_days = StdDuration::from_secs(2 * 86_400);
    for (path, _) in lake_data_files(&app).await {
        backdate(&app, &path, two_days);
    }
    let round = app.retention.round(true).await;
    assert!(round.removed(Swept::OrphanFiles) >= 1, "{round:?}");
    assert!(!app.lake_has(&orphan).await);

    // Every file a table lists is there, and nothing else is.
    let listed: BTreeSet<String> = lake_data_files(&app)
        .await
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    let catalog = catalog_paths(&app).await;
    assert_eq!(
        listed, catalog,
        "the lake holds exactly what the catalog names"
    );
    let storage = round.storage.expect("the round scanned");
    let sizes: u64 = lake_data_files(&app)
        .await
        .iter()
        .map(|(_, size)| size)
        .sum();
    assert_eq!(storage.lake, sizes);
    // The rows committed all year still read.
    let (_, done) = app
        .run_sql(ORG_HOST, &admin, "SELECT count(*) AS n FROM trips")
        .await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_sweeps_at_a_time_and_another_takes_over_when_it_stops() {
    let app = spawn_app_with(rounds_by_hand).await;
    // Another replica's sweep (or this one's after a restart): 60 s rounds.
    let replica = || {
        Sweeper::new(
            SweptParts {
                store: app.store.clone(),
                lake: app.lake.clone(),
                clock: Arc::new(app.clock.clone()),
                loads: app.loads.clone(),
                retired_files: app.retired_files.clone(),
            },
            lakehost::config::RetentionConfig {
                sweep_every_s: 60,
                ..Default::default()
            },
        )
    };
    let other = replica();
    // The server's own round at startup holds the lease now.
    assert!(app.retention.round(false).await.held);
    assert!(!other.round(false).await.held, "held by the first");
    app.clock.advance(Duration::seconds(3 * 3600 + 1));
    let taken = other.round(false).await;
    assert!(taken.held, "the first stopped renewing: taken over");
    assert!(!app.retention.round(false).await.held);
    // The lake scan is due once per `scan_every_s` for the fleet, whoever
    // holds the lease and however often a replica restarts.
    assert!(taken.storage.is_some(), "hours on: a scan was due");
    assert!(
        other.round(false).await.storage.is_none(),
        "not again within the hour"
    );
    app.clock.advance(Duration::seconds(3601));
    assert!(
        other.round(false).await.storage.is_some(),
        "an hour on: due again"
    );
}
