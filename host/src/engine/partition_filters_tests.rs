//! Which filters the folders decide exactly, and that a scan leaving them out
//! of the plan returns the same rows: two real files in a memory store,
//! through `LakeTableProvider`.

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{ArrayRef, Int64Array, RecordBatch},
        datatypes::{Field, Schema},
        util::pretty::pretty_format_batches,
    },
    functions::math::expr_fn::random,
    physical_plan::displayable,
    prelude::{SessionContext, cast, col, lit},
};

use super::*;
use crate::engine::test_tables::session_on_files;

const PARTITIONS: &[&str] = &["service_client_id", "svc$load_id"];

#[test]
fn a_filter_on_folder_columns_alone_is_decided_by_the_folders() {
    let client = || col("service_client_id");
    for decided in [
        client().eq(lit(3)),
        client().in_list(vec![lit(1), lit(2)], false),
        (client() + lit(1)).eq(lit(3)),
        cast(client(), DataType::Utf8).eq(lit("3")),
        client().eq(lit(1)).or(col("svc$load_id").eq(lit("l"))),
        client().is_null(),
    ] {
        assert!(decided_by_folders(&decided, PARTITIONS), "{decided}");
    }
    for not_decided in [
        col("k").eq(lit(1)),
        client().eq(lit(1)).or(col("k").eq(lit(2))),
        client().lt(random()),
        lit(true),
    ] {
        assert!(
            !decided_by_folders(&not_decided, PARTITIONS),
            "{not_decided}"
        );
    }
}

/// Table `t` (k, n; partitioned by service_client_id): client 1's file holds
/// k 0..100, client 2's k 100..250; n is k * 10.
async fn two_clients() -> SessionContext {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("n", DataType::Int64, false),
    ]));
    let files = [(1i64, 0..100i64), (2, 100..250)]
        .into_iter()
        .map(|(client, keys)| {
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values(keys.clone())),
                Arc::new(Int64Array::from_iter_values(keys.map(|k| k * 10))),
            ];
            (
                client,
                RecordBatch::try_new(schema.clone(), columns).unwrap(),
            )
        })
        .collect();
    session_on_files(schema, files, None).await
}

/// A filter the folders decide leaves the plan (no `FilterExec` tests it,
/// and the scan reads no folder column it was the only reader of); any
/// other keeps its `FilterExec`. Either way the rows are the expected ones.
#[tokio::test]
async fn a_filter_the_folders_decide_leaves_the_plan_and_the_rows_stay_the_same() {
    let context = two_clients().await;
    for (sql, filter_left, expected) in [
        (
            "SELECT sum(n) AS s, count(*) AS c FROM t WHERE service_client_id = 2",
            false,
            // k 100..250, times 10.
            vec![
                "+--------+-----+",
                "| s      | c   |",
                "+--------+-----+",
                "| 261750 | 150 |",
                "+--------+-----+",
            ],
        ),
        (
            "SELECT count(*) AS c FROM t WHERE service_client_id IN (1, 3)",
            false,
            vec!["+-----+", "| c   |", "+-----+", "| 100 |", "+-----+"],
        ),
        (
            "SELECT k, service_client_id FROM t WHERE service_client_id = 2 AND k < 102 ORDER BY k",
            true,
            vec![
                "+-----+-------------------+",
                "| k   | service_client_id |",
                "+-----+-------------------+",
                "| 100 | 2                 |",
                "| 101 | 2                 |",
                "+-----+-------------------+",
            ],
        ),
        (
            "SELECT k FROM t WHERE service_client_id = 1 OR k = 200 ORDER BY k DESC LIMIT 2",
            true,
            vec![
                "+-----+", "| k   |", "+-----+", "| 200 |", "| 99  |", "+-----+",
            ],
        ),
    ] {
        let frame = context.sql(sql).await.unwrap();
        let plan = frame.clone().create_physical_plan().await.unwrap();
        let shown = displayable(plan.as_ref()).indent(true).to_string();
        assert_eq!(shown.contains("FilterExec"), filter_left, "{sql}:\n{shown}");
        if sql.starts_with("SELECT count(*)") {
            assert!(
                !shown.contains("DataSourceExec"),
                "{sql}: counted from the catalog's row counts, no file read:\n{shown}"
            );
        }
        if !filter_left {
            assert!(
                !shown.contains("projection=[n, service_client_id]")
                    && !shown.contains("projection=[service_client_id]"),
                "{sql}: the folder column is not read:\n{shown}"
            );
        }
        let rows = pretty_format_batches(&frame.collect().await.unwrap())
            .unwrap()
            .to_string();
        assert_eq!(rows.lines().collect::<Vec<_>>(), expected, "{sql}");
    }
}
