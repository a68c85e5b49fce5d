//! Where a running statement gives its thread back, so a cancel, a time
//! limit or a dropped client stops it.
//!
//! A statement stops when the task running it is aborted, or when whoever
//! reads its rows goes away (a Flight client, a distributed read's
//! coordinator); both take effect only when the running stream next
//! returns `Pending`. DataFusion makes its leaves yield (`EnsureCooperative`),
//! but an operator that makes many rows from few runs on without touching a
//! leaf: a join whose probe batch matches millions of build rows, feeding an
//! aggregation, computed for minutes after its DELETE. Every such operator's
//! output goes through `CooperativeExec` here, which spends tokio's task
//! budget per batch and yields when it runs out (about every 128 batches).

use std::sync::Arc;

use datafusion::{
    common::{
        Result,
        config::ConfigOptions,
        tree_node::{Transformed, TransformedResult as _, TreeNode as _},
    },
    physical_optimizer::PhysicalOptimizerRule,
    physical_plan::{
        ExecutionPlan,
        coop::CooperativeExec,
        joins::{
            CrossJoinExec, HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec,
            SymmetricHashJoinExec,
        },
        unnest::UnnestExec,
    },
};

/// The physical optimizer rule: run after DataFusion's own
/// (`plan_rules::lake_physical_rules`).
#[derive(Debug, Default)]
pub struct YieldAfterRowMakers;

/// Operators whose output can be far more rows than they read.
fn makes_rows(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.is::<HashJoinExec>()
        || plan.is::<NestedLoopJoinExec>()
        || plan.is::<CrossJoinExec>()
        || plan.is::<SortMergeJoinExec>()
        || plan.is::<SymmetricHashJoinExec>()
        || plan.is::<UnnestExec>()
}

impl PhysicalOptimizerRule for YieldAfterRowMakers {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if makes_rows(&node) {
                return Ok(Transformed::yes(
                    Arc::new(CooperativeExec::new(node)) as Arc<dyn ExecutionPlan>
                ));
            }
            // One wrapper is enough: DataFusion may have put one there first.
            if node.is::<CooperativeExec>()
                && let [child] = node.children().as_slice()
                && child.is::<CooperativeExec>()
            {
                return Ok(Transformed::yes(Arc::clone(child)));
            }
            Ok(Transformed::no(node))
        })
        .data()
    }

    fn name(&self) -> &str {
        "yield_after_row_makers"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use datafusion::{physical_plan::displayable, prelude::SessionContext};

    async fn plan_of(sql: &str) -> String {
        let state = datafusion::execution::SessionStateBuilder::new()
            .with_default_features()
            .with_physical_optimizer_rules(crate::engine::plan_rules::lake_physical_rules())
            .build();
        let context = SessionContext::new_with_state(state);
        let plan = context
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        displayable(plan.as_ref()).indent(false).to_string()
    }

    #[tokio::test]
    async fn joins_and_unnest_yield_and_nothing_else_changes() {
        let join = plan_of(
            "SELECT count(*) FROM range(0, 10) a JOIN range(0, 10) b ON a.value % 3 = b.value % 3",
        )
        .await;
        let lines: Vec<&str> = join.lines().map(str::trim).collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("HashJoinExec"))
            .unwrap_or_else(|| panic!("{join}"));
        assert!(lines[at - 1].starts_with("CooperativeExec"), "{join}");
        assert!(
            !lines.windows(2).any(|w| w[0].starts_with("CooperativeExec")
                && w[1].starts_with("CooperativeExec")),
            "{join}"
        );
        let cross = plan_of("SELECT count(*) FROM range(0, 10) a, range(0, 10) b").await;
        assert!(cross.contains("CooperativeExec"), "{cross}");
        let unnest = plan_of("SELECT unnest(make_array(1, 2, 3))").await;
        let lines: Vec<&str> = unnest.lines().map(str::trim).collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("UnnestExec"))
            .unwrap();
        assert!(lines[at - 1].starts_with("CooperativeExec"), "{unnest}");
        let scan = plan_of("SELECT value FROM range(0, 10) WHERE value > 3").await;
        assert!(!scan.contains("HashJoinExec"), "{scan}");
        let plain = datafusion::execution::SessionStateBuilder::new()
            .with_default_features()
            .build();
        let context = SessionContext::new_with_state(plain);
        let plain_plan = context
            .sql("SELECT value FROM range(0, 10) WHERE value > 3")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert_eq!(
            scan,
            displayable(plain_plan.as_ref()).indent(false).to_string(),
            "a plan without joins is DataFusion's own"
        );
    }
}
