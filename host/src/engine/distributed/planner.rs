//! When a read is distributed: the size gate in front of
//! datafusion-distributed's planner.
//!
//! Every read is planned here as it is locally (`DefaultPhysicalPlanner`):
//! that runs each table's `scan()`, so the access decision and partition
//! pruning are done, and a refusal comes before any stage exists. The plan's
//! parquet scans then say how much they read (`ScanSize`, from the catalog's
//! file sizes: known before anything runs). Under both thresholds the local
//! plan is the answer. Over either, that same plan (not a second planning)
//! is handed to the crate's planner, which cuts it into stages; it may still
//! leave it local when it finds nothing worth sending. With no worker
//! answering (the `WorkerPool`), the read runs here.

use std::{cell::RefCell, sync::Arc};

use async_trait::async_trait;
use datafusion::{
    catalog::Session,
    common::{
        Result,
        tree_node::{TreeNode as _, TreeNodeRecursion},
    },
    datasource::{physical_plan::FileScanConfig, source::DataSourceExec},
    execution::context::QueryPlanner,
    logical_expr::LogicalPlan,
    physical_plan::ExecutionPlan,
    physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner as _},
};
use datafusion_distributed::DistributedExec;

use super::WorkerPool;
use crate::observability::metrics::{self, ReadPlan};

tokio::task_local! {
    /// The local plan the size gate hands to the crate's planner.
    static LOCAL_PLAN: RefCell<Option<Arc<dyn ExecutionPlan>>>;
}

/// What a plan's parquet scans read: files and bytes, after pruning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanSize {
    pub files: u64,
    pub bytes: u64,
}

impl ScanSize {
    /// Sums the file groups of every file scan in `plan` (a plan not yet
    /// distributed: scans inside a distributed plan are out of reach).
    pub fn of(plan: &Arc<dyn ExecutionPlan>) -> Self {
        let mut size = Self::default();
        let _ = plan.apply(|node| {
            if let Some(scan) = node
                .downcast_ref::<DataSourceExec>()
                .and_then(|source| source.data_source().downcast_ref::<FileScanConfig>())
            {
                for file in scan.file_groups.iter().flat_map(|group| group.files()) {
                    size.files += 1;
                    size.bytes += file.object_meta.size;
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        size
    }
}

/// The thresholds past which a read is distributed.
#[derive(Debug, Clone, Copy)]
pub struct ScanGate {
    pub min_bytes: u64,
    pub min_files: u64,
}

impl ScanGate {
    pub fn distributes(&self, size: ScanSize) -> bool {
        size.bytes >= self.min_bytes || size.files >= self.min_files
    }
}

/// The session's query planner on a coordinating replica.
#[derive(Debug)]
pub struct SizeGatedPlanner {
    gate: ScanGate,
    /// No worker answering: the read runs here.
    members: Arc<dyn WorkerPool>,
    /// datafusion-distributed's planner, over [`HandedPlan`].
    distributed: Arc<dyn QueryPlanner + Send + Sync>,
}

impl SizeGatedPlanner {
    pub fn new(
        gate: ScanGate,
        members: Arc<dyn WorkerPool>,
        distributed: Arc<dyn QueryPlanner + Send + Sync>,
    ) -> Self {
        Self {
            gate,
            members,
            distributed,
        }
    }
}

#[async_trait]
impl QueryPlanner for SizeGatedPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let local = DefaultPhysicalPlanner::default()
            .create_physical_plan(logical_plan, session)
            .await?;
        let size = ScanSize::of(&local);
        if !self.gate.distributes(size) {
            return Ok(local);
        }
        if !self.members.any_live() {
            metrics::read_planned(ReadPlan::NoWorkers);
            tracing::warn!("no distributed worker answers: the read runs here");
            return Ok(local);
        }
        let plan = LOCAL_PLAN
            .scope(
                RefCell::new(Some(local)),
                self.distributed.create_physical_plan(logical_plan, session),
            )
            .await?;
        let distributed = plan.is::<DistributedExec>();
        metrics::read_planned(match distributed {
            true => ReadPlan::Distributed,
            false => ReadPlan::Local,
        });
        tracing::debug!(
            files = size.files,
            bytes = size.bytes,
            distributed,
            "scan past the distribution threshold"
        );
        Ok(plan)
    }
}

/// The planner under the crate's: it answers with the plan the size gate
/// already made, else (outside the gate) plans as DataFusion does.
#[derive(Debug, Default)]
pub struct HandedPlan;

#[async_trait]
impl QueryPlanner for HandedPlan {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let handed = LOCAL_PLAN
            .try_with(|plan| plan.borrow_mut().take())
            .ok()
            .flatten();
        match handed {
            Some(plan) => Ok(plan),
            None => {
                DefaultPhysicalPlanner::default()
                    .create_physical_plan(logical_plan, session)
                    .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_threshold_distributes() {
        let gate = ScanGate {
            min_bytes: 100,
            min_files: 3,
        };
        let size = |files, bytes| ScanSize { files, bytes };
        assert!(!gate.distributes(size(2, 99)));
        assert!(gate.distributes(size(2, 100)));
        assert!(gate.distributes(size(3, 1)));
        assert!(!gate.distributes(size(0, 0)));
    }
}
