//! The physical optimizer rules of every lake session: DataFusion's own,
//! then lakehost's (each in its own module, with why).

use std::sync::Arc;

use datafusion::physical_optimizer::{PhysicalOptimizerRule, optimizer::PhysicalOptimizer};

use super::{
    topk_input::FilterTopKInput, topk_scan::FilterTopKScan, yield_points::YieldAfterRowMakers,
};

/// DataFusion's rules, then lakehost's.
pub fn lake_physical_rules() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let mut rules = PhysicalOptimizer::default().rules;
    rules.push(Arc::new(FilterTopKScan));
    rules.push(Arc::new(FilterTopKInput));
    rules.push(Arc::new(YieldAfterRowMakers));
    rules
}
