//! `QueryService`: the query lifecycle behind the five query endpoints.
//!
//! Submission classifies and plans the statement with the caller's access (so
//! SQL and permission errors answer the POST). At most `query.workers` queries
//! run at once per replica (admission control). When one of those slots is
//! free, the job is stored RUNNING under this replica's lease and the plan
//! made for the POST runs at once; otherwise it is stored QUEUED, and a worker
//! claims it with a lease when a slot frees, plans it again with the access
//! stored in the job, and runs it. Plans run on a dedicated runtime so a heavy
//! query cannot starve the HTTP server. Each query has its own memory pool (spilling past
//! `query.memory_limit_bytes`) and a time limit.
//!
//! Stops: a draining replica (`drain.rs`) stores new submissions QUEUED and
//! claims nothing; a query it still runs when the drain ends goes back to
//! QUEUED and another replica runs it again from the start (at most
//! `query.max_attempts` runs in all). A query RUNNING on a replica that died
//! (its lease ran out: killed, out of memory, crashed) is not run again but
//! ends FAILED, so a query that kills replicas cannot kill the next one.
//! Results are written per attempt and catalog changes are committed in the
//! same transaction as SUCCEEDED, so a rerun never duplicates rows.
//!
//! A Flight SQL read is streamed instead (`streamed.rs`): stored RUNNING when
//! its client asks for the rows, run by the same `run`, its batches sent to
//! the client as they come and no result file written.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use datafusion::arrow::datatypes::SchemaRef;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use url::Url;

use super::{
    QueryError,
    execute::{Execution, ResultTarget, execute, result_schema},
    page_tokens::PageTokens,
    prepare::{Prepared, Target, prepare},
    recent_results::RecentResults,
    result_parquet::ParquetConversions,
};
use crate::{
    auth::{Access, LakeCaller},
    clock::SharedClock,
    config::{MAX_CSV_LINK_LIFETIME_S, QueryConfig},
    drain::Drain,
    engine::{
        EngineError,
        columns::ResultColumn,
        distributed::Cluster,
        layout::StringColumns,
        runtime::EngineRuntime,
        session::{SessionScope, session_for},
        statement::{Action, StatementType, classify},
        table_writer::delete_paths,
    },
    lake::{self, Lake, ReadCache, presigned::ResultLinks, signing::LinkSigner},
    lease::Lease,
    observability::jobs,
    store::{
        Store,
        catalog::standard_databases,
        queries::{NewQuery, QueryJob},
    },
};

/// How often idle workers look for jobs submitted to other replicas and for
/// expired leases (jobs submitted here wake a worker at once).
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How often a replica looks for queries whose replica died.
const ABANDONED_CHECK_INTERVAL: Duration = Duration::from_secs(1);

const LINK_KEY: &str = "link-signing-key";

/// A planned statement, ready to execute.
struct Planned {
    context: datafusion::prelude::SessionContext,
    prepared: Prepared,
    access: Access,
}

/// A statement executing on the engine runtime; dropping it aborts it.
struct Started {
    task: tokio::task::JoinHandle<Result<Execution, QueryError>>,
    _abort: AbortOnDrop,
}

impl Started {
    async fn outcome(mut self) -> Result<Execution, QueryError> {
        self.wait().await
    }

    /// Its outcome; dropping this future before it is ready leaves the
    /// statement running (see `waiting.rs`).
    async fn wait(&mut self) -> Result<Execution, QueryError> {
        match (&mut self.task).await {
            Ok(outcome) => outcome,
            Err(e) => Err(QueryError::Internal(format!("query task: {e}"))),
        }
    }
}

/// What POST /query made.
#[derive(Debug)]
pub struct Submitted {
    pub id: String,
    /// The job in its final state, when it ended before `submit` returned
    /// (run before it was stored, or answered with a reused result).
    pub ended: Option<QueryJob>,
    /// The columns the result will have, as the engine types them.
    pub schema: SchemaRef,
}

/// One page of a SUCCEEDED query's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultPage {
    pub columns: Vec<ResultColumn>,
    /// True on the first page: the spec's header row comes first.
    pub first: bool,
    pub rows: Vec<Vec<Option<String>>>,
    pub next_token: Option<String>,
}

mod ends;
mod reading;
mod reuse;
mod runs_here;
mod streamed;
mod visible_catalog;
mod waiting;
mod worker;

pub use reading::ResultFile;
pub use runs_here::{CountedRun, RunsHere};
pub use streamed::{StreamPlan, StreamStart, StreamStop, StreamedRows};
pub use visible_catalog::{VisibleCatalog, columns_of};
pub use waiting::WireEnd;

pub use worker::ABANDONED_QUERY;

pub struct QueryService {
    store: Store,
    lake: Lake,
    clock: SharedClock,
    limits: QueryConfig,
    lease: Lease,
    engine: EngineRuntime,
    wake: Notify,
    /// Each end (or cancel) recorded on this replica, announced by its id.
    ended: ends::Ends,
    /// One permit per query that may run at once on this replica.
    slots: Arc<Semaphore>,
    /// The queries running here, per org and caller, stored or not yet.
    runs_here: Arc<RunsHere>,
    running: Mutex<HashMap<String, CancellationToken>>,
    /// Small results this replica wrote lately, by result path: their pages
    /// are served without reading the file back.
    recent_results: Mutex<RecentResults>,
    page_tokens: PageTokens,
    /// Presigned GETs of results on the storage endpoint (lake on disk).
    result_links: ResultLinks,
    /// Parquet copies of results being made on this replica.
    parquet_conversions: ParquetConversions,
    /// This replica's name as the holder of the leases it takes.
    holder: String,
    /// This replica's drain: no claims while it drains, hand-backs at its end.
    drain: Drain,
    metadata_cache: Arc<datafusion::execution::cache::cache_manager::FileMetadataCache>,
    /// Lake pages read by recent queries, for the next ones (`query.read_cache_bytes`).
    read_cache: Option<Arc<ReadCache>>,
    /// The workers big reads run on (`[distributed]`), when this replica
    /// coordinates.
    cluster: Option<Arc<Cluster>>,
}

impl std::fmt::Debug for QueryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryService")
            .field("holder", &self.holder)
            .finish()
    }
}

fn micros(clock: &SharedClock) -> i64 {
    clock.now().timestamp_micros()
}

impl QueryService {
    pub async fn new(
        store: Store,
        lake: Lake,
        clock: SharedClock,
        limits: QueryConfig,
        storage_endpoint: (Url, String),
        drain: Drain,
        cluster: Option<Arc<Cluster>>,
    ) -> anyhow::Result<Arc<Self>> {
        let key = store
            .shared_secret(LINK_KEY, LinkSigner::generate_key, micros(&clock))
            .await?;
        let signer = LinkSigner::new(key.as_bytes());
        let (endpoint, bucket) = storage_endpoint;
        let result_links = ResultLinks::new(&signer, endpoint, bucket, MAX_CSV_LINK_LIFETIME_S);
        let workers = limits.workers;
        let engine = EngineRuntime::new(workers)?;
        let metadata_cache = datafusion::execution::runtime_env::RuntimeEnv::default()
            .cache_manager
            .get_file_metadata_cache();
        let read_cache = lake.read_cache(limits.read_cache_bytes);
        Ok(Arc::new(Self {
            store,
            lake,
            lease: Lease::new(clock.clone(), limits.lease_s),
            clock,
            limits,
            engine,
            wake: Notify::new(),
            ended: ends::Ends::new(),
            slots: Arc::new(Semaphore::new(workers)),
            runs_here: Arc::default(),
            running: Mutex::new(HashMap::new()),
            recent_results: Mutex::new(RecentResults::default()),
            page_tokens: PageTokens::new(signer),
            result_links,
            parquet_conversions: ParquetConversions::default(),
            holder: uuid::Uuid::new_v4().simple().to_string(),
            drain,
            metadata_cache,
            read_cache,
            cluster,
        }))
    }

    /// Parquet footers read by this replica's queries, shared with the
    /// stages it runs for other replicas.
    pub fn metadata_cache(
        &self,
    ) -> Arc<datafusion::execution::cache::cache_manager::FileMetadataCache> {
        self.metadata_cache.clone()
    }

    /// Starts the worker pool, and the round that ends the queries of
    /// replicas that died; both stop when `stop` is cancelled.
    pub fn start(self: &Arc<Self>, stop: CancellationToken) {
        for _ in 0..self.limits.workers {
            let service = self.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = service.work() => {}
                }
            });
        }
        let service = self.clone();
        crate::periodic::spawn_every(ABANDONED_CHECK_INTERVAL, stop, move || {
            let service = service.clone();
            async move { service.end_abandoned().await }
        });
    }

    fn now(&self) -> i64 {
        micros(&self.clock)
    }

    fn default_database(caller: &LakeCaller) -> String {
        standard_databases(&caller.org, caller.zone.as_deref()).lake
    }

    /// Checks `sql` against `access` and plans it in a session of the org
    /// (or zone) whose unqualified names resolve in `database`: at submission,
    /// and again when a worker runs a stored job. `strings` says how it reads
    /// string columns: plain for a result streamed to its client as it is
    /// read, else views.
    async fn plan(
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

    /// `plan` with `caller`'s org, zone and access.
    async fn plan_for(
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

    /// POST /query: checks and plans `sql`, then runs it at once when a slot
    /// is free, else queues it. Returns the id.
    ///
    /// A read may instead be answered with an earlier result (`reuse.rs`):
    /// `reuse_max_age_s` is the caller's `Prefer: reuse=N`, else the org's
    /// setting applies.
    ///
    /// `wait` is the caller's `Prefer: wait` (what is left of it): a query
    /// that ends within `RUN_BEFORE_STORING` of it is stored once, at its end
    /// (`waiting.rs`), and comes back in `Submitted::ended`.
    pub async fn submit(
        self: &Arc<Self>,
        caller: &LakeCaller,
        sql: &str,
        database: Option<&str>,
        reuse_max_age_s: Option<u64>,
        wait: Option<Duration>,
    ) -> Result<Submitted, QueryError> {
        let database = database
            .map(str::to_string)
            .unwrap_or_else(|| Self::default_database(caller));
        let (planned, statement_type) = self
            .plan_for(caller, &database, sql, StringColumns::Views)
            .await?;
        let schema = result_schema(&planned.prepared);
        let id = uuid::Uuid::new_v4().to_string();
        let query = Self::new_query(caller, &id, sql, database, statement_type);
        if let Some(max_age_s) = self.reuse_max_age_s(&query, reuse_max_age_s)
            && let Some(reused) = self.reuse(&query, &planned, max_age_s).await?
        {
            return Ok(Submitted {
                id,
                ended: Some(reused),
                schema,
            });
        }
        // Run now when a slot is free and the org and caller are under their
        // caps (fair sharing); else queue, where the fairest job goes next.
        // A draining replica runs nothing new: the job waits for another.
        let admitted = match self.slots.clone().try_acquire_owned() {
            Ok(slot) if !self.drain.is_draining() => self
                .runs_here
                .try_enter(&query.org, &query.owner_sub, self.limits.caps())
                .map(|counted| (slot, counted)),
            _ => None,
        };
        let Some((slot, counted)) = admitted else {
            self.store.insert_query(&query, self.now()).await?;
            jobs::query_submitted(&id, &query.statement_type, true);
            self.wake.notify_one();
            return Ok(Submitted {
                id,
                ended: None,
                schema,
            });
        };
        // The plan starts now, while the job is stored: its result file and
        // any lake files stay unlisted until the job's end is recorded, which
        // needs the stored job and this replica's lease.
        let result_path = Self::result_path_of(&query, 1);
        let mut started = self.start_engine(planned, &id, &result_path);
        if let Some(wait) = wait
            && let Some(ended) = self
                .end_before_storing(&query, &mut started, &result_path, wait)
                .await?
        {
            return Ok(Submitted {
                id,
                ended: Some(ended),
                schema,
            });
        }
        let now = self.now();
        let job = match self
            .store
            .insert_running_query(&query, &self.holder, now, self.lease.until())
            .await
        {
            Ok(job) => job,
            Err(e) => {
                drop(started);
                delete_paths(self.lake.object_store().as_ref(), &[result_path]).await;
                return Err(e.into());
            }
        };
        jobs::query_submitted(&id, &query.statement_type, false);
        self.run_in_background(job, started, counted, slot);
        Ok(Submitted {
            id,
            ended: None,
            schema,
        })
    }

    /// Runs `job`, already started, on its own task holding `slot` until it
    /// ends; in the caller's span, so the run's log lines carry its request id.
    fn run_in_background(
        self: &Arc<Self>,
        job: QueryJob,
        started: Started,
        counted: runs_here::CountedRun,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let service = self.clone();
        tokio::spawn(
            async move {
                service.run(job, Some(started), counted).await;
                drop(slot);
            }
            .in_current_span(),
        );
    }

    /// The job of `caller`'s statement `sql`, with their access.
    fn new_query(
        caller: &LakeCaller,
        id: &str,
        sql: &str,
        database: String,
        statement_type: StatementType,
    ) -> NewQuery {
        NewQuery {
            id: id.to_string(),
            org: caller.org.clone(),
            zone: caller.zone.clone(),
            owner_sub: caller.sub.clone(),
            access_fingerprint: caller.grant.fingerprint(),
            sql: sql.to_string(),
            database,
            statement_type: statement_type.as_str().to_string(),
            access_json: serde_json::to_string(&caller.grant).expect("grant serialises"),
        }
    }

    fn result_path_of(query: &NewQuery, attempt: i64) -> String {
        lake::result_path(
            &query.org,
            query.zone.as_deref(),
            &query.owner_sub,
            &query.access_fingerprint,
            &query.id,
            attempt,
        )
    }

    /// Starts executing `planned` on the engine runtime, its result to
    /// `result_path`; dropping the returned handle aborts it.
    fn start_engine(&self, planned: Planned, id: &str, result_path: &str) -> Started {
        let Planned {
            context,
            prepared,
            access,
        } = planned;
        let lake = self.lake.clone();
        let id = id.to_string();
        let target = ResultTarget {
            csv_path: result_path.to_string(),
            typed: self
                .limits
                .typed_results
                .then_some(self.limits.typed_results_compression),
            in_row_limit: self.limits.result_in_store_bytes,
        };
        self.start_run(
            async move { execute(&context, prepared, &lake, &access, &id, &target).await },
        )
    }

    /// Starts `run`, a statement's execution, on the engine runtime.
    fn start_run<F>(&self, run: F) -> Started
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

    /// The storage endpoint's presigned result links (it serves them).
    pub fn result_links(&self) -> ResultLinks {
        self.result_links.clone()
    }
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
