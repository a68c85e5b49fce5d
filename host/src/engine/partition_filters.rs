//! Filters on the columns a table's folders hold (its partition columns):
//! which of a scan's filters read only them, which the files' partition
//! values decide exactly, and which service clients they name (the values
//! the access decision checks first; `provider.rs`).

use datafusion::{
    arrow::datatypes::DataType,
    common::{
        ScalarValue,
        tree_node::{TreeNode as _, TreeNodeRecursion},
    },
    datasource::listing::helpers::expr_applicable_for_cols,
    logical_expr::Expr,
};

/// The filters among `filters` that read only the given partition columns.
pub(super) fn filters_on(filters: &[Expr], columns: &[&str]) -> Vec<Expr> {
    filters
        .iter()
        .filter(|f| expr_applicable_for_cols(columns, f))
        .cloned()
        .collect()
}

/// Whether `filter` is decided by the files' partition values alone: it
/// reads at least one of `partitions` and no other column, calls only
/// immutable functions, and holds no subquery.
pub(super) fn decided_by_folders(filter: &Expr, partitions: &[&str]) -> bool {
    let subquery = filter.exists(|e| {
        Ok(matches!(
            e,
            Expr::Exists(_) | Expr::InSubquery(_) | Expr::ScalarSubquery(_)
        ))
    });
    !filter.column_refs().is_empty()
        && expr_applicable_for_cols(partitions, filter)
        && matches!(subquery, Ok(false))
}

/// The integers a set of filters names, each with its neighbours: the values
/// a comparison or range on `service_client_id` admits first.
pub(super) fn named_service_clients(filters: &[Expr]) -> std::collections::BTreeSet<i64> {
    let mut named = std::collections::BTreeSet::new();
    for filter in filters {
        let _ = filter.apply(|e| {
            if let Expr::Literal(value, _) = e
                && let Ok(ScalarValue::Int64(Some(v))) = value.cast_to(&DataType::Int64)
            {
                named.extend([v.saturating_sub(1), v, v.saturating_add(1)]);
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    named
}

#[cfg(test)]
#[path = "partition_filters_tests.rs"]
mod tests;
