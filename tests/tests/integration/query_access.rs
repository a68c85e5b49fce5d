//! Access to lake rows, decided in the table provider's scan after partition
//! pruning: a read that would touch a service client the caller may not read
//! fails whole (no filter, OR, JOIN, UNION, CTE, count(*), EXPLAIN), and the
//! same read narrowed by the caller's filter returns rows. Parquet written with
//! the parquet crate, committed through the catalog.

use std::{collections::BTreeMap, sync::Arc};

use datafusion::{
    arrow::{
        array::{Array, Float64Array, Int64Array, RecordBatch},
        datatypes::{DataType, Field, Schema},
    },
    prelude::SessionContext,
};
use lakehost::{
    auth::{Access, DatabaseKind},
    engine::{
        AccessDenied, EngineError,
        layout::StringColumns,
        plan_sql,
        session::{SessionScope, session_for},
    },
    lake::{self, Lake},
    store::{Store, catalog::NewDataFile},
};
use object_store::ObjectStoreExt as _;

struct Fixture {
    store: Store,
    lake: Lake,
    _dir: tempfile::TempDir,
}

/// `demo_lake_v2.trips`: two rows for each of service clients 1, 2 and 901;
/// `demo_insights.summary`: one row for each of 1 and 901.
async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(&dir.path().join("lakehost.db"))
        .await
        .unwrap();
    let lake = Lake::local(dir.path()).unwrap();
    let databases = store.ensure_standard_databases("demo", None).await.unwrap();
    let db = |kind| databases.iter().find(|d| d.kind == kind).unwrap().clone();
    let file_schema = Arc::new(Schema::new(vec![
        Field::new("trip_id", DataType::Int64, false),
        Field::new("fare", DataType::Float64, true),
    ]));
    let partitions = vec!["service_client_id".to_string(), "svc$load_id".to_string()];
    for (database, table, clients) in [
        (db(DatabaseKind::Lake), "trips", vec![1i64, 2, 901]),
        (db(DatabaseKind::Insights), "summary", vec![1, 901]),
    ] {
        let created = store
            .create_table(
                &database.id,
                table,
                &lake::schema_to_json(&file_schema),
                &partitions,
                1,
            )
            .await
            .unwrap();
        let mut files = Vec::new();
        for client in clients {
            let rows = if table == "trips" { 2 } else { 1 };
            let batch = RecordBatch::try_new(
                file_schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(
                        (0..rows).map(|i| client * 100 + i),
                    )),
                    Arc::new(Float64Array::from_iter_values(
                        (0..rows).map(|i| 1.5 * i as f64),
                    )),
                ],
            )
            .unwrap();
            let path = lake::data_file_path(&database.name, table, client, "load1", "part-0");
            let bytes = lakehost_tests::parquet_bytes(&batch);
            let size = bytes.len();
            lake.object_store()
                .put(&object_store::path::Path::from(path.as_str()), bytes.into())
                .await
                .unwrap();
            files.push(NewDataFile {
                path,
                service_client_id: Some(client),
                partition_values: BTreeMap::from([
                    ("service_client_id".into(), client.to_string()),
                    ("svc$load_id".into(), "load1".into()),
                ]),
                row_count: rows,
                size_bytes: size as i64,
                load_id: Some("load1".into()),
            });
        }
        store.commit_files(&created.id, &files, 2).await.unwrap();
    }
    Fixture {
        store,
        lake,
        _dir: dir,
    }
}

async fn session(f: &Fixture, role: &str, clients: &[u32]) -> SessionContext {
    let access = Access::new([role], clients.iter().copied());
    session_for(
        &f.store,
        &f.lake,
        &SessionScope {
            read_cache: None,
            org: "demo",
            zone: None,
            access: &access,
            default_database: "demo_lake_v2",
            memory_limit: None,
            metadata_cache: None,
            strings: StringColumns::Views,
            cluster: None,
            target_partitions: 0,
        },
    )
    .await
    .unwrap()
}

/// Runs SQL to the end; the first column of the first row as i64, or the refusal.
async fn run(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>, AccessDenied> {
    let outcome = async {
        let plan = plan_sql(ctx, sql).await?;
        datafusion::physical_plan::collect(plan, ctx.task_ctx())
            .await
            .map_err(EngineError::run)
    }
    .await;
    match outcome {
        Ok(batches) => Ok(batches),
        Err(EngineError::Refused(denied)) => Err(denied),
        Err(e) => panic!("{sql}: unexpected error {e}"),
    }
}

async fn count(ctx: &SessionContext, sql: &str) -> i64 {
    let batches = run(ctx, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let column = batches[0].column(0);
    column
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0)
}

fn is_service_client_refusal(result: Result<Vec<RecordBatch>, AccessDenied>, client: i64) -> bool {
    matches!(result, Err(AccessDenied::ServiceClient { service_client, .. }) if service_client == client)
}

#[tokio::test]
async fn own_client_analyst_must_filter_to_own_clients() {
    let f = fixture().await;
    let ctx = session(&f, "OwnServiceClientAnalyst", &[1]).await;
    for sql in [
        "SELECT count(*) FROM trips",
        "SELECT * FROM trips",
        "SELECT count(*) FROM trips WHERE service_client_id = 1 OR service_client_id = 2",
        "SELECT count(*) FROM trips WHERE service_client_id = 1 OR fare > 0",
        "SELECT count(*) FROM trips a JOIN trips b ON a.trip_id = b.trip_id WHERE a.service_client_id = 1",
        "SELECT trip_id FROM trips WHERE service_client_id = 1 UNION ALL SELECT trip_id FROM trips",
        "WITH t AS (SELECT * FROM trips) SELECT count(*) FROM t",
        "SELECT count(*) FROM demo_lake_v2.trips WHERE service_client_id <> 1",
        "EXPLAIN SELECT count(*) FROM trips",
        "SELECT count(*) FROM (SELECT * FROM trips) WHERE trip_id > 0",
        // The way tools write a list: every value must be the caller's.
        "SELECT count(*) FROM trips WHERE service_client_id = ANY(ARRAY[1, 2])",
        "SELECT count(*) FROM trips WHERE service_client_id = ANY([1, 2])",
        "SELECT count(*) FROM trips WHERE service_client_id <> ALL(ARRAY[1])",
        "SELECT count(*) FROM trips WHERE array_has(ARRAY[1, 2], service_client_id)",
    ] {
        assert!(
            is_service_client_refusal(run(&ctx, sql).await, 2),
            "{sql} must be refused"
        );
    }
    // The same reads with the caller's filter (from security_metadata).
    assert_eq!(
        count(
            &ctx,
            "SELECT count(*) FROM trips WHERE service_client_id IN (1, 901)"
        )
        .await,
        4
    );
    assert_eq!(
        count(
            &ctx,
            "SELECT count(*) FROM trips WHERE service_client_id = 1"
        )
        .await,
        2
    );
    // The same list as tools write it (SQLAlchemy, psycopg's `= ANY(%s)`).
    for sql in [
        "SELECT count(*) FROM trips WHERE service_client_id = ANY(ARRAY[1, 901])",
        "SELECT count(*) FROM trips WHERE service_client_id = ANY([1, 901])",
        "SELECT count(*) FROM trips WHERE array_has(ARRAY[901, 1], service_client_id)",
    ] {
        assert_eq!(count(&ctx, sql).await, 4, "{sql}");
    }
    assert_eq!(
        count(&ctx, "WITH t AS (SELECT * FROM trips WHERE service_client_id IN (1, 901)) SELECT count(*) FROM t").await,
        4
    );
    assert_eq!(
        count(
            &ctx,
            "SELECT count(*) FROM trips a JOIN trips b ON a.trip_id = b.trip_id \
             WHERE a.service_client_id = 1 AND b.service_client_id = 1"
        )
        .await,
        2
    );
    // Partition columns are visible, svc$load_id included.
    let batches = run(
        &ctx,
        r#"SELECT DISTINCT "svc$load_id" FROM trips WHERE service_client_id = 1"#,
    )
    .await
    .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
}

#[tokio::test]
async fn all_client_analyst_reads_everything() {
    let f = fixture().await;
    let ctx = session(&f, "AllServiceClientAnalyst", &[5]).await;
    assert_eq!(count(&ctx, "SELECT count(*) FROM trips").await, 6);
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM demo_insights.summary").await,
        2
    );
    let ctx = session(&f, "OwnServiceClientAnalyst", &[0]).await;
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM trips").await,
        6,
        "claim 0 reads all"
    );
}

#[tokio::test]
async fn public_consumer_reads_public_insights_only() {
    let f = fixture().await;
    let ctx = session(&f, "PublicConsumer", &[1]).await;
    assert!(matches!(
        run(
            &ctx,
            "SELECT count(*) FROM trips WHERE service_client_id = 901"
        )
        .await,
        Err(AccessDenied::Database { .. })
    ));
    assert_eq!(
        count(
            &ctx,
            "SELECT count(*) FROM demo_insights.summary WHERE service_client_id = 901"
        )
        .await,
        1
    );
    assert!(is_service_client_refusal(
        run(&ctx, "SELECT count(*) FROM demo_insights.summary").await,
        1
    ));
    let consumer = session(&f, "OwnServiceClientConsumer", &[1]).await;
    assert_eq!(
        count(&consumer, "SELECT count(*) FROM demo_insights.summary").await,
        2
    );
}

#[tokio::test]
async fn a_refusal_never_depends_on_other_clients_data() {
    let f = fixture().await;
    let ctx = session(&f, "OwnServiceClientAnalyst", &[1]).await;
    // Guessing client 2's partition values: a right guess and a wrong one
    // get the same refusal.
    for guess in ["load%", "zzz%"] {
        let sql = format!(
            r#"SELECT count(*) FROM trips WHERE service_client_id = 1 OR (service_client_id = 2 AND "svc$load_id" LIKE '{guess}')"#
        );
        assert!(
            is_service_client_refusal(run(&ctx, &sql).await, 2),
            "{sql} must be refused"
        );
    }
    // Naming a client the caller may not read is refused whether or not it
    // has rows (2 has, 7 has none), and so is a range reaching past theirs.
    for (sql, client) in [
        ("SELECT count(*) FROM trips WHERE service_client_id = 2", 2),
        ("SELECT count(*) FROM trips WHERE service_client_id = 7", 7),
        (
            "SELECT count(*) FROM trips WHERE service_client_id IN (1, 7)",
            7,
        ),
        (
            "SELECT count(*) FROM trips WHERE service_client_id >= 1 AND service_client_id < 5",
            2,
        ),
        (
            "SELECT count(*) FROM trips WHERE service_client_id > 1000",
            1001,
        ),
    ] {
        assert!(
            is_service_client_refusal(run(&ctx, sql).await, client),
            "{sql} must be refused for client {client}"
        );
    }
    // A filter on the caller's own clients, and other partition columns on
    // top of it, still read.
    assert_eq!(
        count(
            &ctx,
            r#"SELECT count(*) FROM trips WHERE service_client_id = 1 AND "svc$load_id" LIKE 'zzz%'"#
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &ctx,
            "SELECT count(*) FROM trips WHERE service_client_id BETWEEN 1 AND 1"
        )
        .await,
        2
    );
}
