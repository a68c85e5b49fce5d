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
//! A session is made to distribute by a [`Coordinator`] (the cluster), the
//! planner asks a [`WorkerPool`] whether any worker answers, and what a
//! read's workers did is asked of the [`ReadWorkers`] the coordinator keeps
//! in the session's config.

use std::sync::Arc;

use datafusion::{
    common::{DataFusionError, Result},
    execution::SessionStateBuilder,
    prelude::SessionContext,
};

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

/// What a distributed read's workers did, as the transport saw it.
pub trait WorkerReport: std::fmt::Debug + Send + Sync {
    /// How many workers the session's reads sent stages to.
    fn reached(&self) -> usize;
    /// Why a statement failed, when it failed because a worker stopped
    /// answering.
    fn failure(&self, error: &DataFusionError) -> Option<String>;
}

/// The [`WorkerReport`] a coordinated session keeps in its config.
#[derive(Debug, Clone)]
pub struct ReadWorkers(pub Arc<dyn WorkerReport>);

fn report_of(context: &SessionContext) -> Option<ReadWorkers> {
    let state = context.state_ref();
    let state = state.read();
    state
        .config()
        .get_extension::<ReadWorkers>()
        .map(|workers| workers.as_ref().clone())
}

/// How many workers the reads of `context` sent stages to; `None` when
/// none (a read that ran here alone).
pub fn workers_reached(context: &SessionContext) -> Option<u32> {
    let reached = report_of(context)?.0.reached();
    u32::try_from(reached).ok().filter(|n| *n > 0)
}

/// Why a statement of `context` failed, when a worker of its distributed
/// plan stopped answering.
pub fn worker_failure(context: &SessionContext, error: &DataFusionError) -> Option<String> {
    report_of(context)?.0.failure(error)
}

/// A build without the feature `distributed`: no read runs elsewhere.
#[cfg(not(feature = "distributed"))]
pub async fn finished_read(
    plan: std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>,
) -> std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan> {
    plan
}
