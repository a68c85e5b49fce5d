//! The parquet scan under an `ORDER BY ... LIMIT k` decodes its other
//! columns only for the rows that can still enter the top.
//!
//! DataFusion pushes a TopK's threshold (its dynamic filter) into the scan
//! below it, but a scan without `pushdown_filters` uses it only to skip
//! whole files and row groups by their statistics: every other row group is
//! decoded whole, every column. `SELECT * FROM lineitem ORDER BY
//! l_extendedprice DESC LIMIT 1000` at TPC-H scale 10 so decoded all 16
//! columns of 60 M rows to keep 1,000.
//!
//! This rule turns on filtering while decoding (`late_filters.rs` says what
//! that is) for such a scan: it decodes the sort's columns, tests the
//! threshold the heap has reached, and of the other columns decodes only
//! the pages holding a row that passed. Once the heap is full few rows do.
//! It applies where the scan is reached from the TopK through operators
//! that pass rows on one by one (filters, projections, repartitioning) and
//! decodes at least [`OTHER_COLUMNS`] columns beyond the sort's keys
//! (partition columns, read from paths, do not count), as
//! for a lookup: with fewer, decoding in two passes costs more than it
//! saves. The rows are the same: the scan applies, row by row, the very
//! predicate DataFusion already gave it for pruning, and the operators
//! above still apply it.

use std::sync::Arc;

use datafusion::{
    common::{
        Result,
        config::ConfigOptions,
        tree_node::{Transformed, TransformedResult as _, TreeNode as _},
    },
    datasource::{
        physical_plan::{FileSource as _, ParquetSource},
        source::DataSourceExec,
    },
    physical_expr::expressions::DynamicFilterPhysicalExpr,
    physical_optimizer::PhysicalOptimizerRule,
    physical_plan::{
        ExecutionPlan, PhysicalExpr, coalesce_partitions::CoalescePartitionsExec,
        coop::CooperativeExec, execution_plan::replace_children_if_necessary, filter::FilterExec,
        projection::ProjectionExec, repartition::RepartitionExec, sorts::sort::SortExec,
    },
};

use super::late_filters::OTHER_COLUMNS;

/// The physical optimizer rule: run after DataFusion's own (its filter
/// pushdown has placed the thresholds).
#[derive(Debug, Default)]
pub struct FilterTopKScan;

impl PhysicalOptimizerRule for FilterTopKScan {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(sort) = node.downcast_ref::<SortExec>() else {
                return Ok(Transformed::no(node));
            };
            if sort.fetch().is_none() || sort.dynamic_expressions_produced().is_empty() {
                return Ok(Transformed::no(node));
            }
            let keys = sort.expr().len();
            match filtering_scan(Arc::clone(sort.input()), keys)? {
                Some(input) => Ok(Transformed::yes(replace_children_if_necessary(
                    node,
                    vec![input],
                )?)),
                None => Ok(Transformed::no(node)),
            }
        })
        .data()
    }

    fn name(&self) -> &str {
        "filter_topk_scan"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node` with the parquet scan it passes rows on from filtering while it
/// decodes; `None` when there is no such scan, or it already does, or
/// holds no threshold, or returns too few other columns.
fn filtering_scan(
    node: Arc<dyn ExecutionPlan>,
    keys: usize,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(scan) = node.downcast_ref::<DataSourceExec>() {
        let Some((config, parquet)) = scan.downcast_to_file_source::<ParquetSource>() else {
            return Ok(None);
        };
        let holds_threshold = match parquet.filter() {
            Some(predicate) => has_dynamic_filter(&predicate)?,
            None => false,
        };
        // Partition columns come from the files' paths: nothing to decode.
        let partitions = config.table_partition_cols();
        let decoded = scan
            .schema()
            .fields()
            .iter()
            .filter(|field| partitions.find(field.name()).is_none())
            .count();
        if parquet.table_parquet_options().global.pushdown_filters
            || !holds_threshold
            || decoded < keys + OTHER_COLUMNS
        {
            return Ok(None);
        }
        let mut config = config.clone();
        config.file_source = Arc::new(parquet.clone().with_pushdown_filters(true));
        return Ok(Some(Arc::new(
            scan.clone().with_data_source(Arc::new(config)),
        )));
    }
    let passes_rows_on = node.is::<FilterExec>()
        || node.is::<ProjectionExec>()
        || node.is::<RepartitionExec>()
        || node.is::<CoalescePartitionsExec>()
        || node.is::<CooperativeExec>();
    let child = match node.children().as_slice() {
        [child] if passes_rows_on => Arc::clone(child),
        _ => return Ok(None),
    };
    match filtering_scan(child, keys)? {
        Some(child) => Ok(Some(replace_children_if_necessary(node, vec![child])?)),
        None => Ok(None),
    }
}

fn has_dynamic_filter(predicate: &Arc<dyn PhysicalExpr>) -> Result<bool> {
    predicate.exists(|expr| Ok(expr.downcast_ref::<DynamicFilterPhysicalExpr>().is_some()))
}

#[cfg(test)]
#[path = "topk_scan_tests.rs"]
mod tests;
