//! The access decision of `LakeTableProvider::scan()`, without a server or a
//! store: a table of catalogued files (never opened: the decision is made
//! before any file is read) planned in a bare session.

use std::{collections::BTreeMap, sync::Arc};

use datafusion::{
    arrow::datatypes::{DataType, Field, Schema},
    catalog::TableProvider as _,
    execution::object_store::ObjectStoreUrl,
    prelude::SessionContext,
};

use super::{AccessDenied, EngineError, LakeTableProvider, layout::StringColumns, plan_sql};
use crate::{
    auth::ServiceClientScope,
    store::catalog::{DataFile, LakeTable, NewDataFile},
};

/// Table `t` (trip_id, region, service_client_id) with one file per
/// (client, region) pair, read with `scope`.
fn session(files: &[(i64, &str)], scope: ServiceClientScope) -> SessionContext {
    let table = LakeTable {
        id: "t1".into(),
        database_id: "d1".into(),
        name: "t".into(),
        schema_json: String::new(),
        partition_columns: vec!["service_client_id".into(), "region".into()],
        column_order: None,
        created_at: 0,
    };
    let files: Vec<DataFile> = files
        .iter()
        .enumerate()
        .map(|(i, (client, region))| DataFile {
            id: format!("f{i}"),
            table_id: "t1".into(),
            file: NewDataFile {
                path: format!("d/t/service_client_id={client}/region={region}/{i}.parquet"),
                service_client_id: Some(*client),
                partition_values: BTreeMap::from([
                    ("service_client_id".into(), client.to_string()),
                    ("region".into(), region.to_string()),
                ]),
                row_count: 10,
                size_bytes: 100,
                load_id: None,
            },
            committed_at: 0,
        })
        .collect();
    let file_schema = Arc::new(Schema::new(vec![Field::new(
        "trip_id",
        DataType::Int64,
        false,
    )]));
    let provider = LakeTableProvider::new(
        "lake",
        table,
        file_schema,
        StringColumns::Views,
        files,
        scope,
        ObjectStoreUrl::local_filesystem(),
    );
    let context = SessionContext::new();
    context.register_table("t", Arc::new(provider)).unwrap();
    context
}

fn only(clients: &[u32]) -> ServiceClientScope {
    ServiceClientScope::Only(clients.iter().copied().collect())
}

/// `None` when the read plans, else the refusal.
async fn refusal(context: &SessionContext, sql: &str) -> Option<AccessDenied> {
    match plan_sql(context, sql).await {
        Ok(_) => None,
        Err(EngineError::Refused(denied)) => Some(denied),
        Err(other) => panic!("{sql}: not a refusal: {other}"),
    }
}

fn refused_client(denied: Option<AccessDenied>) -> Option<i64> {
    match denied {
        Some(AccessDenied::ServiceClient { service_client, .. }) => Some(service_client),
        Some(other) => panic!("another refusal: {other}"),
        None => None,
    }
}

const FILES: &[(i64, &str)] = &[(1, "a"), (2, "a"), (2, "b")];

#[tokio::test]
async fn roles_that_cannot_read_the_database_are_refused_whatever_the_filter() {
    let context = session(FILES, ServiceClientScope::Nothing);
    for sql in [
        "SELECT * FROM t",
        "SELECT count(*) FROM t WHERE service_client_id = 1",
        "EXPLAIN SELECT * FROM t",
    ] {
        assert!(
            matches!(
                refusal(&context, sql).await,
                Some(AccessDenied::Database { .. })
            ),
            "{sql}"
        );
    }
}

#[tokio::test]
async fn a_read_that_keeps_another_clients_file_is_refused_whole() {
    let context = session(FILES, only(&[1]));
    for sql in [
        "SELECT * FROM t",
        "SELECT count(*) FROM t",
        "SELECT * FROM t WHERE service_client_id IN (1, 2)",
        "SELECT * FROM t WHERE service_client_id > 0 LIMIT 1",
        "EXPLAIN SELECT * FROM t",
        "SELECT * FROM t WHERE region = 'a'",
    ] {
        assert_eq!(
            refused_client(refusal(&context, sql).await),
            Some(2),
            "{sql}"
        );
    }
}

#[tokio::test]
async fn the_callers_own_filter_narrows_the_read_to_what_it_may_read() {
    let context = session(FILES, only(&[1]));
    for sql in [
        "SELECT * FROM t WHERE service_client_id = 1",
        "SELECT count(*) FROM t WHERE service_client_id = 1 AND region = 'z'",
        "EXPLAIN SELECT * FROM t WHERE service_client_id = 1",
    ] {
        assert_eq!(refused_client(refusal(&context, sql).await), None, "{sql}");
    }
    let everything = session(FILES, ServiceClientScope::All);
    assert!(
        refusal(&everything, "SELECT count(*) FROM t")
            .await
            .is_none()
    );
}

#[tokio::test]
async fn a_refusal_never_depends_on_other_clients_partition_values() {
    // Client 2 has region a and b: a probe of its regions is refused the
    // same whether the region it names exists or not.
    let context = session(FILES, only(&[1]));
    for region in ["a", "b", "nowhere"] {
        let sql = format!(
            "SELECT * FROM t WHERE service_client_id = 1 \
             OR (service_client_id = 2 AND region = '{region}')"
        );
        assert_eq!(
            refused_client(refusal(&context, &sql).await),
            Some(2),
            "{sql}"
        );
    }
}

#[tokio::test]
async fn naming_a_client_without_rows_is_refused_like_one_with_rows() {
    let context = session(FILES, only(&[1]));
    assert_eq!(
        refused_client(refusal(&context, "SELECT * FROM t WHERE service_client_id = 7").await),
        Some(7)
    );
    // No files and no client named: nothing to refuse.
    let empty = session(&[], only(&[1]));
    assert!(refusal(&empty, "SELECT * FROM t").await.is_none());
}

/// The type a `name` column (plain text in the files) has in a provider
/// reading strings as `strings`, and in the plan of `SELECT name`.
async fn name_types(strings: StringColumns) -> (DataType, DataType) {
    let file_schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, true)]));
    let provider = LakeTableProvider::new(
        "lake",
        super::test_tables::table_t(),
        file_schema,
        strings,
        Vec::new(),
        ServiceClientScope::All,
        ObjectStoreUrl::local_filesystem(),
    );
    let in_table = provider.schema().field(0).data_type().clone();
    let context = SessionContext::new();
    context.register_table("t", Arc::new(provider)).unwrap();
    let plan = plan_sql(&context, "SELECT name FROM t").await.unwrap();
    (in_table, plan.schema().field(0).data_type().clone())
}

#[tokio::test]
async fn strings_are_read_as_views_or_plain_as_the_statement_asks() {
    assert_eq!(
        name_types(StringColumns::Views).await,
        (DataType::Utf8View, DataType::Utf8View)
    );
    assert_eq!(
        name_types(StringColumns::Plain).await,
        (DataType::Utf8, DataType::Utf8)
    );
}
