//! What a read's result depends on in the lake: the snapshot of every lake
//! table its plan scans (the table, its name and schema, and the exact list
//! of committed files the session saw). Any load commit, SQL write, daily
//! refresh or DDL changes one of these, so two plans with the same snapshot
//! (and the same SQL and access) read the same rows: the ground for result
//! reuse (`query/service/reuse.rs`).
//!
//! A plan has no snapshot, and is never reused, when it reads anything but
//! lake tables (`information_schema`, table functions) or calls a function
//! whose value may change between runs (`random()`, `now()`, `uuid()`).

use datafusion::{
    common::tree_node::{TreeNode as _, TreeNodeRecursion},
    datasource::source_as_provider,
    logical_expr::{Expr, LogicalPlan, Volatility},
};
use sha2::{Digest as _, Sha256};

use super::{LakeTableProvider, bounded_functions::value_volatility};

/// The hex SHA-256 of the snapshots of the lake tables `plan` reads, in a
/// fixed order; `None` when the plan's result could change without the
/// catalog changing.
pub fn read_snapshot(plan: &LogicalPlan) -> Option<String> {
    let mut tables: Vec<Vec<u8>> = Vec::new();
    let mut reusable = true;
    let walked = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let lake_table = source_as_provider(&scan.source).ok().and_then(|provider| {
                provider
                    .as_ref()
                    .downcast_ref::<LakeTableProvider>()
                    .map(LakeTableProvider::snapshot)
            });
            match lake_table {
                Some(snapshot) => tables.push(snapshot),
                None => reusable = false,
            }
        }
        node.apply_expressions(|expr| {
            expr.apply(|inner| {
                if changes_between_runs(inner) {
                    reusable = false;
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(if reusable {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    if walked.is_err() || !reusable {
        return None;
    }
    tables.sort();
    tables.dedup();
    let mut hash = Sha256::new();
    for table in &tables {
        hash.update((table.len() as u64).to_be_bytes());
        hash.update(table);
    }
    Some(hex::encode(hash.finalize()))
}

/// A call whose value is not fixed by its arguments (volatile or stable).
fn changes_between_runs(expr: &Expr) -> bool {
    match expr {
        Expr::ScalarFunction(call) => value_volatility(&call.func) != Volatility::Immutable,
        Expr::AggregateFunction(call) => call.func.signature().volatility != Volatility::Immutable,
        Expr::WindowFunction(call) => call.fun.signature().volatility != Volatility::Immutable,
        _ => false,
    }
}
