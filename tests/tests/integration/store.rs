//! The metadata store suite, run on every backend: SQLite always, Postgres over a
//! real connection when `LAKEHOST_TEST_DATABASE_URL` names a server (`eval
//! "$(.ci/postgres)"` starts one and sets it; without it the Postgres tests are
//! reported ignored, and in CI they must run).

use std::collections::{BTreeMap, BTreeSet};

use lakehost::{
    auth::DatabaseKind,
    store::{
        Error, Finished, JobCaps, Store,
        catalog::{LakeTable, NewDataFile, snapshot::CatalogSnapshot, views::LakeView},
        dailyrun::{NewDailyRun, RunEnd, RunStatus, StartOutcome},
        queries::{
            CatalogWrite, Delivery, KeptInRow, NewQuery, QueryOutcome, QueryState, ResultInRow,
            RowForm,
        },
    },
};

/// Each suite below as two tests: `store::sqlite::<suite>` on a fresh SQLite
/// file, and `store::postgres::<suite>` on a fresh database of the Postgres
/// server `eval "$(.ci/postgres)"` starts, reported ignored without one.
macro_rules! on_each_backend {
    ($($(#[$test:meta])* $suite:ident,)*) => {
        mod sqlite {
            $(
                $(#[$test])*
                async fn $suite() {
                    let dir = tempfile::tempdir().unwrap();
                    let store = lakehost::store::Store::open_sqlite(&dir.path().join("lakehost.db"))
                        .await
                        .unwrap();
                    super::$suite("sqlite", store).await;
                }
            )*
        }

        mod postgres {
            $(
                $(#[$test])*
                #[cfg_attr(
                    not(lakehost_has_postgres),
                    ignore = "needs Postgres: eval \"$(.ci/postgres)\" first (README, Tests)"
                )]
                async fn $suite() {
                    let url = lakehost_tests::fresh_postgres_url().await;
                    let store = lakehost::store::Store::open_postgres(&url).await.unwrap();
                    super::$suite("postgres", store).await;
                }
            )*
        }
    };
}

on_each_backend! {
    #[tokio::test] standard_databases_per_org_and_zone,
    #[tokio::test] tables_and_files_commit_all_at_once,
    #[tokio::test] a_kept_catalog_lasts_until_a_change_of_its_own,
    #[tokio::test] query_jobs_move_through_their_states,
    #[tokio::test] a_reused_query_copies_the_newest_matching_result_within_its_age,
    #[tokio::test] streamed_queries_keep_their_delivery_and_no_result_path,
    #[tokio::test] a_query_stored_at_its_end_reads_back_final_and_is_reusable,
    #[tokio::test] claims_share_the_workers_between_orgs_and_callers,
    #[tokio::test] an_expired_lease_ends_the_job_failed_and_a_handed_back_one_runs_again,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)] concurrent_workers_claim_each_job_once,
    #[tokio::test] catalog_changes_commit_with_the_final_state_or_not_at_all,
    #[tokio::test] loads_keep_their_files_and_stale_staging_expires,
    #[tokio::test] load_commits_are_claimed_once_and_end_once_with_their_files,
    #[tokio::test] daily_run_flags_per_org,
    #[tokio::test] daily_runs_one_running_per_org_one_per_slot_ended_once,
    #[tokio::test] concurrent_daily_run_starts_have_one_winner,
    #[tokio::test] a_refresh_swaps_the_table_only_while_its_run_holds,
}

fn query(id: &str, submitted_order: u32) -> NewQuery {
    NewQuery {
        id: format!("{submitted_order:04}-{id}"),
        org: "demo".into(),
        zone: None,
        owner_sub: "user-1".into(),
        access_fingerprint: "0123456789abcdef".into(),
        sql: "SELECT 1".into(),
        database: "demo_lake_v2".into(),
        statement_type: "DML".into(),
        access_json: "{}".into(),
        result_first: Default::default(),
    }
}

async fn standard_databases_per_org_and_zone(backend: &'static str, store: Store) {
    let org = store
        .ensure_standard_databases("demo-co", None)
        .await
        .unwrap();
    let again = store
        .ensure_standard_databases("demo-co", None)
        .await
        .unwrap();
    assert_eq!(org, again, "{backend}: idempotent");
    let names: BTreeSet<&str> = org.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "demo_co_lake_v2",
            "demo_co_insights",
            "demo_co_data_input",
            "demo_co_sandbox"
        ])
    );
    let zone = store
        .ensure_standard_databases("demo-co", Some("lab"))
        .await
        .unwrap();
    let lake = zone.iter().find(|d| d.kind == DatabaseKind::Lake).unwrap();
    assert_eq!(
        (lake.name.as_str(), lake.zone.as_deref()),
        ("lab_lake", Some("lab"))
    );
    assert_eq!(
        store.databases("demo-co", None).await.unwrap().len(),
        4,
        "{backend}"
    );
    assert!(
        store
            .database("demo-co", None, "lab_lake")
            .await
            .unwrap()
            .is_none(),
        "{backend}: zones are apart"
    );
}

async fn tables_and_files_commit_all_at_once(backend: &'static str, store: Store) {
    let dbs = store.ensure_standard_databases("demo", None).await.unwrap();
    let lake = &dbs
        .iter()
        .find(|d| d.kind == DatabaseKind::Lake)
        .unwrap()
        .id;
    let partitions = vec!["service_client_id".to_string(), "svc$load_id".to_string()];
    let table = store
        .create_table(lake, "trips", "{}", &partitions, 1)
        .await
        .unwrap();
    assert!(
        matches!(
            store
                .create_table(lake, "trips", "{}", &partitions, 2)
                .await,
            Err(Error::AlreadyExists { .. })
        ),
        "{backend}"
    );
    assert_eq!(
        store.table(lake, "trips").await.unwrap(),
        Some(table.clone())
    );

    let file = |n: i64| NewDataFile {
        path: format!(
            "lake/demo_lake_v2/trips/service_client_id={n}/svc$load_id=l1/part-0.parquet"
        ),
        service_client_id: Some(n),
        partition_values: BTreeMap::from([
            ("service_client_id".into(), n.to_string()),
            ("svc$load_id".into(), "l1".into()),
        ]),
        row_count: 10 * n,
        size_bytes: 100,
        load_id: Some("l1".into()),
    };
    store
        .commit_files(&table.id, &[file(1), file(2)], 5)
        .await
        .unwrap();
    let files = store.files(&table.id).await.unwrap();
    assert_eq!(
        files.iter().map(|f| f.file.clone()).collect::<Vec<_>>(),
        vec![file(1), file(2)],
        "{backend}"
    );

    // A batch with a duplicate path fails whole: nothing of it is visible.
    let mut bad = file(3);
    bad.path = file(1).path;
    assert!(
        store
            .commit_files(&table.id, &[file(4), bad], 6)
            .await
            .is_err()
    );
    assert_eq!(
        store.files(&table.id).await.unwrap().len(),
        2,
        "{backend}: all or nothing"
    );

    // A drop unlists the files and retires them as of its own time; they
    // are due for deletion only for a cut-off after that time.
    assert_eq!(store.drop_table(lake, "trips", 50).await.unwrap(), 2);
    assert!(store.table(lake, "trips").await.unwrap().is_none());
    assert!(store.files(&table.id).await.unwrap().is_empty());
    assert!(matches!(
        store.drop_table(lake, "trips", 51).await,
        Err(Error::NotFound { .. })
    ));
    assert!(
        store.retired_files_due(50, 10).await.unwrap().is_empty(),
        "{backend}: retired at 50, not before"
    );
    assert_eq!(
        store.retired_files_due(51, 10).await.unwrap(),
        vec![file(1).path, file(2).path],
        "{backend}"
    );
    assert_eq!(store.retired_files_due(51, 1).await.unwrap().len(), 1);
    store.forget_retired_files(&[file(1).path]).await.unwrap();
    assert_eq!(
        store.retired_files_due(i64::MAX, 10).await.unwrap(),
        vec![file(2).path],
        "{backend}: forgotten once gone"
    );
    // A retired path listed again is no longer retired.
    let again = store
        .create_table(lake, "trips", "{}", &partitions, 52)
        .await
        .unwrap();
    store.commit_files(&again.id, &[file(2)], 53).await.unwrap();
    assert!(
        store
            .retired_files_due(i64::MAX, 10)
            .await
            .unwrap()
            .is_empty(),
        "{backend}: listed again"
    );
}

/// A replica keeps an org's catalog while none of its databases' versions
/// moved: another org's or zone's change leaves it, and each change of its
/// own (a table, its files, a view, a drop) is in the next read. The
/// versions move by the store's triggers, on both backends.
async fn a_kept_catalog_lasts_until_a_change_of_its_own(backend: &'static str, store: Store) {
    use std::sync::Arc;
    let lake_of = |dbs: Vec<lakehost::store::catalog::LakeDatabase>| {
        dbs.into_iter()
            .find(|d| d.kind == DatabaseKind::Lake)
            .unwrap()
            .id
    };
    let lake = lake_of(store.ensure_standard_databases("demo", None).await.unwrap());
    let other = lake_of(
        store
            .ensure_standard_databases("other", None)
            .await
            .unwrap(),
    );
    let read = || store.catalog_snapshot("demo", None);
    let kept = |a: &Arc<CatalogSnapshot>, b: &Arc<CatalogSnapshot>| Arc::ptr_eq(a, b);
    let names = |s: &CatalogSnapshot| {
        let tables = s.tables.iter().map(|t| t.name.clone());
        tables
            .chain(s.views.iter().map(|v| v.name.clone()))
            .collect::<BTreeSet<_>>()
    };

    let first = read().await.unwrap();
    assert_eq!(first.databases.len(), 4, "{backend}");
    assert!(
        kept(&first, &read().await.unwrap()),
        "{backend}: unchanged, kept"
    );
    store
        .create_table(&other, "trips", "{}", &[], 1)
        .await
        .unwrap();
    lake_of(
        store
            .ensure_standard_databases("demo", Some("z1"))
            .await
            .unwrap(),
    );
    assert!(
        kept(&first, &read().await.unwrap()),
        "{backend}: another org's table and a zone of its own leave it"
    );

    let table = store
        .create_table(&lake, "trips", "{}", &[], 2)
        .await
        .unwrap();
    let created = read().await.unwrap();
    assert!(!kept(&first, &created), "{backend}");
    assert_eq!(names(&created), BTreeSet::from(["trips".to_string()]));
    assert!(created.files(&store, &table.id).await.unwrap().is_empty());
    let file = NewDataFile {
        path: "lake/demo_lake_v2/trips/part-0.parquet".into(),
        service_client_id: Some(1),
        partition_values: BTreeMap::new(),
        row_count: 3,
        size_bytes: 100,
        load_id: Some("l1".into()),
    };
    store
        .commit_files(&table.id, std::slice::from_ref(&file), 3)
        .await
        .unwrap();
    let committed = read().await.unwrap();
    assert!(!kept(&created, &committed), "{backend}: a commit is seen");
    let files = committed.files(&store, &table.id).await.unwrap();
    assert_eq!(
        files.iter().map(|f| f.file.clone()).collect::<Vec<_>>(),
        vec![file]
    );
    assert!(kept(&committed, &read().await.unwrap()), "{backend}");

    let view = LakeView::new(&lake, "v", ("SELECT 1 AS a", "demo_lake_v2"), "{}", 4);
    store.put_view(&view).await.unwrap();
    let viewed = read().await.unwrap();
    assert!(!kept(&committed, &viewed), "{backend}: a view is seen");
    assert_eq!(
        names(&viewed),
        BTreeSet::from(["trips".to_string(), "v".to_string()])
    );

    store.drop_table(&lake, "trips", 5).await.unwrap();
    let dropped = read().await.unwrap();
    assert!(!kept(&viewed, &dropped), "{backend}: a drop is seen");
    assert_eq!(names(&dropped), BTreeSet::from(["v".to_string()]));
    assert!(
        dropped.files(&store, &table.id).await.unwrap().is_empty(),
        "{backend}"
    );
}

async fn query_jobs_move_through_their_states(backend: &'static str, store: Store) {
    let job = store.insert_query(&query("a", 1), 100).await.unwrap();
    assert_eq!(job.state, QueryState::Queued);
    let claimed = store
        .claim_query("w1", 110, 200, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (claimed.state, claimed.attempts, claimed.started_at),
        (QueryState::Running, 1, Some(110))
    );
    assert!(
        store
            .claim_query("w2", 111, 200, JobCaps::NONE)
            .await
            .unwrap()
            .is_none(),
        "{backend}: nothing left"
    );

    let outcome = QueryOutcome::Succeeded {
        result_path: Some("results/x".into()),
        rows: 3,
        bytes: 10,
        columns_json: "[]".into(),
        reuse_key: None,
        workers: Some(3),
        // A small result kept in the row: binary-safe bytes, both forms.
        in_row: ResultInRow {
            csv: Some(bytes::Bytes::from_static(b"\"n\"\n\"1\"\n")),
            arrow: Some(bytes::Bytes::from_static(b"\xff\xff\xff\xff\0\x01")),
        },
    };
    assert!(
        store
            .finish_query(&job.query.id, "w2", &outcome, &CatalogWrite::None, 120)
            .await
            .unwrap()
            == Finished::Lost,
        "not w2's job"
    );
    assert!(
        store
            .finish_query(&job.query.id, "w1", &outcome, &CatalogWrite::None, 120)
            .await
            .unwrap()
            != Finished::Lost
    );
    let done = store.query_job(&job.query.id).await.unwrap().unwrap();
    assert_eq!(
        (
            done.state,
            done.completed_at,
            done.result_rows,
            done.result_path.as_deref(),
            done.workers,
        ),
        (
            QueryState::Succeeded,
            Some(120),
            Some(3),
            Some("results/x"),
            Some(3)
        )
    );
    assert_eq!(
        done.in_row,
        KeptInRow {
            csv_bytes: Some(8),
            arrow_bytes: Some(6)
        },
        "{backend}"
    );
    for (form, kept) in [
        (RowForm::Csv, &b"\"n\"\n\"1\"\n"[..]),
        (RowForm::Arrow, &b"\xff\xff\xff\xff\0\x01"[..]),
    ] {
        let read = store.result_in_row(&job.query.id, form).await.unwrap();
        assert_eq!(read.as_deref(), Some(kept), "{backend} {form:?}");
    }
    assert!(
        !store.cancel_query(&job.query.id, 130).await.unwrap(),
        "final stays final"
    );

    // Cancel while queued: never claimed.
    let queued = store.insert_query(&query("b", 2), 140).await.unwrap();
    assert!(store.cancel_query(&queued.query.id, 141).await.unwrap());
    assert!(
        store
            .claim_query("w1", 142, 200, JobCaps::NONE)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .query_job(&queued.query.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        QueryState::Cancelled
    );

    // Cancel while running: the worker's result is refused afterwards.
    let running = store.insert_query(&query("c", 3), 150).await.unwrap();
    store
        .claim_query("w1", 151, 300, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert!(store.cancel_query(&running.query.id, 152).await.unwrap());
    let failed = QueryOutcome::Failed {
        reason: "late".into(),
    };
    assert!(
        store
            .finish_query(&running.query.id, "w1", &failed, &CatalogWrite::None, 153)
            .await
            .unwrap()
            == Finished::Lost,
        "{backend}"
    );
    assert!(store.query_job("missing").await.unwrap().is_none());
}

/// Fair sharing in the claim: a queued job is taken only while its org and
/// caller are under the worker's caps, the org (then caller) it runs the
/// fewest of first; a dead worker's job is taken over whatever the caps.
async fn a_reused_query_copies_the_newest_matching_result_within_its_age(
    backend: &'static str,
    store: Store,
) {
    let mut ran = Vec::new();
    for (n, ended_at) in [(1, 100), (2, 200)] {
        let job = query("ran", n);
        store
            .insert_running_query(&job, "w1", ended_at, ended_at + 30)
            .await
            .unwrap();
        let outcome = QueryOutcome::Succeeded {
            result_path: Some(format!("results/{n}")),
            rows: n.into(),
            bytes: 10,
            columns_json: "[]".into(),
            reuse_key: Some("key-a".into()),
            workers: None,
            in_row: ResultInRow {
                csv: Some(bytes::Bytes::from(format!("\"n\"\n\"{n}\"\n"))),
                arrow: None,
            },
        };
        let finished = store
            .finish_query(&job.id, "w1", &outcome, &CatalogWrite::None, ended_at)
            .await
            .unwrap();
        assert_eq!(finished, Finished::Recorded, "{backend}");
        ran.push(job.id);
    }
    assert!(
        store.reusable_query("key-b", 0).await.unwrap().is_none(),
        "{backend}"
    );
    assert!(
        store.reusable_query("key-a", 201).await.unwrap().is_none(),
        "{backend}: too old"
    );
    let source = store.reusable_query("key-a", 150).await.unwrap().unwrap();
    assert_eq!(source.query.id, ran[1], "{backend}: the newest");
    let reuser = query("reuser", 3);
    let reused = store
        .insert_reused_query(&reuser, &source, 300)
        .await
        .unwrap();
    let stored = store.query_job(&reuser.id).await.unwrap().unwrap();
    assert_eq!(stored, reused, "{backend}");
    assert_eq!(stored.state, QueryState::Succeeded);
    assert_eq!(stored.result_path.as_deref(), Some("results/2"));
    assert_eq!(stored.result_rows, Some(2));
    assert_eq!(stored.reused_query_id.as_deref(), Some(ran[1].as_str()));
    // A small result's bytes come with it, from the source's row.
    let csv = store.result_in_row(&reuser.id, RowForm::Csv).await.unwrap();
    assert_eq!(csv.as_deref(), Some(&b"\"n\"\n\"2\"\n"[..]), "{backend}");
    assert_eq!(
        store
            .result_in_row(&reuser.id, RowForm::Arrow)
            .await
            .unwrap(),
        None
    );
    assert_eq!((stored.submitted_at, stored.completed_at), (300, Some(300)));
    // A reuse is not itself reused (it carries no key): the source stays the newest.
    let again = store.reusable_query("key-a", 0).await.unwrap().unwrap();
    assert_eq!(again.query.id, ran[1], "{backend}");
}

/// A streamed query (Flight SQL) is stored RUNNING on its replica's lease,
/// read back with its delivery, never claimed by another worker, and ends
/// SUCCEEDED without a result path; one cancelled before it ran is stored
/// CANCELLED at once and a second insert of the same id fails.
async fn streamed_queries_keep_their_delivery_and_no_result_path(
    backend: &'static str,
    store: Store,
) {
    let job = query("streamed", 1);
    let stored = store
        .insert_streamed_query(&job, Delivery::FlightSql, "w1", 100, 200)
        .await
        .unwrap();
    let read = store.query_job(&job.id).await.unwrap().unwrap();
    assert_eq!(read, stored, "{backend}");
    assert_eq!(
        (read.state, read.delivery, read.attempts),
        (QueryState::Running, Delivery::FlightSql, 1),
        "{backend}"
    );
    assert!(
        store
            .claim_query("w2", 101, 300, JobCaps::NONE)
            .await
            .unwrap()
            .is_none(),
        "{backend}: a running streamed job is nobody else's"
    );
    let streamed = QueryOutcome::Succeeded {
        result_path: None,
        rows: 3,
        bytes: 96,
        columns_json: "[]".into(),
        reuse_key: None,
        workers: None,
        in_row: ResultInRow::default(),
    };
    let finished = store
        .finish_query(&job.id, "w1", &streamed, &CatalogWrite::None, 110)
        .await
        .unwrap();
    assert_eq!(finished, Finished::Recorded, "{backend}");
    let ended = store.query_job(&job.id).await.unwrap().unwrap();
    assert_eq!(ended.state, QueryState::Succeeded, "{backend}");
    assert_eq!(ended.result_path, None, "{backend}");
    assert_eq!(ended.result_rows, Some(3), "{backend}");
    assert_eq!(ended.delivery, Delivery::FlightSql, "{backend}");

    let early = query("cancelled-early", 2);
    let cancelled = store
        .insert_cancelled_query(&early, Delivery::FlightSql, 120)
        .await
        .unwrap();
    assert_eq!(
        store.query_job(&early.id).await.unwrap().unwrap(),
        cancelled,
        "{backend}"
    );
    assert_eq!(cancelled.state, QueryState::Cancelled, "{backend}");
    assert_eq!(cancelled.completed_at, Some(120), "{backend}");
    assert!(
        store
            .insert_streamed_query(&early, Delivery::FlightSql, "w1", 121, 200)
            .await
            .is_err(),
        "{backend}: an id is stored once"
    );
    // A query submitted over REST is stored.
    let rest = query("rest", 3);
    assert_eq!(
        store.insert_query(&rest, 130).await.unwrap().delivery,
        Delivery::Stored
    );
    let read = store.query_job(&rest.id).await.unwrap().unwrap();
    assert_eq!(read.delivery, Delivery::Stored, "{backend}");
}

/// A waited query the submitting replica ran before storing it is stored
/// once, final: read back as written, never claimed,
/// and its result reusable through its key like any other.
async fn a_query_stored_at_its_end_reads_back_final_and_is_reusable(
    backend: &'static str,
    store: Store,
) {
    let succeeded = QueryOutcome::Succeeded {
        result_path: Some("results/at-once".into()),
        rows: 1,
        bytes: 4,
        columns_json: "[]".into(),
        reuse_key: Some("key-at-once".into()),
        workers: None,
        in_row: ResultInRow {
            csv: Some(bytes::Bytes::from_static(b"\"x\"\n")),
            arrow: Some(bytes::Bytes::from_static(b"arrow")),
        },
    };
    let failed = QueryOutcome::Failed {
        reason: "Divide by zero error".into(),
    };
    for (job, outcome, state) in [
        (query("at-once", 1), &succeeded, QueryState::Succeeded),
        (query("failed-at-once", 2), &failed, QueryState::Failed),
    ] {
        let stored = store
            .insert_ended_query(&job, 100, outcome, 105)
            .await
            .unwrap();
        assert_eq!(
            store.query_job(&job.id).await.unwrap().unwrap(),
            stored,
            "{backend}"
        );
        assert_eq!(stored.state, state, "{backend}");
        assert_eq!(
            (stored.submitted_at, stored.started_at, stored.completed_at),
            (100, Some(100), Some(105)),
            "{backend}"
        );
        assert_eq!(stored.attempts, 1, "{backend}");
    }
    let failed_job = store
        .query_job(&query("failed-at-once", 2).id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        failed_job.state_change_reason.as_deref(),
        Some("Divide by zero error")
    );
    assert_eq!(failed_job.result_path, None, "{backend}");
    assert!(
        store
            .claim_query("w1", 106, 200, JobCaps::NONE)
            .await
            .unwrap()
            .is_none(),
        "{backend}: nothing to claim"
    );
    let job = query("at-once", 1);
    let reusable = store.reusable_query("key-at-once", 100).await.unwrap();
    assert_eq!(
        reusable.map(|reused| reused.query.id),
        Some(job.id),
        "{backend}"
    );
}

async fn claims_share_the_workers_between_orgs_and_callers(backend: &'static str, store: Store) {
    let caps = JobCaps {
        per_org: 2,
        per_caller: 1,
    };
    let job = |id: &str, order: u32, org: &str, caller: &str| NewQuery {
        org: org.into(),
        owner_sub: caller.into(),
        ..query(id, order)
    };
    // In submission order: three of demo's ann, one of demo's bob, one of
    // the other org's cy.
    for (id, order, org, caller) in [
        ("ann-1", 1, "demo", "ann"),
        ("ann-2", 2, "demo", "ann"),
        ("ann-3", 3, "demo", "ann"),
        ("bob-1", 4, "demo", "bob"),
        ("cy-1", 5, "other", "cy"),
    ] {
        store
            .insert_query(&job(id, order, org, caller), i64::from(order))
            .await
            .unwrap();
    }
    let mut claimed = Vec::new();
    while let Some(job) = store.claim_query("w1", 10, 1_000, caps).await.unwrap() {
        claimed.push(job.query.id.clone());
    }
    assert_eq!(
        claimed,
        ["0001-ann-1", "0005-cy-1", "0004-bob-1"],
        "{backend}: ann is at the caller cap, demo at the org cap"
    );
    // Another worker has its own caps.
    let next = store
        .claim_query("w2", 11, 1_000, caps)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.query.id, "0002-ann-2", "{backend}");
    // w1 died: its jobs are not run again by anyone; they end FAILED.
    assert!(
        store
            .claim_query("w2", 2_000, 3_000, JobCaps::NONE)
            .await
            .unwrap()
            .is_none_or(|next| !claimed.contains(&next.query.id)),
        "{backend}"
    );
    let ended = store.end_abandoned_queries(2_000, "died").await.unwrap();
    let mut ended: Vec<_> = ended.into_iter().map(|job| job.query.id).collect();
    ended.sort();
    // w2's own job's lease ran out too.
    let mut expected = claimed.clone();
    expected.push(next.query.id.clone());
    expected.sort();
    assert_eq!(ended, expected, "{backend}");
}

async fn an_expired_lease_ends_the_job_failed_and_a_handed_back_one_runs_again(
    backend: &'static str,
    store: Store,
) {
    let job = store.insert_query(&query("d", 1), 100).await.unwrap();
    store
        .claim_query("dead-worker", 100, 110, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .end_abandoned_queries(105, "died")
            .await
            .unwrap()
            .is_empty(),
        "{backend}: lease still held"
    );
    assert!(
        store
            .renew_query_lease(&job.query.id, "dead-worker", 120)
            .await
            .unwrap()
    );
    // The lease ran out: nobody claims the job; it ends FAILED.
    assert!(
        store
            .claim_query("w2", 121, 200, JobCaps::NONE)
            .await
            .unwrap()
            .is_none(),
        "{backend}"
    );
    let ended = store.end_abandoned_queries(121, "died").await.unwrap();
    assert_eq!(ended.len(), 1, "{backend}");
    let row = store.query_job(&job.query.id).await.unwrap().unwrap();
    assert_eq!(row.state, QueryState::Failed, "{backend}");
    assert!(
        !store
            .renew_query_lease(&job.query.id, "dead-worker", 300)
            .await
            .unwrap()
    );
    let outcome = QueryOutcome::Failed { reason: "x".into() };
    assert_eq!(
        store
            .finish_query(
                &job.query.id,
                "dead-worker",
                &outcome,
                &CatalogWrite::None,
                130
            )
            .await
            .unwrap(),
        Finished::Lost,
        "{backend}: the dead worker cannot end it"
    );

    // A job handed back goes back to the queue: the next claim runs it.
    let again = store.insert_query(&query("d", 2), 200).await.unwrap();
    store
        .claim_query("draining", 200, 300, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert!(!store.hand_back_query(&again.query.id, "w2").await.unwrap());
    assert!(
        store
            .hand_back_query(&again.query.id, "draining")
            .await
            .unwrap()
    );
    let taken = store
        .claim_query("w2", 201, 300, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (taken.query.id.as_str(), taken.attempts),
        (again.query.id.as_str(), 2),
        "{backend}"
    );
    assert_ne!(
        store
            .finish_query(&again.query.id, "w2", &outcome, &CatalogWrite::None, 230)
            .await
            .unwrap(),
        Finished::Lost
    );
}

async fn concurrent_workers_claim_each_job_once(backend: &'static str, store: Store) {
    for i in 0..30 {
        store
            .insert_query(&query("e", i), i64::from(i))
            .await
            .unwrap();
    }
    let mut workers = Vec::new();
    for w in 0..6 {
        let store = store.clone();
        workers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(job) = store
                .claim_query(&format!("w{w}"), 1000, 2000, JobCaps::NONE)
                .await
                .unwrap()
            {
                mine.push(job.query.id);
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await.unwrap());
    }
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!(
        (all.len(), unique.len()),
        (30, 30),
        "{backend}: every job exactly once"
    );
}

async fn catalog_changes_commit_with_the_final_state_or_not_at_all(
    backend: &'static str,
    store: Store,
) {
    let databases = store.ensure_standard_databases("demo", None).await.unwrap();
    let sandbox = databases
        .iter()
        .find(|d| d.kind == DatabaseKind::Sandbox)
        .unwrap();
    let table = LakeTable {
        id: lakehost::store::new_id(),
        database_id: sandbox.id.clone(),
        name: "made_by_sql".into(),
        schema_json: r#"{"fields":[]}"#.into(),
        partition_columns: vec!["service_client_id".into()],
        column_order: Some(vec![
            "trip_id".into(),
            "service_client_id".into(),
            "city".into(),
        ]),
        created_at: 1,
    };
    let file = NewDataFile {
        path: "demo_sandbox/made_by_sql/service_client_id=1/q-0.parquet".into(),
        service_client_id: Some(1),
        partition_values: BTreeMap::from([("service_client_id".into(), "1".into())]),
        row_count: 5,
        size_bytes: 100,
        load_id: Some("q".into()),
    };
    let write = CatalogWrite::CreateTableWithFiles {
        table: table.clone(),
        files: vec![file.clone()],
    };
    let outcome = QueryOutcome::Succeeded {
        result_path: Some("r".into()),
        rows: 1,
        bytes: 1,
        columns_json: "[]".into(),
        reuse_key: None,
        workers: None,
        in_row: ResultInRow::default(),
    };

    // A worker that lost its job (cancelled meanwhile) writes nothing.
    let lost = store
        .insert_query(&query("ctas-lost", 1), 10)
        .await
        .unwrap();
    store
        .claim_query("w1", 11, 100, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    store.cancel_query(&lost.query.id, 12).await.unwrap();
    assert_eq!(
        store
            .finish_query(&lost.query.id, "w1", &outcome, &write, 13)
            .await
            .unwrap(),
        Finished::Lost,
        "{backend}"
    );
    assert!(
        store
            .table(&sandbox.id, "made_by_sql")
            .await
            .unwrap()
            .is_none()
    );

    // The holder's finish creates the table and lists its file, at once.
    let won = store.insert_query(&query("ctas-won", 2), 20).await.unwrap();
    store
        .claim_query("w1", 21, 100, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .finish_query(&won.query.id, "w1", &outcome, &write, 22)
            .await
            .unwrap(),
        Finished::Recorded
    );
    let created = store
        .table(&sandbox.id, "made_by_sql")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.files(&created.id).await.unwrap().len(), 1);
    assert_eq!(
        created.column_order, table.column_order,
        "{backend}: the statement's column order is kept"
    );

    // The same table again fails the transaction: the job stays RUNNING
    // (the worker then records FAILED), nothing half-written.
    let again = store
        .insert_query(&query("ctas-again", 3), 30)
        .await
        .unwrap();
    store
        .claim_query("w1", 31, 100, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .finish_query(&again.query.id, "w1", &outcome, &write, 32)
            .await
            .is_err(),
        "{backend}"
    );
    let job = store.query_job(&again.query.id).await.unwrap().unwrap();
    assert_eq!(job.state, QueryState::Running);
    assert_eq!(store.files(&created.id).await.unwrap().len(), 1);

    // A drop releases the file paths for deletion.
    let drop = store.insert_query(&query("drop", 4), 40).await.unwrap();
    let claimed = store
        .claim_query("w2", 41, 100, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        claimed.query.id, drop.query.id,
        "`again` still holds its lease"
    );
    let finished = store
        .finish_query(
            &drop.query.id,
            "w2",
            &outcome,
            &CatalogWrite::DropTables {
                tables: vec![(sandbox.id.clone(), "made_by_sql".into())],
            },
            42,
        )
        .await
        .unwrap();
    assert_eq!(finished, Finished::Recorded, "{backend}");
    assert_eq!(
        store.retired_files_due(43, 10).await.unwrap(),
        vec![file.path.clone()],
        "{backend}: a dropped table's files are retired, not forgotten"
    );
    assert!(
        store
            .table(&sandbox.id, "made_by_sql")
            .await
            .unwrap()
            .is_none()
    );
}

fn new_load(id: &str) -> lakehost::store::loads::NewLoad {
    lakehost::store::loads::NewLoad {
        id: id.into(),
        org: "demo".into(),
        zone: Some("lab".into()),
        owner_sub: "user-1".into(),
        load_type: "APPEND_ONLY".into(),
        table_name: "trips".into(),
        load_as_service_client_id: Some("12".into()),
        partitions: vec!["day".into(), "city".into()],
    }
}

async fn loads_keep_their_files_and_stale_staging_expires(backend: &'static str, store: Store) {
    use lakehost::store::loads::{LoadFile, LoadState};
    let record = store.insert_load(&new_load("l1"), 100).await.unwrap();
    assert_eq!(record.state, LoadState::Open, "{backend}");
    assert_eq!(record.load, new_load("l1"), "{backend}: round trip");
    let file = |key: &str, at: i64| LoadFile {
        load_id: "l1".into(),
        file_key: key.into(),
        object_key: format!("demo/lab/l1/{key}.parquet"),
        requested_at: at,
        uploaded_at: None,
        size_bytes: None,
    };
    store.request_load_file(&file("a", 110)).await.unwrap();
    store.request_load_file(&file("b", 120)).await.unwrap();
    assert!(store.record_upload("l1", "a", 42, 130).await.unwrap());
    assert!(
        !store.record_upload("l1", "zzz", 1, 130).await.unwrap(),
        "{backend}: a file never requested"
    );
    // The same file_key again keeps one row and its upload.
    store.request_load_file(&file("a", 140)).await.unwrap();
    let files = store.load_files("l1").await.unwrap();
    assert_eq!(files.len(), 2, "{backend}");
    assert_eq!(files[0].size_bytes, Some(42), "{backend}");
    assert_eq!(files[0].requested_at, 140, "{backend}");
    store.touch_load("l1", 150).await.unwrap();

    // Staging of loads untouched since before 200 expires once.
    let stale = store.stale_open_loads(200, 10).await.unwrap();
    assert_eq!(stale.len(), 1, "{backend}");
    assert!(store.expire_staging("l1", 200, 300).await.unwrap());
    assert!(
        !store.expire_staging("l1", 200, 300).await.unwrap(),
        "{backend}: once"
    );
    assert!(store.stale_open_loads(200, 10).await.unwrap().is_empty());
    let files = store.load_files("l1").await.unwrap();
    assert!(files.iter().all(|f| f.uploaded_at.is_none()), "{backend}");
    let record = store.load("l1").await.unwrap().unwrap();
    assert_eq!(record.staging_removed_at, Some(300), "{backend}");
    // A new upload brings it back into the sweep's reach later.
    store.touch_load("l1", 400).await.unwrap();
    assert_eq!(
        store.load("l1").await.unwrap().unwrap().staging_removed_at,
        None
    );
    assert!(store.load("nope").await.unwrap().is_none());
}

async fn load_commits_are_claimed_once_and_end_once_with_their_files(
    backend: &'static str,
    store: Store,
) {
    use lakehost::store::loads::{LoadEnd, LoadState};
    let database = store
        .ensure_standard_databases("demo", None)
        .await
        .unwrap()
        .into_iter()
        .find(|d| d.name == "demo_lake_v2")
        .unwrap();
    store.insert_load(&new_load("c1"), 100).await.unwrap();
    assert!(store.commit_load("c1", "[]", "{}", 110).await.unwrap());
    assert!(
        !store.commit_load("c1", "[]", "{}", 111).await.unwrap(),
        "{backend}: once"
    );
    let claimed = store
        .claim_load_commit("w1", 120, 1_000, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (claimed.state, claimed.attempts),
        (LoadState::Processing, 1),
        "{backend}"
    );
    assert!(
        store
            .claim_load_commit("w2", 130, 1_000, JobCaps::NONE)
            .await
            .unwrap()
            .is_none(),
        "{backend}: held"
    );
    assert!(store.renew_load_lease("c1", "w1", 2_000).await.unwrap());
    assert!(!store.renew_load_lease("c1", "w2", 2_000).await.unwrap());
    assert_eq!(claimed.running_step, None, "{backend}: a first claim");
    assert!(store.mark_load_step("c1", "w1", "insert").await.unwrap());
    assert!(!store.mark_load_step("c1", "w2", "insert").await.unwrap());
    // The lease runs out: another worker takes it over, seeing the step
    // the dead holder was in; the first cannot end it.
    let taken = store
        .claim_load_commit("w2", 2_001, 5_000, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.attempts, 2, "{backend}");
    assert_eq!(taken.running_step.as_deref(), Some("insert"), "{backend}");
    // Handed back (a drain), it is nobody's and in no step: the next
    // claim runs it again.
    assert!(!store.hand_back_load("c1", "w1").await.unwrap());
    assert!(store.hand_back_load("c1", "w2").await.unwrap());
    let taken = store
        .claim_load_commit("w2", 2_002, 5_000, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((taken.attempts, taken.running_step), (3, None), "{backend}");
    let table = LakeTable {
        id: "t1".into(),
        database_id: database.id.clone(),
        name: "trips".into(),
        schema_json: "{\"fields\":[]}".into(),
        partition_columns: vec!["service_client_id".into(), "svc$load_id".into()],
        column_order: None,
        created_at: 1,
    };
    let success = LoadEnd::Success {
        new_table: Some(table.clone()),
        table_id: "t1".into(),
        files: vec![NewDataFile {
            path: "demo_lake_v2/trips/service_client_id=1/svc$load_id=c1/c1-0.parquet".into(),
            service_client_id: Some(1),
            partition_values: BTreeMap::from([("service_client_id".into(), "1".into())]),
            row_count: 5,
            size_bytes: 100,
            load_id: Some("c1".into()),
        }],
    };
    assert_eq!(
        store
            .finish_load("c1", "w1", &success, 3_000)
            .await
            .unwrap(),
        Finished::Lost,
        "{backend}: lost"
    );
    assert!(store.table(&database.id, "trips").await.unwrap().is_none());
    assert_eq!(
        store
            .finish_load("c1", "w2", &success, 3_000)
            .await
            .unwrap(),
        Finished::Recorded
    );
    assert_eq!(
        store
            .finish_load("c1", "w2", &success, 3_001)
            .await
            .unwrap(),
        Finished::Lost,
        "{backend}: once"
    );
    let record = store.load("c1").await.unwrap().unwrap();
    assert_eq!(record.state, LoadState::Success, "{backend}");
    let created = store.table(&database.id, "trips").await.unwrap().unwrap();
    assert_eq!(
        store.files(&created.id).await.unwrap().len(),
        1,
        "{backend}"
    );

    // A failure records its report and no files.
    store.insert_load(&new_load("c2"), 100).await.unwrap();
    store.commit_load("c2", "[]", "{}", 110).await.unwrap();
    store
        .claim_load_commit("w1", 4_000, 9_000, JobCaps::NONE)
        .await
        .unwrap()
        .unwrap();
    let fail = LoadEnd::Fail {
        error_type: "CheckSumError".into(),
        error_messages_json: "[]".into(),
    };
    assert_eq!(
        store.finish_load("c2", "w1", &fail, 4_100).await.unwrap(),
        Finished::Recorded
    );
    let record = store.load("c2").await.unwrap().unwrap();
    assert_eq!(record.state, LoadState::Fail, "{backend}");
    assert_eq!(record.error_type.as_deref(), Some("CheckSumError"));
}

async fn daily_run_flags_per_org(backend: &'static str, store: Store) {
    assert_eq!(
        store.daily_run_flag("demo").await.unwrap(),
        None,
        "{backend}"
    );
    store.set_daily_run_flag("demo", true, 1).await.unwrap();
    store.set_daily_run_flag("other", false, 1).await.unwrap();
    assert_eq!(
        store.daily_run_flag("demo").await.unwrap(),
        Some(true),
        "{backend}"
    );
    store.set_daily_run_flag("demo", false, 2).await.unwrap();
    assert_eq!(
        store.daily_run_flag("demo").await.unwrap(),
        Some(false),
        "{backend}"
    );
    assert_eq!(
        store.daily_run_flag("other").await.unwrap(),
        Some(false),
        "{backend}"
    );
}

fn new_run<'a>(name: &'a str, org: &'a str, slot: Option<i64>, at: i64) -> NewDailyRun<'a> {
    NewDailyRun {
        name,
        org,
        scheduled_for: slot,
        started_at: at,
        deadline_at: at + 1_000,
        holder: "replica-1",
        lease_until: at + 100,
    }
}

async fn daily_runs_one_running_per_org_one_per_slot_ended_once(
    backend: &'static str,
    store: Store,
) {
    let StartOutcome::Started(first) = store
        .start_daily_run(&new_run("run-1", "demo", None, 1_000))
        .await
        .unwrap()
    else {
        panic!("{backend}: the first start wins");
    };
    assert_eq!(first.status, RunStatus::Running);
    assert_eq!((first.stopped_at, first.error.clone()), (None, None));
    // A second start of the same org is refused with the running one;
    // another org is not affected.
    assert_eq!(
        store
            .start_daily_run(&new_run("run-2", "demo", None, 1_001))
            .await
            .unwrap(),
        StartOutcome::AlreadyRunning(first.clone()),
        "{backend}"
    );
    assert!(matches!(
        store
            .start_daily_run(&new_run("other-1", "other", Some(500), 1_001))
            .await
            .unwrap(),
        StartOutcome::Started(_)
    ));
    // Only the holder ends it, once.
    let succeeded = RunEnd {
        status: RunStatus::Succeeded,
        error: None,
        cause: None,
    };
    assert_eq!(
        store
            .finish_daily_run("run-1", "replica-2", &succeeded, 1_050)
            .await
            .unwrap(),
        Finished::Lost
    );
    assert_eq!(
        store
            .finish_daily_run("run-1", "replica-1", &succeeded, 1_050)
            .await
            .unwrap(),
        Finished::Recorded
    );
    assert_eq!(
        store
            .finish_daily_run("run-1", "replica-1", &succeeded, 1_060)
            .await
            .unwrap(),
        Finished::Lost,
        "{backend}: ended once"
    );
    let ended = store.daily_run("run-1").await.unwrap().unwrap();
    assert_eq!(
        (ended.status, ended.stopped_at),
        (RunStatus::Succeeded, Some(1_050))
    );
    // A slot of the schedule starts one run, even after that run ended.
    assert_eq!(
        store
            .start_daily_run(&new_run("other-2", "other", Some(500), 1_100))
            .await
            .unwrap(),
        StartOutcome::AlreadyRunning(store.daily_run("other-1").await.unwrap().unwrap())
    );
    store
        .finish_daily_run("other-1", "replica-1", &succeeded, 1_150)
        .await
        .unwrap();
    assert_eq!(
        store
            .start_daily_run(&new_run("other-3", "other", Some(500), 1_200))
            .await
            .unwrap(),
        StartOutcome::Taken,
        "{backend}"
    );

    // Overdue runs end TIMED_OUT, orphaned ones ABORTED; the holder can
    // neither renew nor end them afterwards.
    let StartOutcome::Started(_) = store
        .start_daily_run(&new_run("run-3", "demo", None, 2_000))
        .await
        .unwrap()
    else {
        panic!("{backend}: demo is free again");
    };
    assert!(
        store
            .start_daily_run(&new_run("other-4", "other", None, 2_000))
            .await
            .unwrap()
            != StartOutcome::Taken
    );
    assert!(
        store
            .renew_daily_run("run-3", "replica-1", 2_500)
            .await
            .unwrap()
    );
    // At 2_200: other-4's hold (until 2_100) lapsed; run-3's (2_500) did not.
    let ended = store.end_stale_daily_runs(2_200).await.unwrap();
    assert_eq!(ended.len(), 1, "{backend}: {ended:?}");
    assert_eq!(
        (
            ended[0].name.as_str(),
            ended[0].status,
            ended[0].stopped_at,
            ended[0].error.as_deref()
        ),
        ("other-4", RunStatus::Aborted, Some(2_200), Some("Aborted"))
    );
    // At 3_000 run-3 is past its deadline (2_000 + 1_000).
    let ended = store.end_stale_daily_runs(3_000).await.unwrap();
    assert_eq!(
        ended
            .iter()
            .map(|r| (r.name.as_str(), r.status))
            .collect::<Vec<_>>(),
        [("run-3", RunStatus::TimedOut)],
        "{backend}"
    );
    assert!(
        !store
            .renew_daily_run("run-3", "replica-1", 4_000)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .finish_daily_run("run-3", "replica-1", &succeeded, 3_100)
            .await
            .unwrap(),
        Finished::Lost
    );

    // Most recent first, limited; SUCCEEDED only on request.
    let names = |runs: Vec<lakehost::store::dailyrun::DailyRun>| {
        runs.into_iter().map(|r| r.name).collect::<Vec<_>>()
    };
    assert_eq!(
        names(store.daily_runs("demo", 50, false).await.unwrap()),
        ["run-3", "run-1"]
    );
    assert_eq!(
        names(store.daily_runs("demo", 1, false).await.unwrap()),
        ["run-3"]
    );
    assert_eq!(
        names(store.daily_runs("demo", 50, true).await.unwrap()),
        ["run-1"]
    );
    assert!(
        store
            .daily_runs("nobody", 50, false)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn concurrent_daily_run_starts_have_one_winner(backend: &'static str, store: Store) {
    let starts: Vec<_> = (0..50)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let name = format!("run-{i}");
                store
                    .start_daily_run(&new_run(&name, "demo", None, 1_000 + i))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for start in starts {
        outcomes.push(start.await);
    }
    let started: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o.as_ref().unwrap() {
            StartOutcome::Started(run) => Some(run.name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 1, "{backend}: {started:?}");
    for outcome in &outcomes {
        match outcome.as_ref().unwrap() {
            StartOutcome::Started(_) => {}
            StartOutcome::AlreadyRunning(running) => assert_eq!(running.name, started[0]),
            StartOutcome::Taken => panic!("{backend}: no start may be lost as Taken"),
        }
    }
}

async fn a_refresh_swaps_the_table_only_while_its_run_holds(backend: &'static str, store: Store) {
    let databases = store.ensure_standard_databases("demo", None).await.unwrap();
    let insights = databases
        .iter()
        .find(|d| d.kind == DatabaseKind::Insights)
        .unwrap();
    let table = |id: &str| LakeTable {
        id: id.into(),
        database_id: insights.id.clone(),
        name: "daily".into(),
        schema_json: "{}".into(),
        partition_columns: vec!["service_client_id".into()],
        column_order: None,
        created_at: 1,
    };
    let file = |path: &str| NewDataFile {
        path: path.into(),
        service_client_id: Some(1),
        partition_values: BTreeMap::new(),
        row_count: 1,
        size_bytes: 10,
        load_id: None,
    };
    let StartOutcome::Started(_) = store
        .start_daily_run(&new_run("run-1", "demo", None, 1_000))
        .await
        .unwrap()
    else {
        panic!("{backend}");
    };
    let replaced = store
        .replace_table_for_run("run-1", "replica-1", &table("t1"), &[file("a")], 1_010)
        .await
        .unwrap();
    assert!(replaced, "{backend}: a new table");
    let replaced = store
        .replace_table_for_run("run-1", "replica-1", &table("t2"), &[file("b")], 1_020)
        .await
        .unwrap();
    assert!(replaced, "{backend}");
    assert_eq!(
        store.retired_files_due(i64::MAX, 10).await.unwrap(),
        vec!["a".to_string()],
        "{backend}: the replaced table's file is retired"
    );
    // Another holder, or past the deadline: nothing changes.
    for (owner, now) in [("replica-2", 1_030), ("replica-1", 2_000)] {
        let refused = store
            .replace_table_for_run("run-1", owner, &table("t3"), &[file("c")], now)
            .await
            .unwrap();
        assert!(!refused, "{backend}: {owner} at {now}");
    }
    let current = store.table(&insights.id, "daily").await.unwrap().unwrap();
    assert_eq!(current.id, "t2");
    let paths: Vec<String> = store
        .files("t2")
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.file.path)
        .collect();
    assert_eq!(paths, ["b"], "{backend}");
    assert!(store.files("t1").await.unwrap().is_empty());
}
