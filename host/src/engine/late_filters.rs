//! Which scans filter rows while they decode (DataFusion's parquet
//! `pushdown_filters`, per scan): a scan that looks a few rows up and
//! returns many columns decodes the filter's columns first and then, of
//! the other columns, only the pages that hold a row that passed, instead
//! of decoding every column of every page the statistics kept and
//! filtering afterwards.
//!
//! It is not on for every scan, as DataFusion does not turn it on by
//! default: an aggregation's scan mostly returns the columns it filters on
//! and keeps a large share of the rows, and there decoding in two passes
//! costs more than it saves. Measured with DataFusion-python 55 on the
//! benchmark's lake files (TPC-H scale 1, the session switch on against
//! off): `SELECT *` looking up a key 0.24-0.47x the time, one looking for
//! one of seven ship modes 0.76x, one naming a supplier 0.17x; but Q1 1.25x,
//! Q3 1.85x, Q6 2.21x and Q12 1.95x (bench/README.md).
//!
//! So a scan filters while it decodes when one of its filters picks rows by
//! value (a column equal to a literal, or in a short list of literals: a
//! lookup, not a range) and it returns at least [`OTHER_COLUMNS`] columns
//! the filters do not read. Filters on partition columns do not count:
//! they choose files, not rows. The rows are the same either way (the scan
//! applies the filter exactly, where the plan's filter would have).
//!
//! A scan under an `ORDER BY ... LIMIT` is decided later, once the plan
//! shows the TopK and its threshold (`topk_scan.rs`), by the same count of
//! other columns.

use std::collections::HashSet;

use datafusion::{
    arrow::datatypes::Schema,
    logical_expr::{BinaryExpr, Expr, Operator, expr::InList, utils::split_conjunction},
};

/// Columns a scan must return beyond its filters' for decoding them late
/// to pay: the queries that lost had at most one (Q12 returns
/// `l_orderkey` beside its filters' columns, Q3's customer scan
/// `c_custkey`); the benchmark's point lookup, which gained, two.
pub const OTHER_COLUMNS: usize = 2;

/// Literals an `IN` list may hold and still be a lookup.
const LOOKUP_LIST: usize = 32;

/// Whether a scan of `returned` columns, with `filters` pushed to it,
/// should filter its rows while decoding; `partition_columns` name the
/// columns the table's folders hold.
pub fn filter_while_decoding(
    filters: &[Expr],
    returned: &Schema,
    partition_columns: &[&str],
) -> bool {
    let mut read_by_filters: HashSet<String> = HashSet::new();
    let mut lookup = false;
    for conjunct in filters.iter().flat_map(|f| split_conjunction(f)) {
        let columns = conjunct.column_refs();
        if columns
            .iter()
            .all(|c| partition_columns.contains(&c.name.as_str()))
        {
            continue;
        }
        read_by_filters.extend(columns.into_iter().map(|c| c.name.clone()));
        lookup |= is_lookup(conjunct);
    }
    if !lookup {
        return false;
    }
    let others = returned
        .fields()
        .iter()
        .map(|f| f.name())
        .filter(|name| {
            !read_by_filters.contains(name.as_str()) && !partition_columns.contains(&name.as_str())
        })
        .count();
    others >= OTHER_COLUMNS
}

/// A column (perhaps cast) equal to a literal, or in a short list of them
/// (which DataFusion may have rewritten into `=` tests joined by `OR`).
fn is_lookup(expr: &Expr) -> bool {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => is_lookup(left) && is_lookup(right),
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => {
            (is_column(left) && matches!(**right, Expr::Literal(..)))
                || (is_column(right) && matches!(**left, Expr::Literal(..)))
        }
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) => {
            is_column(expr)
                && list.len() <= LOOKUP_LIST
                && list.iter().all(|e| matches!(e, Expr::Literal(..)))
        }
        _ => false,
    }
}

fn is_column(expr: &Expr) -> bool {
    match expr {
        Expr::Column(_) => true,
        Expr::Cast(cast) => is_column(&cast.expr),
        Expr::TryCast(cast) => is_column(&cast.expr),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use datafusion::{
        arrow::datatypes::{DataType, Field},
        prelude::{cast, col, lit},
    };

    /// Columns a..f and the partition column `service_client_id`.
    fn wide(returned: &[&str]) -> Schema {
        Schema::new(
            returned
                .iter()
                .map(|n| Field::new(*n, DataType::Int64, true))
                .collect::<Vec<_>>(),
        )
    }

    const PARTITIONS: &[&str] = &["service_client_id"];
    const ALL: &[&str] = &["a", "b", "c", "d", "e", "f", "service_client_id"];

    #[test]
    fn a_lookup_returning_many_other_columns_filters_while_decoding() {
        let all = wide(ALL);
        for filter in [
            col("a").eq(lit(4196)),
            lit(4196).eq(col("a")),
            cast(col("a"), DataType::Utf8).eq(lit("x")),
            col("a").in_list(vec![lit(1), lit(2), lit(3)], false),
            col("a").eq(lit(1)).or(col("a").eq(lit(2))),
        ] {
            assert!(
                filter_while_decoding(std::slice::from_ref(&filter), &all, PARTITIONS),
                "{filter}"
            );
        }
        // One lookup among other filters is enough.
        let filters = [col("a").eq(lit(1)).and(col("b").gt(lit(3)))];
        assert!(filter_while_decoding(&filters, &all, PARTITIONS));
    }

    #[test]
    fn ranges_and_other_tests_do_not() {
        let all = wide(ALL);
        for filter in [
            col("a").gt(lit(4196)),
            col("a").between(lit(1), lit(9)),
            col("a").not_eq(lit(1)),
            col("a").in_list(vec![lit(1), lit(2)], true),
            col("a").in_list((0..=LOOKUP_LIST as i64).map(lit).collect(), false),
            col("a").eq(col("b")),
            (col("a") + lit(1)).eq(lit(2)),
            col("a").eq(lit(1)).or(col("b").gt(lit(2))),
        ] {
            assert!(
                !filter_while_decoding(std::slice::from_ref(&filter), &all, PARTITIONS),
                "{filter}"
            );
        }
        assert!(!filter_while_decoding(&[], &all, PARTITIONS));
    }

    #[test]
    fn a_lookup_returning_few_other_columns_does_not() {
        // Q12's shape: the filters' columns and one more.
        let filters = [col("a")
            .in_list(vec![lit(1), lit(2)], false)
            .and(col("b").lt(col("c")))];
        assert!(!filter_while_decoding(
            &filters,
            &wide(&["a", "b", "c", "d"]),
            PARTITIONS
        ));
        assert!(filter_while_decoding(
            &filters,
            &wide(&["a", "b", "c", "d", "e", "f"]),
            PARTITIONS
        ));
        // Partition columns are not columns decoded.
        assert!(!filter_while_decoding(
            &[col("a").eq(lit(1))],
            &wide(&["a", "b", "service_client_id"]),
            PARTITIONS
        ));
    }

    #[test]
    fn a_lookup_on_a_partition_column_chooses_files_not_rows() {
        let filters = [col("service_client_id").eq(lit(3))];
        assert!(!filter_while_decoding(&filters, &wide(ALL), PARTITIONS));
    }

    /// Table `t` (k, name, note, n; partitioned by service_client_id) with
    /// one file of 10,000 rows in small row groups and pages, in a memory
    /// store.
    async fn session_on_one_file() -> datafusion::prelude::SessionContext {
        use std::sync::Arc;

        use datafusion::{
            arrow::array::{Int64Array, RecordBatch, StringArray},
            parquet::file::properties::WriterProperties,
        };

        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("note", DataType::Utf8, false),
            Field::new("n", DataType::Int64, false),
        ]));
        let rows = 10_000i64;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)),
                Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|k| format!("name {k}")),
                )),
                Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|k| format!("note {}", k % 7)),
                )),
                Arc::new(Int64Array::from_iter_values((0..rows).map(|k| k * 2))),
            ],
        )
        .unwrap();
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(1_000))
            .set_data_page_row_count_limit(100)
            .set_write_batch_size(100)
            .build();
        crate::engine::test_tables::session_on_files(schema, vec![(1, batch)], Some(properties))
            .await
    }

    #[tokio::test]
    async fn a_lookup_is_filtered_in_the_scan_and_every_scan_returns_the_same_rows() {
        use datafusion::{
            arrow::array::AsArray as _, arrow::datatypes::Int64Type, physical_plan::displayable,
        };

        let context = session_on_one_file().await;
        // The statement, whether its scan filters (no filter left above
        // it), and the keys it returns.
        let cases: [(&str, bool, Vec<i64>); 7] = [
            ("SELECT * FROM t WHERE k = 4242", true, vec![4242]),
            (
                "SELECT * FROM t WHERE k IN (7, 4242, 9999)",
                true,
                vec![7, 4242, 9999],
            ),
            // With a filter on the partition column, which the scan's row
            // filter then reads from the file's folder.
            (
                "SELECT * FROM t WHERE service_client_id = 1 AND k = 4242",
                true,
                vec![4242],
            ),
            // A string lookup keeping one row in seven.
            (
                "SELECT * FROM t WHERE note = 'note 3'",
                true,
                (0..10_000).filter(|k| k % 7 == 3).collect(),
            ),
            // A lookup and a range: two columns besides the filters'.
            (
                "SELECT * FROM t WHERE note = 'note 3' AND k < 30",
                true,
                vec![3, 10, 17, 24],
            ),
            (
                "SELECT * FROM t WHERE k >= 9997",
                false,
                vec![9997, 9998, 9999],
            ),
            // One column besides the filter's: below OTHER_COLUMNS.
            ("SELECT k, n FROM t WHERE k = 4242", false, vec![4242]),
        ];
        for (sql, in_scan, keys) in cases {
            let frame = context.sql(sql).await.unwrap();
            let plan = frame.clone().create_physical_plan().await.unwrap();
            let shown = displayable(plan.as_ref()).indent(true).to_string();
            assert_eq!(!shown.contains("FilterExec"), in_scan, "{sql}:\n{shown}");
            let mut found = Vec::new();
            for batch in frame.collect().await.unwrap() {
                let k = batch
                    .column_by_name("k")
                    .unwrap()
                    .as_primitive::<Int64Type>();
                let n = batch
                    .column_by_name("n")
                    .unwrap()
                    .as_primitive::<Int64Type>();
                for (k, n) in k.values().iter().zip(n.values()) {
                    assert_eq!(*n, k * 2, "{sql}: the row's other columns are its own");
                    found.push(*k);
                }
            }
            found.sort();
            assert_eq!(found, keys, "{sql}");
        }
    }
}
