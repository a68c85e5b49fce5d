//! An `ORDER BY ... LIMIT k` keeps about k rows in memory, not the strings
//! of every batch it has seen.
//!
//! DataFusion's TopK keeps each input batch that holds one of its current
//! top rows, and compacts them with `interleave`. A string-view column's
//! rows point into data buffers shared by the whole batch (a parquet page,
//! a dictionary), and `interleave` keeps those buffers, so each kept row
//! holds on to megabytes of other rows' strings: `SELECT * ... ORDER BY
//! price DESC LIMIT 1000` over 60 M lineitem rows peaked at 2.3 GB, unseen
//! by the memory pool (apache/datafusion#19386).
//!
//! This rule puts a `FilterExec` on the sort's own dynamic filter (the
//! threshold its heap has reached) under every TopK over string views.
//! Rows that cannot enter the top are dropped before the TopK sees them,
//! and the filter's coalescer copies the strings of the few that pass into
//! buffers of their own (arrow compacts a view array that uses under half
//! of its buffers), so the rows the TopK keeps hold only their own strings.
//! A batch of which most rows pass (input arriving in the sort's order)
//! goes through uncopied: DataFusion's coalescer passes on batches over
//! half the session's batch size as they are, so such a query pays one
//! comparison per row and no copy.
//!
//! The filter only ever drops rows the TopK would drop: it is the TopK's
//! filter, read at each batch. It is not added where the shared filter
//! could go stale: a recursive query re-creates its TopK's filter for each
//! iteration. Nor where the input arrives sorted (the TopK stops early on
//! batches past its boundary, which the filter would hide from it).

use std::sync::Arc;

use datafusion::{
    arrow::datatypes::{DataType, Schema},
    common::{
        Result,
        config::ConfigOptions,
        tree_node::{Transformed, TransformedResult as _, TreeNode as _},
    },
    physical_optimizer::PhysicalOptimizerRule,
    physical_plan::{
        ExecutionPlan, ExecutionPlanProperties as _, execution_plan::replace_children_if_necessary,
        filter::FilterExec, recursive_query::RecursiveQueryExec, sorts::sort::SortExec,
    },
};

/// The physical optimizer rule: run after DataFusion's own.
#[derive(Debug, Default)]
pub struct FilterTopKInput;

impl PhysicalOptimizerRule for FilterTopKInput {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if has_recursive_query(&plan)? {
            return Ok(plan);
        }
        let batch_size = config.execution.batch_size.get();
        plan.transform_up(|node| {
            let Some(sort) = node.downcast_ref::<SortExec>() else {
                return Ok(Transformed::no(node));
            };
            let dynamic = sort.dynamic_expressions_produced();
            let (Some(_), [threshold]) = (sort.fetch(), dynamic.as_slice()) else {
                return Ok(Transformed::no(node));
            };
            let input = sort.input();
            // Once is enough: a filter on this very threshold is already there
            // when the rule runs again (a WHERE clause's filter is not it).
            let placed = input.downcast_ref::<FilterExec>().is_some_and(|filter| {
                std::ptr::addr_eq(Arc::as_ptr(filter.predicate()), Arc::as_ptr(threshold))
            });
            if placed || input.output_ordering().is_some() || !has_string_views(&input.schema()) {
                return Ok(Transformed::no(node));
            }
            let filtered = FilterExec::try_new(Arc::clone(threshold), Arc::clone(input))?
                .with_batch_size(batch_size)?;
            let sort = replace_children_if_necessary(Arc::clone(&node), vec![Arc::new(filtered)])?;
            Ok(Transformed::yes(sort))
        })
        .data()
    }

    fn name(&self) -> &str {
        "filter_topk_input"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn has_recursive_query(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    plan.exists(|node| Ok(node.is::<RecursiveQueryExec>()))
}

/// Whether any column (at any depth) keeps its values in shared view buffers.
fn has_string_views(schema: &Schema) -> bool {
    fn is_view(data_type: &DataType) -> bool {
        match data_type {
            DataType::Utf8View | DataType::BinaryView => true,
            DataType::List(field)
            | DataType::LargeList(field)
            | DataType::ListView(field)
            | DataType::LargeListView(field)
            | DataType::FixedSizeList(field, _)
            | DataType::Map(field, _) => is_view(field.data_type()),
            DataType::Struct(fields) => fields.iter().any(|f| is_view(f.data_type())),
            DataType::Dictionary(_, value) => is_view(value),
            DataType::RunEndEncoded(_, values) => is_view(values.data_type()),
            _ => false,
        }
    }
    schema.fields().iter().any(|f| is_view(f.data_type()))
}

#[cfg(test)]
mod tests {
    use datafusion::{
        arrow::{
            array::{AsArray as _, Int64Array, RecordBatch, StringViewArray},
            datatypes::{Field, Int64Type},
        },
        datasource::MemTable,
        execution::SessionStateBuilder,
        physical_plan::{collect, displayable},
        prelude::SessionContext,
    };

    use super::*;
    use crate::engine::plan_rules::lake_physical_rules;

    const BATCHES: i64 = 200;
    const ROWS_PER_BATCH: i64 = 1_000;

    /// 200 batches of 1,000 rows, each batch's strings (100 bytes a row)
    /// in one buffer of its own; `k` spreads the largest keys over the
    /// batches, `seq` numbers the rows in the order they are read.
    fn table() -> MemTable {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8View, false),
            Field::new("seq", DataType::Int64, false),
        ]));
        let batches = (0..BATCHES)
            .map(|b| {
                let keys: Vec<i64> = (0..ROWS_PER_BATCH)
                    .map(|r| (r * BATCHES + b) * 7919 % (BATCHES * ROWS_PER_BATCH))
                    .collect();
                let strings: StringViewArray =
                    keys.iter().map(|k| Some(format!("{k:0>100}"))).collect();
                let seq =
                    Int64Array::from_iter_values(b * ROWS_PER_BATCH..(b + 1) * ROWS_PER_BATCH);
                RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int64Array::from(keys)),
                        Arc::new(strings),
                        Arc::new(seq),
                    ],
                )
                .unwrap()
            })
            .collect();
        MemTable::try_new(schema, vec![batches]).unwrap()
    }

    fn context(lakehost_rules: bool) -> SessionContext {
        let mut state = SessionStateBuilder::new().with_default_features();
        if lakehost_rules {
            state = state.with_physical_optimizer_rules(lake_physical_rules());
        }
        let context = SessionContext::new_with_state(state.build());
        context.register_table("t", Arc::new(table())).unwrap();
        context
    }

    async fn run(context: &SessionContext, sql: &str) -> (String, Vec<RecordBatch>) {
        let plan = context
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let shown = displayable(plan.as_ref()).indent(false).to_string();
        let batches = collect(plan, context.task_ctx()).await.unwrap();
        (shown, batches)
    }

    /// The bytes of string data the result's batches keep alive.
    fn string_bytes_kept(batches: &[RecordBatch]) -> usize {
        batches
            .iter()
            .map(|b| {
                b.column(1)
                    .as_string_view()
                    .data_buffers()
                    .iter()
                    .map(|buffer| buffer.capacity())
                    .sum::<usize>()
            })
            .sum()
    }

    fn keys(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    #[tokio::test]
    async fn a_topk_keeps_only_its_own_rows_strings_and_the_same_rows() {
        let sql = "SELECT k, s FROM t ORDER BY k DESC LIMIT 50";
        let (plan, ours) = run(&context(true), sql).await;
        let (plain_plan, theirs) = run(&context(false), sql).await;

        let lines: Vec<&str> = plan.lines().map(str::trim).collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("SortExec: TopK"))
            .unwrap_or_else(|| panic!("{plan}"));
        assert!(
            lines[at + 1].starts_with("FilterExec: DynamicFilter"),
            "{plan}"
        );
        assert!(!plain_plan.contains("FilterExec"), "{plain_plan}");

        let expected: Vec<i64> = (BATCHES * ROWS_PER_BATCH - 50..BATCHES * ROWS_PER_BATCH)
            .rev()
            .collect();
        assert_eq!(keys(&ours), expected);
        assert_eq!(keys(&theirs), expected);
        for batch in &ours {
            let strings = batch.column(1).as_string_view();
            let keys = batch.column(0).as_primitive::<Int64Type>();
            for row in 0..batch.num_rows() {
                assert_eq!(strings.value(row), format!("{:0>100}", keys.value(row)));
            }
        }

        // Fifty rows of 100 bytes. DataFusion alone keeps the whole buffer
        // (100 KB) of most batches they came from (2.4 MB when written);
        // with the rule, the few blocks the filter's coalescer copied the
        // passing rows into (0.2 MB).
        let (kept, plain_kept) = (string_bytes_kept(&ours), string_bytes_kept(&theirs));
        assert!(plain_kept >= 1_000_000, "{plain_kept}");
        assert!(
            kept * 5 <= plain_kept,
            "{kept} bytes kept against {plain_kept}"
        );
    }

    #[tokio::test]
    async fn a_where_clause_keeps_the_filter_and_the_rule_places_it_once() {
        let sql = "SELECT k, s FROM t WHERE k % 3 = 0 ORDER BY k DESC LIMIT 50";
        let ours_context = context(true);
        let (plan, ours) = run(&ours_context, sql).await;
        assert_eq!(
            plan.matches("FilterExec: DynamicFilter").count(),
            1,
            "{plan}"
        );
        let (_, theirs) = run(&context(false), sql).await;
        let expected: Vec<i64> = (0..BATCHES * ROWS_PER_BATCH)
            .rev()
            .filter(|k| k % 3 == 0)
            .take(50)
            .collect();
        assert_eq!(keys(&ours), expected);
        assert_eq!(keys(&theirs), expected);

        // The rule run again over its own plan changes nothing.
        let physical = ours_context
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let again = FilterTopKInput
            .optimize(physical.clone(), ours_context.state().config_options())
            .unwrap();
        assert_eq!(
            displayable(again.as_ref()).indent(false).to_string(),
            displayable(physical.as_ref()).indent(false).to_string()
        );
    }

    #[tokio::test]
    async fn input_read_in_the_sorts_order_gives_the_same_rows() {
        let sql = "SELECT seq, s FROM t ORDER BY seq DESC LIMIT 50";
        let (plan, ours) = run(&context(true), sql).await;
        assert!(plan.contains("FilterExec: DynamicFilter"), "{plan}");
        let (_, theirs) = run(&context(false), sql).await;
        let expected: Vec<i64> = (BATCHES * ROWS_PER_BATCH - 50..BATCHES * ROWS_PER_BATCH)
            .rev()
            .collect();
        assert_eq!(keys(&ours), expected);
        assert_eq!(keys(&theirs), expected);
    }

    #[tokio::test]
    async fn left_alone_without_views_without_a_limit_and_in_recursive_queries() {
        let context = context(true);
        for sql in [
            "SELECT k FROM t ORDER BY k DESC LIMIT 10",
            "SELECT k, s FROM t ORDER BY k DESC",
            "WITH RECURSIVE r(n, s) AS (SELECT 1, arrow_cast('x', 'Utf8View') \
             UNION ALL SELECT n + 1, s FROM r WHERE n < 5) \
             SELECT * FROM (SELECT n, s FROM r ORDER BY n DESC LIMIT 2)",
        ] {
            let (plan, batches) = run(&context, sql).await;
            assert!(!plan.contains("FilterExec: DynamicFilter"), "{sql}\n{plan}");
            assert!(!batches.is_empty(), "{sql}");
        }
    }
}
