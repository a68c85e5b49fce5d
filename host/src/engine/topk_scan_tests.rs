//! The scan under a TopK filters while it decodes (its row filter drops
//! rows) and the query gives the same rows; scans that should not, do not.

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{AsArray as _, Int64Array, RecordBatch, StringArray},
        datatypes::{DataType, Field, Int64Type, Schema},
    },
    execution::SessionStateBuilder,
    parquet::{arrow::ArrowWriter, file::properties::WriterProperties},
    physical_plan::{ExecutionPlan, collect, displayable},
    prelude::{ParquetReadOptions, SessionContext},
};

use crate::engine::plan_rules::lake_physical_rules;

const ROWS: i64 = 100_000;

/// A parquet file of `ROWS` rows: `k` a permutation of 0..ROWS, `a`, `b`
/// and `c` strings made from it; row groups of 10,000 rows, pages of 1,000.
fn write_table(dir: &std::path::Path) -> String {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("a", DataType::Utf8, false),
        Field::new("b", DataType::Utf8, false),
        Field::new("c", DataType::Utf8, false),
    ]));
    let path = dir.join("t.parquet");
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(10_000))
        .set_data_page_row_count_limit(1_000)
        .set_write_batch_size(1_000)
        .build();
    let file = std::fs::File::create(&path).unwrap();
    let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(properties)).unwrap();
    for start in (0..ROWS).step_by(10_000) {
        let keys: Vec<i64> = (start..start + 10_000).map(|i| i * 7919 % ROWS).collect();
        let text = |prefix: &str| -> StringArray {
            keys.iter()
                .map(|k| Some(format!("{prefix}{k:0>40}")))
                .collect()
        };
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(keys.clone())),
                Arc::new(text("a")),
                Arc::new(text("b")),
                Arc::new(text("c")),
            ],
        )
        .unwrap();
        writer.write(&batch).unwrap();
    }
    writer.close().unwrap();
    path.to_string_lossy().into_owned()
}

/// `write_table`'s file in the folder `p=1` of a table partitioned by `p`.
async fn partitioned_context(dir: &std::path::Path) -> SessionContext {
    let folder = dir.join("p=1");
    std::fs::create_dir_all(&folder).unwrap();
    write_table(&folder);
    let context = SessionContext::new_with_state(
        SessionStateBuilder::new()
            .with_default_features()
            .with_physical_optimizer_rules(lake_physical_rules())
            .build(),
    );
    let options =
        ParquetReadOptions::default().table_partition_cols(vec![("p".into(), DataType::Int64)]);
    context
        .register_parquet("t", format!("{}/", dir.display()), options)
        .await
        .unwrap();
    context
}

async fn context(path: &str, lakehost_rules: bool) -> SessionContext {
    let mut state = SessionStateBuilder::new().with_default_features();
    if lakehost_rules {
        state = state.with_physical_optimizer_rules(lake_physical_rules());
    }
    let context = SessionContext::new_with_state(state.build());
    context
        .register_parquet("t", path, ParquetReadOptions::default())
        .await
        .unwrap();
    context
}

/// The plan, its result, and the rows the scans' row filters dropped.
async fn run(context: &SessionContext, sql: &str) -> (String, Vec<RecordBatch>, usize) {
    let plan = context
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let batches = collect(plan.clone(), context.task_ctx()).await.unwrap();
    let shown = displayable(plan.as_ref()).indent(false).to_string();
    (shown, batches, rows_pruned_while_decoding(&plan))
}

fn rows_pruned_while_decoding(plan: &Arc<dyn ExecutionPlan>) -> usize {
    let own = plan
        .metrics()
        .and_then(|m| m.sum_by_name("pushdown_rows_pruned"))
        .map_or(0, |v| v.as_usize());
    own + plan
        .children()
        .into_iter()
        .map(rows_pruned_while_decoding)
        .sum::<usize>()
}

fn keys(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

#[tokio::test]
async fn a_topk_scan_decodes_other_columns_only_for_rows_that_can_enter() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_table(dir.path());
    let sql = "SELECT * FROM t ORDER BY k DESC LIMIT 10";
    let (_, ours, pruned) = run(&context(&path, true).await, sql).await;
    let (_, theirs, plain_pruned) = run(&context(&path, false).await, sql).await;

    let expected: Vec<i64> = (ROWS - 10..ROWS).rev().collect();
    assert_eq!(keys(&ours), expected);
    assert_eq!(keys(&theirs), expected);
    for batch in &ours {
        let c = batch.column(3).as_string_view();
        for (row, k) in keys(std::slice::from_ref(batch)).iter().enumerate() {
            assert_eq!(c.value(row), format!("c{k:0>40}"));
        }
    }
    // Without the rule nothing is dropped while decoding; with it, most
    // rows are (all but those read before the heap filled, and those
    // over its threshold then).
    assert_eq!(plain_pruned, 0);
    assert!(pruned >= (ROWS as usize) / 2, "{pruned} rows dropped");
}

#[tokio::test]
async fn a_where_clause_and_a_projection_keep_their_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_table(dir.path());
    let sql = "SELECT c, a, k + 1 AS next, b FROM t WHERE k % 3 = 0 ORDER BY k LIMIT 7";
    let (_, ours, pruned) = run(&context(&path, true).await, sql).await;
    let (_, theirs, _) = run(&context(&path, false).await, sql).await;
    assert_eq!(ours, theirs);
    let firsts: Vec<String> = ours
        .iter()
        .flat_map(|b| {
            let c = b.column(0).as_string_view();
            (0..b.num_rows())
                .map(|i| c.value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let expected: Vec<String> = (0..7).map(|i| format!("c{:0>40}", i * 3)).collect();
    assert_eq!(firsts, expected);
    assert!(pruned > 0);
}

#[tokio::test]
async fn left_alone_with_few_other_columns_without_a_limit_or_above_an_aggregate() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_table(dir.path());
    let context = context(&path, true).await;
    for sql in [
        "SELECT k, a FROM t ORDER BY k DESC LIMIT 10",
        "SELECT * FROM t ORDER BY k DESC",
        "SELECT a, max(k) AS m, min(b), min(c) FROM t GROUP BY a ORDER BY m DESC LIMIT 10",
    ] {
        let (plan, batches, pruned) = run(&context, sql).await;
        assert_eq!(pruned, 0, "{sql}\n{plan}");
        assert!(!batches.is_empty(), "{sql}");
    }

    // A partition column is read from the path, not decoded: `k`, `a` and
    // `p` are one column short; with `b` the scan filters while decoding.
    let partitioned = tempfile::tempdir().unwrap();
    let context = partitioned_context(partitioned.path()).await;
    let (plan, batches, pruned) =
        run(&context, "SELECT k, a, p FROM t ORDER BY k DESC LIMIT 10").await;
    assert_eq!(pruned, 0, "{plan}");
    assert_eq!(keys(&batches), (ROWS - 10..ROWS).rev().collect::<Vec<_>>());
    let (_, batches, pruned) = run(
        &context,
        "SELECT k, a, b, p FROM t ORDER BY k DESC LIMIT 10",
    )
    .await;
    assert!(pruned > 0);
    assert_eq!(keys(&batches), (ROWS - 10..ROWS).rev().collect::<Vec<_>>());
}
