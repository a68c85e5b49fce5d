//! A worker: the stages of distributed reads other replicas send, run in a
//! session like a query's, behind the cluster secret.
//!
//! Each task gets a session of its own (`LakeWorker::session`):
//! - a memory pool of `query.memory_limit_bytes` (the limit holds per task,
//!   so one query may hold up to the limit times its tasks in the cluster);
//! - one object store, the lake's, under the lake's URL: no `file://`, no
//!   other URL (`LakeOnly`), so a stage reads the lake files it names and
//!   nothing on this machine;
//! - the bounded functions under their own names, and `||`: a decoded
//!   `repeat` is the bounded one, as on the coordinator;
//! - no catalog and no store: access was decided on the coordinator, before
//!   the plan was cut into stages.
//!
//! A decoded stage holding an operator outside `READ_OPERATORS` (a file
//! sink, say) is refused before it runs.

use std::sync::Arc;

use datafusion::{
    common::{
        DataFusionError, Result,
        tree_node::{TreeNode as _, TreeNodeRecursion},
    },
    execution::{
        SessionState,
        cache::cache_manager::{CacheManagerConfig, FileMetadataCache},
        memory_pool::FairSpillPool,
        object_store::{ObjectStoreRegistry, ObjectStoreUrl},
        runtime_env::RuntimeEnvBuilder,
    },
    physical_plan::ExecutionPlan,
    prelude::SessionContext,
};
use datafusion_distributed::{
    DistributedExt as _, Worker, WorkerPlanRewriteEvent, WorkerPlanRewriteEventResponse,
    WorkerQueryContext,
};
use object_store::ObjectStore;
use url::Url;

use super::secret::{ClusterSecret, SecretChannels, SecretCheck};
use crate::engine::bounded_functions;

/// The operators a stage may hold (by name, without the variant some add in
/// parentheses): reading, computing and moving rows, nothing that writes or
/// reaches outside the lake.
const READ_OPERATORS: &[&str] = &[
    "AggregateExec",
    "BoundedWindowAggExec",
    "BroadcastExec",
    "BufferExec",
    "ChildrenIsolatorUnionExec",
    "CoalesceBatchesExec",
    "CoalescePartitionsExec",
    "CooperativeExec",
    "CrossJoinExec",
    "DataSourceExec",
    "DistributedLeafExec",
    "EmptyExec",
    "ExactSortPushdownExec",
    "FilterExec",
    "GlobalLimitExec",
    "HashJoinExec",
    "InterleaveExec",
    "LazyMemoryExec",
    "LocalLimitExec",
    "NestedLoopJoinExec",
    "NetworkBroadcastExec",
    "NetworkCoalesceExec",
    "NetworkShuffleExec",
    "OutputRequirementExec",
    "PartialSortExec",
    "PartitionedTopKExec",
    "PiecewiseMergeJoinExec",
    "PlaceholderRowExec",
    "ProjectionExec",
    "RecursiveQueryExec",
    "RepartitionExec",
    "SamplerExec",
    "ScalarSubqueryExec",
    "SortExec",
    "SortMergeJoinExec",
    "SortPreservingMergeExec",
    "SymmetricHashJoinExec",
    "UnionExec",
    "UnnestExec",
    "WindowAggExec",
    "WorkTableExec",
];

/// What a worker's task sessions are made of.
#[derive(Clone)]
pub struct LakeWorker {
    lake_url: ObjectStoreUrl,
    lake_store: Arc<dyn ObjectStore>,
    metadata_cache: Arc<FileMetadataCache>,
    memory_limit: usize,
    channels: SecretChannels,
}

impl LakeWorker {
    pub fn new(
        lake_url: ObjectStoreUrl,
        lake_store: Arc<dyn ObjectStore>,
        metadata_cache: Arc<FileMetadataCache>,
        memory_limit: usize,
        secret: &ClusterSecret,
    ) -> Self {
        Self {
            lake_url,
            lake_store,
            metadata_cache,
            memory_limit,
            channels: SecretChannels::new(secret),
        }
    }

    /// The worker's gRPC service behind the secret check, as a router for
    /// `listener::serve`.
    pub fn router(self, secret: ClusterSecret) -> axum::Router {
        let worker = Worker::from_session_builder(move |context: WorkerQueryContext| {
            let this = self.clone();
            async move { this.session(context) }
        });
        let service = tonic::service::interceptor::InterceptedService::new(
            worker.into_worker_server(),
            SecretCheck::new(secret),
        );
        tonic::service::Routes::new(service).into_axum_router()
    }

    /// The session one task runs in (see the module header).
    fn session(&self, context: WorkerQueryContext) -> Result<SessionState> {
        crate::observability::metrics::cluster_task_started();
        let registry = Arc::new(LakeOnly {
            url: AsRef::<Url>::as_ref(&self.lake_url).clone(),
            store: self.lake_store.clone(),
        });
        let runtime = RuntimeEnvBuilder::new()
            .with_object_store_registry(registry)
            .with_memory_pool(Arc::new(FairSpillPool::new(self.memory_limit)))
            .with_cache_manager(
                CacheManagerConfig::default()
                    .with_file_metadata_cache(Some(self.metadata_cache.clone())),
            )
            .build_arc()?;
        let state = context
            .builder
            .with_runtime_env(runtime)
            .with_distributed_channel_resolver(self.channels.clone())
            .with_distributed_worker_plan_rewrite_handler(only_reads)
            .build();
        let session = SessionContext::new_with_state(state);
        bounded_functions::bound_functions_by_name(&session);
        Ok(session.state())
    }
}

/// Refuses a stage holding an operator outside `READ_OPERATORS`.
fn only_reads(event: WorkerPlanRewriteEvent) -> Result<WorkerPlanRewriteEventResponse> {
    check_reads_only(&event.plan)?;
    Ok(WorkerPlanRewriteEventResponse::new(event.plan))
}

fn check_reads_only(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    let mut refused = None;
    plan.apply(|node| {
        // A name may carry its variant: `SortExec(TopK)`.
        let operator = node.name().split('(').next().unwrap_or_default();
        if READ_OPERATORS.contains(&operator) {
            Ok(TreeNodeRecursion::Continue)
        } else {
            refused = Some(node.name().to_string());
            Ok(TreeNodeRecursion::Stop)
        }
    })?;
    match refused {
        None => Ok(()),
        Some(name) => {
            crate::observability::metrics::cluster_plan_refused();
            Err(DataFusionError::Plan(format!(
                "this worker runs reads only; the stage holds {name}"
            )))
        }
    }
}

/// The object stores a worker's task may reach: the lake's, nothing else.
#[derive(Debug)]
struct LakeOnly {
    url: Url,
    store: Arc<dyn ObjectStore>,
}

impl ObjectStoreRegistry for LakeOnly {
    fn register_store(
        &self,
        _url: &Url,
        _store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        None
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        let same = url.scheme() == self.url.scheme()
            && url.host_str() == self.url.host_str()
            && url.port() == self.url.port();
        match same {
            true => Ok(self.store.clone()),
            false => Err(DataFusionError::Plan(format!(
                "a worker reads the lake only, not {}://{}",
                url.scheme(),
                url.host_str().unwrap_or_default()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::{
        arrow::datatypes::Schema,
        physical_expr::expressions::lit,
        physical_plan::{empty::EmptyExec, explain::ExplainExec, filter::FilterExec},
    };

    use super::*;

    #[test]
    fn reads_pass_and_anything_else_is_refused_by_name() {
        let empty = Arc::new(EmptyExec::new(Arc::new(Schema::empty())));
        let read: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(lit(true), empty).unwrap());
        check_reads_only(&read).unwrap();
        let explain = Arc::new(ExplainExec::new(Arc::new(Schema::empty()), vec![], false));
        let over_explain: Arc<dyn ExecutionPlan> =
            Arc::new(FilterExec::try_new(lit(true), explain).unwrap());
        let refused = check_reads_only(&over_explain).unwrap_err().to_string();
        assert!(refused.contains("holds ExplainExec"), "{refused}");
    }

    #[test]
    fn a_task_reaches_the_lake_store_only() {
        let registry = LakeOnly {
            url: Url::parse("lakehost://lake/").unwrap(),
            store: Arc::new(object_store::memory::InMemory::new()),
        };
        let lake_file = Url::parse("lakehost://lake/a/b.parquet").unwrap();
        assert!(registry.get_store(&lake_file).is_ok());
        for other in [
            "file:///etc/passwd",
            "lakehost://other/",
            "s3://bucket/x",
            "lakehost://lake:1/",
        ] {
            let refused = registry.get_store(&Url::parse(other).unwrap()).unwrap_err();
            assert!(
                refused.to_string().contains("reads the lake only"),
                "{other}: {refused}"
            );
        }
        let stranger: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let local = Url::parse("file:///").unwrap();
        assert!(registry.register_store(&local, stranger).is_none());
        assert!(registry.get_store(&local).is_err());
    }
}
