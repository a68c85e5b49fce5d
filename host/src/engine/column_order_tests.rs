//! A table made by SQL with `service_client_id` in the middle: queries see
//! the statement's column order while the files keep the client in their
//! folders, pruning and the access decision unchanged; a table with no
//! recorded order keeps file columns then partition columns. Real files
//! written by `TableWriter` on an in-memory store, read through
//! `LakeTableProvider`.

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{Int64Array, RecordBatch, StringArray},
        datatypes::{DataType, Field, Schema},
        util::display::{ArrayFormatter, FormatOptions},
    },
    execution::object_store::ObjectStoreUrl,
    physical_plan::{collect, displayable},
    prelude::SessionContext,
};
use object_store::memory::InMemory;

use crate::{
    auth::ServiceClientScope,
    engine::{
        AccessDenied, EngineError,
        layout::{StringColumns, TableLayout},
        plan_sql,
        provider::LakeTableProvider,
    },
    store::catalog::DataFile,
};

/// The statement's columns: `trip_id, service_client_id, city`.
fn statement_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("trip_id", DataType::Int64, false),
        Field::new("service_client_id", DataType::Int64, false),
        Field::new("city", DataType::Utf8, true),
    ]))
}

/// Table `t` made as `CREATE TABLE t AS SELECT trip_id, service_client_id,
/// city ...` (rows 100, 101 of client 1 and 200 of client 2), its order
/// recorded unless `recorded` is false (a table made before it was), read
/// with `scope`.
async fn session(recorded: bool, scope: ServiceClientScope) -> SessionContext {
    let rows = RecordBatch::try_new(
        statement_schema(),
        vec![
            Arc::new(Int64Array::from(vec![100, 200, 101])),
            Arc::new(Int64Array::from(vec![1, 2, 1])),
            Arc::new(StringArray::from(vec!["oslo", "rome", "lima"])),
        ],
    )
    .unwrap();
    let layout = TableLayout::for_rows(&statement_schema()).unwrap();
    let store = Arc::new(InMemory::new());
    let mut writer = layout.writer(store.clone(), ("lake", "t"), "q1", ServiceClientScope::All);
    writer.write(&rows).await.unwrap();
    let mut table = layout.catalog_entry("d1", "t", 0);
    if !recorded {
        table.column_order = None;
    }
    let files: Vec<DataFile> = (writer.finish().await.unwrap().into_iter().enumerate())
        .map(|(i, file)| DataFile {
            id: format!("f{i}"),
            table_id: table.id.clone(),
            file,
            committed_at: 0,
        })
        .collect();
    let url = ObjectStoreUrl::parse("memory://").unwrap();
    let provider = LakeTableProvider::new(
        "lake",
        table,
        layout.file_schema.clone(),
        StringColumns::Views,
        files,
        scope,
        url.clone(),
    );
    let context = SessionContext::new();
    context.register_object_store(url.as_ref(), store);
    context.register_table("t", Arc::new(provider)).unwrap();
    context
}

/// A read's column names and its rows as text, in the order they came.
async fn read(context: &SessionContext, sql: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let plan = plan_sql(context, sql).await.unwrap();
    let names = (plan.schema().fields().iter())
        .map(|f| f.name().clone())
        .collect();
    let mut rows = Vec::new();
    for batch in collect(plan, context.task_ctx()).await.unwrap() {
        let options = FormatOptions::default();
        let columns: Vec<ArrayFormatter> = (batch.columns().iter())
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            rows.push(columns.iter().map(|c| c.value(row).to_string()).collect());
        }
    }
    (names, rows)
}

fn text(rows: &[&[&str]]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|row| row.iter().map(|c| c.to_string()).collect())
        .collect()
}

#[tokio::test]
async fn select_star_lists_the_statements_order() {
    let context = session(true, ServiceClientScope::All).await;
    let (names, rows) = read(&context, "SELECT * FROM t ORDER BY trip_id").await;
    assert_eq!(names, ["trip_id", "service_client_id", "city"]);
    assert_eq!(
        rows,
        text(&[
            &["100", "1", "oslo"],
            &["101", "1", "lima"],
            &["200", "2", "rome"],
        ])
    );
    let table = context.table_provider("t").await.unwrap();
    let schema: Vec<String> = (table.schema().fields().iter())
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(schema, ["trip_id", "service_client_id", "city"]);
}

#[tokio::test]
async fn a_projection_reads_the_columns_it_names_in_its_order() {
    let context = session(true, ServiceClientScope::All).await;
    for (sql, names, expected) in [
        (
            "SELECT city, trip_id FROM t ORDER BY trip_id",
            ["city", "trip_id"],
            text(&[&["oslo", "100"], &["lima", "101"], &["rome", "200"]]),
        ),
        (
            "SELECT service_client_id, city FROM t ORDER BY city",
            ["service_client_id", "city"],
            text(&[&["1", "lima"], &["1", "oslo"], &["2", "rome"]]),
        ),
        (
            "SELECT city, service_client_id FROM t WHERE trip_id > 100 ORDER BY city",
            ["city", "service_client_id"],
            text(&[&["lima", "1"], &["rome", "2"]]),
        ),
    ] {
        let (got_names, rows) = read(&context, sql).await;
        assert_eq!(got_names, names, "{sql}");
        assert_eq!(rows, expected, "{sql}");
    }
    let (_, counted) = read(&context, "SELECT count(*) FROM t").await;
    assert_eq!(counted, text(&[&["3"]]));
}

#[tokio::test]
async fn a_filter_on_the_client_still_prunes_files_and_refuses_other_clients() {
    let context = session(true, ServiceClientScope::All).await;
    let sql = "SELECT * FROM t WHERE service_client_id = 2";
    let plan = plan_sql(&context, sql).await.unwrap();
    let shown = displayable(plan.as_ref()).indent(true).to_string();
    assert!(shown.contains("service_client_id=2/"), "{shown}");
    assert!(!shown.contains("service_client_id=1/"), "pruned: {shown}");
    let (names, rows) = read(&context, sql).await;
    assert_eq!(names, ["trip_id", "service_client_id", "city"]);
    assert_eq!(rows, text(&[&["200", "2", "rome"]]));

    // An own-client analyst of client 1: their rows with their filter, the
    // whole read refused when it would reach client 2's file.
    let own = ServiceClientScope::Only([1].into_iter().collect());
    let context = session(true, own).await;
    let (names, rows) = read(
        &context,
        "SELECT * FROM t WHERE service_client_id = 1 ORDER BY trip_id",
    )
    .await;
    assert_eq!(names, ["trip_id", "service_client_id", "city"]);
    assert_eq!(rows, text(&[&["100", "1", "oslo"], &["101", "1", "lima"]]));
    for sql in ["SELECT * FROM t", "SELECT city, trip_id FROM t"] {
        match plan_sql(&context, sql).await {
            Err(EngineError::Refused(AccessDenied::ServiceClient { service_client, .. })) => {
                assert_eq!(service_client, 2, "{sql}")
            }
            other => panic!("{sql}: not refused: {:?}", other.map(|_| ())),
        }
    }
}

#[tokio::test]
async fn a_table_with_no_recorded_order_keeps_partition_columns_last() {
    let context = session(false, ServiceClientScope::All).await;
    let (names, rows) = read(&context, "SELECT * FROM t ORDER BY trip_id").await;
    assert_eq!(names, ["trip_id", "city", "service_client_id"]);
    assert_eq!(
        rows,
        text(&[
            &["100", "oslo", "1"],
            &["101", "lima", "1"],
            &["200", "rome", "2"],
        ])
    );
}
