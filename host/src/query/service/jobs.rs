//! `QueryJobs`: the job lifecycle of the query service, and the state it
//! runs on (the store's jobs, this replica's slots, lease, drain and engine
//! runtime). Here: the type, how it plans a statement (the one `plan`, for a
//! submission, a worker's claim and a streamed read) and how a plan starts
//! on the engine runtime. The lifecycle's steps have their own files:
//! `submit.rs` (submit, read back, cancel), `worker.rs` (claim, run, record
//! the end, drain hand-backs, abandoned jobs), `waiting.rs` (waiting for an
//! end), `streamed.rs` (rows sent to a wire client as they come) and
//! `reuse.rs` (a read answered with an earlier result).
//!
//! It never reads a result back: a run's small result goes to
//! `QueryResults` (`keep_small_result`), which serves pages, files and links.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use datafusion::{arrow::datatypes::SchemaRef, execution::cache::cache_manager::FileMetadataCache};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use super::{QueryResults, ends::Ends, runs_here::RunsHere};
use crate::{
    auth::{Access, LakeCaller},
    clock::SharedClock,
    config::QueryConfig,
    drain::Drain,
    engine::{
        EngineError,
        distributed::Coordinator,
        layout::StringColumns,
        session::{SessionScope, session_for},
        statement::{Action, StatementType, classify},
    },
    lake::{Lake, ReadCache},
    lease::Lease,
    query::{
        QueryError,
        execute::{Execution, ResultTarget, execute, result_schema},
        prepare::{Prepared, Target, prepare},
        result_writer::{FirstFormat, TypedCopies},
    },
    runtime::EngineRuntime,
    store::{
        Store,
        catalog::standard_databases,
        queries::{NewQuery, ResultFirst},
    },
};

/// The job lifecycle: submission, the worker pool, ends, cancels, streamed
/// runs and waits for an end.
pub struct QueryJobs {
    pub(super) store: Store,
    pub(super) lake: Lake,
    pub(super) clock: SharedClock,
    pub(super) limits: QueryConfig,
    pub(super) lease: Lease,
    pub(super) engine: Arc<EngineRuntime>,
    pub(super) wake: Notify,
    /// Each end (or cancel) recorded on this replica, announced by its id.
    pub(super) ended: Ends,
    /// One permit per query that may run at once on this replica.
    pub(super) slots: Arc<Semaphore>,
    /// The queries running here, per org and caller, stored or not yet.
    pub(super) runs_here: Arc<RunsHere>,
    pub(super) running: Mutex<HashMap<String, CancellationToken>>,
    /// This replica's name as the holder of the leases it takes.
    pub(super) holder: String,
    /// This replica's drain: no claims while it drains, hand-backs at its end.
    pub(super) drain: Drain,
    metadata_cache: Arc<FileMetadataCache>,
    /// Lake pages read by recent queries, for the next ones (`query.read_cache_bytes`).
    read_cache: Option<Arc<ReadCache>>,
    /// The workers big reads run on (`[distributed]`), when this replica
    /// coordinates.
    cluster: Option<Arc<dyn Coordinator>>,
    /// Where a run's small result is kept for its first pages.
    pub(super) results: Arc<QueryResults>,
}

/// What `QueryJobs::new` is made of besides the results it feeds.
pub(super) struct JobsParts {
    pub store: Store,
    pub lake: Lake,
    pub clock: SharedClock,
    pub limits: QueryConfig,
    pub engine: Arc<EngineRuntime>,
    pub drain: Drain,
    pub cluster: Option<Arc<dyn Coordinator>>,
}

/// A planned statement, ready to execute.
pub(super) struct Planned {
    pub context: datafusion::prelude::SessionContext,
    pub prepared: Prepared,
    pub access: Access,
}

/// A statement executing on the engine runtime; dropping it aborts it.
pub(super) struct Started {
    task: tokio::task::JoinHandle<Result<Execution, QueryError>>,
    _abort: AbortOnDrop,
}

impl Started {
    pub(super) async fn outcome(mut self) -> Result<Execution, QueryError> {
        self.wait().await
    }

    /// Its outcome; dropping this future before it is ready leaves the
    /// statement running (see `waiting.rs`).
    pub(super) async fn wait(&mut self) -> Result<Execution, QueryError> {
        match (&mut self.task).await {
            Ok(outcome) => outcome,
            Err(e) => Err(QueryError::internal("query task", e)),
        }
    }
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for QueryJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryJobs")
            .field("holder", &self.holder)
            .finish()
    }
}

impl QueryJobs {
    pub(super) fn new(parts: JobsParts, results: Arc<QueryResults>) -> Arc<Self> {
        let JobsParts {
            store,
            lake,
            clock,
            limits,
            engine,
            drain,
            cluster,
        } = parts;
        let metadata_cache = datafusion::execution::runtime_env::RuntimeEnv::default()
            .cache_manager
            .get_file_metadata_cache();
        let read_cache = lake.read_cache(limits.read_cache_bytes);
        Arc::new(Self {
            store,
            lake,
            lease: Lease::new(clock.clone(), limits.lease_s),
            clock,
            slots: Arc::new(Semaphore::new(limits.workers)),
            limits,
            engine,
            wake: Notify::new(),
            ended: Ends::new(),
            runs_here: Arc::default(),
            running: Mutex::new(HashMap::new()),
            holder: uuid::Uuid::new_v4().simple().to_string(),
            drain,
            metadata_cache,
            read_cache,
            cluster,
            results,
        })
    }

    /// Parquet footers read by this replica's queries, shared with the
    /// stages it runs for other replicas.
    pub fn metadata_cache(&self) -> Arc<FileMetadataCache> {
        self.metadata_cache.clone()
    }

    pub(super) fn now(&self) -> i64 {
        self.clock.now().timestamp_micros()
    }

    pub(super) fn default_database(caller: &LakeCaller) -> String {
        standard_databases(&caller.org, caller.zone.as_deref()).lake
    }

    /// Checks `sql` against `access` and plans it in a session of the org
    /// (or zone) whose unqualified names resolve in `database`: at submission,
    /// and again when a worker runs a stored job. `strings` says how it reads
    /// string columns: plain for a result streamed to its client as it is
    /// read, else views.
    pub(super) async fn plan(
        &self,
        (org, zone): (&str, Option<&str>),
        database: &str,
        access: Access,
        sql: &str,
        strings: StringColumns,
    ) -> Result<(Planned, StatementType), QueryError> {
        let classified = classify(sql).map_err(|e| QueryError::Invalid(e.to_string()))?;
        let scope = SessionScope {
            org,
            zone,
            access: &access,
            default_database: database,
            memory_limit: Some(self.limits.memory_limit_bytes as usize),
            metadata_cache: Some(self.metadata_cache.clone()),
            strings,
            read_cache: self.read_cache.clone(),
            // Reads only: a write's rows are written on this replica.
            cluster: match classified.action {
                Action::Read => self.cluster.as_deref(),
                _ => None,
            },
            target_partitions: self.limits.target_partitions,
        };
        let context = session_for(&self.store, &self.lake, &scope)
            .await
            .map_err(EngineError::from)?;
        let target = Target {
            store: &self.store,
            org,
            zone,
            default_database: database,
            access: &access,
        };
        let prepared = prepare(&context, &target, sql, &classified, self.now()).await?;
        let planned = Planned {
            context,
            prepared,
            access,
        };
        Ok((planned, classified.statement_type))
    }

    /// `plan` with `caller`'s org, zone and access.
    pub(super) async fn plan_for(
        &self,
        caller: &LakeCaller,
        database: &str,
        sql: &str,
        strings: StringColumns,
    ) -> Result<(Planned, StatementType), QueryError> {
        self.plan(
            (&caller.org, caller.zone.as_deref()),
            database,
            caller.grant.access(),
            sql,
            strings,
        )
        .await
    }

    /// The columns `sql` would return for `caller`, checked and planned as
    /// `submit` does (refusals included), with nothing stored or run: a
    /// Flight SQL prepared statement's schema.
    pub async fn describe(&self, caller: &LakeCaller, sql: &str) -> Result<SchemaRef, QueryError> {
        let database = Self::default_database(caller);
        let (planned, _) = self
            .plan_for(caller, &database, sql, StringColumns::Views)
            .await?;
        Ok(result_schema(&planned.prepared))
    }

    /// Starts executing `planned`, the statement of `query`, on the engine
    /// runtime, its result to `result_path` (written first as
    /// `query.result_first` says); dropping the returned handle aborts it.
    pub(super) fn start_engine(
        &self,
        planned: Planned,
        query: &NewQuery,
        result_path: &str,
    ) -> Started {
        let Planned {
            context,
            prepared,
            access,
        } = planned;
        let lake = self.lake.clone();
        let id = query.id.clone();
        let limits = &self.limits;
        let target = ResultTarget {
            csv_path: result_path.to_string(),
            typed: match (
                limits.typed_results,
                query.result_first,
                limits.typed_results_while_running,
            ) {
                (false, _, _) => TypedCopies::Never,
                (true, ResultFirst::Arrow, _) => {
                    TypedCopies::First(FirstFormat::Arrow(limits.arrow_first_compression))
                }
                (true, ResultFirst::Parquet, _) => TypedCopies::First(FirstFormat::Parquet),
                (true, ResultFirst::Csv, false) => {
                    TypedCopies::OnRequest(limits.typed_results_compression)
                }
                (true, ResultFirst::Csv, true) => {
                    TypedCopies::WhileRunning(limits.typed_results_compression)
                }
            },
            in_row_limit: self.limits.result_in_store_bytes,
        };
        self.start_run(
            async move { execute(&context, prepared, &lake, &access, &id, &target).await },
        )
    }

    /// Starts `run`, a statement's execution, on the engine runtime.
    pub(super) fn start_run<F>(&self, run: F) -> Started
    where
        F: Future<Output = Result<Execution, QueryError>> + Send + 'static,
    {
        let task = self.engine.handle().spawn(run);
        let abort = AbortOnDrop(task.abort_handle());
        Started {
            task,
            _abort: abort,
        }
    }

    /// Runs `work`, a front end's statement of its own (the Postgres
    /// catalog's), on the engine runtime where statements run, never on the
    /// one serving connections; aborting the handle stops it.
    pub fn spawn_on_engine<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.engine.handle().spawn(work)
    }
}
