//! The planner's side of reads bigger than one process
//! (datafusion-distributed; docs/design/distributed-queries.md). The
//! transport (the worker service, the cluster secret, which workers answer)
//! is `crate::distributed`, a floor above: the engine knows no wire format.
//!
//! - `planner.rs`: the size gate; a read is planned and access-checked here
//!   first, and only a plan past `distributed.min_scan_bytes` or
//!   `min_scan_files` is cut into stages.
//! - `report.rs`: what a finished read's workers scanned and moved.
//!
//! A session is made to distribute by a [`Coordinator`] (the cluster), and
//! the planner asks a [`WorkerPool`] whether any worker answers.

use datafusion::{common::Result, execution::SessionStateBuilder};

#[cfg(feature = "distributed")]
mod planner;
#[cfg(feature = "distributed")]
mod report;

#[cfg(feature = "distributed")]
pub use planner::{HandedPlan, ScanGate, SizeGatedPlanner};
#[cfg(feature = "distributed")]
pub use report::finished_read;

/// What makes a read session's state distribute its reads (the cluster of
/// `crate::distributed`).
pub trait Coordinator: std::fmt::Debug + Send + Sync {
    /// `builder`, made to distribute reads past the size gate.
    fn coordinate(&self, builder: SessionStateBuilder) -> Result<SessionStateBuilder>;
}

/// The workers stages may go to.
pub trait WorkerPool: std::fmt::Debug + Send + Sync {
    /// Whether any worker answered the last probe.
    fn any_live(&self) -> bool;
}

/// A build without the feature `distributed`: no read runs elsewhere.
#[cfg(not(feature = "distributed"))]
pub async fn finished_read(
    plan: std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>,
) -> std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan> {
    plan
}
