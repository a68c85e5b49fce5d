//! Reads bigger than one process, run on several lakehost processes by
//! datafusion-distributed (docs/design/distributed-queries.md; the choice
//! in docs/decisions.md). Built with the cargo feature `distributed`.
//!
//! - `planner.rs`: the size gate; a read is planned and access-checked
//!   here first, and only a plan past `distributed.min_scan_bytes` or
//!   `min_scan_files` is cut into stages.
//! - `worker.rs`: the stages other replicas send, run in a session like a
//!   query's (memory limit, bounded functions, the lake and nothing else).
//! - `secret.rs`: the cluster secret, checked before any plan is decoded,
//!   and carried on every call between processes.
//! - `members.rs`: which configured workers answer; stages go to those.
//!
//! Without the feature `Cluster` has no value, so callers hold an
//! `Option<Arc<Cluster>>` that is always `None`.

#[cfg(feature = "distributed")]
mod members;
#[cfg(feature = "distributed")]
mod planner;
#[cfg(feature = "distributed")]
mod secret;
#[cfg(feature = "distributed")]
mod worker;

#[cfg(feature = "distributed")]
pub use cluster::Cluster;
#[cfg(feature = "distributed")]
pub use planner::ScanSize;
#[cfg(feature = "distributed")]
pub use secret::ClusterSecret;

/// Why a statement failed, when it failed because a worker of its
/// distributed plan stopped answering: the transport's error (a gRPC
/// status) somewhere in its chain, seen here or relayed by another worker.
#[cfg(feature = "distributed")]
pub fn worker_failure(error: &datafusion::common::DataFusionError) -> Option<String> {
    let status = transport_status(error)?;
    Some(format!(
        "A server running part of this query stopped answering ({status}); \
         the query was not run again. Run it again."
    ))
}

/// The gRPC status under `error`, through DataFusion's and Arrow's
/// wrappers and any error's `source`, as text.
#[cfg(feature = "distributed")]
fn transport_status(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    use datafusion::{arrow::error::ArrowError, common::DataFusionError};
    if let Some(status) = error.downcast_ref::<tonic::Status>() {
        return Some(format!(
            "{}: {}",
            status.code().description(),
            status.message()
        ));
    }
    let inner: Option<&(dyn std::error::Error + 'static)> =
        match error.downcast_ref::<DataFusionError>() {
            Some(DataFusionError::External(inner)) => {
                // Another worker's: the crate relays its peer's status as
                // text (tonic's `Display`: "code: '...', message: ...").
                let text = inner.to_string();
                if inner.downcast_ref::<tonic::Status>().is_none() && text.starts_with("code: '") {
                    return Some(text);
                }
                Some(inner.as_ref())
            }
            Some(DataFusionError::Shared(inner)) => Some(inner.as_ref()),
            Some(DataFusionError::Context(_, inner)) => Some(inner.as_ref()),
            Some(DataFusionError::ArrowError(inner, _)) => Some(inner.as_ref()),
            Some(DataFusionError::Diagnostic(_, inner)) => Some(inner.as_ref()),
            _ => match error.downcast_ref::<ArrowError>() {
                Some(ArrowError::ExternalError(inner)) => Some(inner.as_ref()),
                _ => None,
            },
        };
    inner.or_else(|| error.source()).and_then(transport_status)
}

/// How many workers the reads of `context` sent stages to; `None` when
/// none (a read that ran here alone).
#[cfg(feature = "distributed")]
pub fn workers_reached(context: &datafusion::prelude::SessionContext) -> Option<u32> {
    let state = context.state_ref();
    let state = state.read();
    let reached = state.config().get_extension::<secret::WorkersReached>()?;
    u32::try_from(reached.count()).ok().filter(|n| *n > 0)
}

#[cfg(not(feature = "distributed"))]
pub fn workers_reached(_context: &datafusion::prelude::SessionContext) -> Option<u32> {
    None
}

#[cfg(not(feature = "distributed"))]
pub fn worker_failure(_error: &datafusion::common::DataFusionError) -> Option<String> {
    None
}

/// A build without distributed queries: no cluster can exist.
#[cfg(not(feature = "distributed"))]
#[derive(Debug)]
pub enum Cluster {}

#[cfg(not(feature = "distributed"))]
impl Cluster {
    pub fn from_config(
        _config: &crate::config::Config,
    ) -> anyhow::Result<Option<std::sync::Arc<Self>>> {
        Ok(None)
    }

    pub fn coordinate(
        &self,
        _builder: datafusion::execution::SessionStateBuilder,
    ) -> datafusion::common::Result<datafusion::execution::SessionStateBuilder> {
        match *self {}
    }

    pub fn start(&self, _stop: tokio_util::sync::CancellationToken) {
        match *self {}
    }

    pub fn worker_router(
        &self,
        _lake: &crate::lake::Lake,
        _metadata_cache: std::sync::Arc<
            datafusion::execution::cache::cache_manager::FileMetadataCache,
        >,
    ) -> axum::Router {
        match *self {}
    }
}

#[cfg(feature = "distributed")]
mod cluster {
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
        planner::{HandedPlan, ScanGate, SizeGatedPlanner},
        secret::{ClusterSecret, RecordingChannels, SecretChannels, WorkersReached},
        worker::LakeWorker,
    };
    use crate::{config::Config, lake::Lake};

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

    impl std::fmt::Debug for SecretChannels {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("SecretChannels")
        }
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
                memory_limit: usize::try_from(config.query.memory_limit_bytes)
                    .unwrap_or(usize::MAX),
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

        /// A read session's state, made to distribute past the size gate.
        pub fn coordinate(&self, builder: SessionStateBuilder) -> Result<SessionStateBuilder> {
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
                config.set_extension(reached);
            }
            let mut builder = builder.with_distributed_planner();
            let distributed = builder.query_planner().take().ok_or_else(|| {
                DataFusionError::Internal("the distributed planner was not installed".into())
            })?;
            let gated = SizeGatedPlanner::new(self.gate, self.members.clone(), distributed);
            Ok(builder.with_query_planner(Arc::new(gated)))
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
}

#[cfg(all(test, feature = "distributed"))]
mod tests {
    use std::sync::Arc;

    use datafusion::{arrow::error::ArrowError, common::DataFusionError};

    use super::worker_failure;

    #[test]
    fn a_transport_status_is_found_under_any_wrapper() {
        let status = || Box::new(tonic::Status::unknown("h2 protocol error: broken pipe"));
        let wrapped = [
            DataFusionError::External(status()),
            DataFusionError::Shared(Arc::new(DataFusionError::External(status()))),
            DataFusionError::Context(
                "stage 2".into(),
                Box::new(DataFusionError::ArrowError(
                    Box::new(ArrowError::ExternalError(status())),
                    None,
                )),
            ),
        ];
        for error in &wrapped {
            let reason = worker_failure(error).unwrap_or_else(|| panic!("{error:?}"));
            assert!(
                reason.starts_with("A server running part of this query stopped answering")
                    && reason.contains("h2 protocol error: broken pipe"),
                "{reason}"
            );
        }
        #[derive(Debug)]
        struct Relayed(String);
        impl std::fmt::Display for Relayed {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl std::error::Error for Relayed {}
        let relayed = DataFusionError::External(Box::new(Relayed(status().to_string())));
        let reason = worker_failure(&relayed).unwrap();
        assert!(reason.contains("code: 'Unknown error'"), "{reason}");
        let plain = DataFusionError::ResourcesExhausted("repeat would return 1 bytes".into());
        assert_eq!(worker_failure(&plain), None);
        assert_eq!(
            worker_failure(&DataFusionError::External(Box::new(std::io::Error::other(
                "disk"
            )))),
            None
        );
    }
}
