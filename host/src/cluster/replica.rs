//! One replica's part in a cluster, from `[distributed]`: the secret, the
//! workers it sends stages to and when, and the worker service it serves.

use std::sync::Arc;

use anyhow::Context as _;
use datafusion::{
    common::{DataFusionError, Result},
    execution::{SessionStateBuilder, cache::cache_manager::FileMetadataCache},
};
use datafusion_distributed::{DistributedExt as _, SessionStateBuilderExt as _};
use tokio_util::sync::CancellationToken;

use super::{
    members::{LiveWorkers, Members},
    secret::{ClusterSecret, RecordingChannels, SecretChannels, WorkersReached},
    worker::LakeWorker,
};
use crate::{
    config::Config,
    engine::distributed::{
        Coordinator, HandedPlan, ReadWorkers, ScanGate, SizeGatedPlanner, WorkerReport,
    },
    lake::Lake,
};

/// This replica's part in a cluster: the secret, the workers it sends
/// stages to, and when it does.
#[derive(Debug)]
pub struct Cluster {
    secret: ClusterSecret,
    members: Arc<Members>,
    gate: ScanGate,
    bytes_per_task: usize,
    max_tasks_per_stage: usize,
    channels: SecretChannels,
    memory_limit: usize,
}

impl Cluster {
    /// The cluster `[distributed]` describes; `None` when it is off.
    pub fn from_config(config: &Config) -> anyhow::Result<Option<Arc<Self>>> {
        let distributed = &config.distributed;
        if !distributed.enabled {
            return Ok(None);
        }
        let secret = ClusterSecret::from_config(distributed).context("distributed.secret")?;
        Ok(Some(Arc::new(Self {
            channels: SecretChannels::new(&secret),
            secret,
            members: Members::new(distributed.worker_urls()),
            gate: ScanGate {
                min_bytes: distributed.min_scan_bytes,
                min_files: distributed.min_scan_files,
            },
            bytes_per_task: usize::try_from(distributed.bytes_per_task).unwrap_or(usize::MAX),
            max_tasks_per_stage: distributed.max_tasks_per_stage,
            memory_limit: usize::try_from(config.query.memory_limit_bytes).unwrap_or(usize::MAX),
        })))
    }

    /// Whether this replica sends stages to workers (it names some).
    pub fn coordinates(&self) -> bool {
        !self.members.configured().is_empty()
    }

    /// Probes the workers until `stop` (`members.rs`).
    pub fn start(&self, stop: CancellationToken) {
        if self.coordinates() {
            self.members.start(stop);
        }
    }

    /// The worker service for this replica's worker listener.
    pub fn worker_router(
        &self,
        lake: &Lake,
        metadata_cache: Arc<FileMetadataCache>,
    ) -> axum::Router {
        LakeWorker::new(
            lake.object_store_url().clone(),
            lake.object_store(),
            metadata_cache,
            self.memory_limit,
            &self.secret,
        )
        .router(self.secret.clone())
    }
}

impl Coordinator for Cluster {
    /// A read session's state, made to distribute past the size gate.
    fn coordinate(&self, builder: SessionStateBuilder) -> Result<SessionStateBuilder> {
        if !self.coordinates() {
            return Ok(builder);
        }
        let reached = Arc::new(WorkersReached::default());
        let channels = RecordingChannels::new(self.channels.clone(), reached.clone());
        let mut builder = builder
            .with_query_planner(Arc::new(HandedPlan))
            .with_distributed_worker_resolver(LiveWorkers(self.members.clone()))
            .with_distributed_channel_resolver(channels)
            .with_distributed_file_scan_config_bytes_per_partition(self.bytes_per_task)?;
        if self.max_tasks_per_stage > 0 {
            builder = builder.with_distributed_max_tasks_per_stage(self.max_tasks_per_stage)?;
        }
        if let Some(config) = builder.config().as_mut() {
            config.set_extension(Arc::new(ReadWorkers(Arc::new(Reached(reached)))));
        }
        let mut builder = builder.with_distributed_planner();
        let distributed = builder.query_planner().take().ok_or_else(|| {
            DataFusionError::Internal("the distributed planner was not installed".into())
        })?;
        let gated = SizeGatedPlanner::new(self.gate, self.members.clone(), distributed);
        Ok(builder.with_query_planner(Arc::new(gated)))
    }
}

/// What a coordinated session's reads did on their workers: the workers
/// its channels reached, and the transport's failures as reasons.
#[derive(Debug)]
struct Reached(Arc<WorkersReached>);

impl WorkerReport for Reached {
    fn reached(&self) -> usize {
        self.0.count()
    }

    fn failure(&self, error: &DataFusionError) -> Option<String> {
        super::failure::worker_failure(error)
    }
}
