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
//! Restarts: a job RUNNING on a replica that died keeps its lease until it
//! expires; then any replica claims it again and runs it from the start (at
//! most `query.max_attempts` runs in all). Results are written per attempt and
//! catalog changes are committed in the same transaction as SUCCEEDED, so a
//! rerun never duplicates rows and no query is lost.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use url::Url;

use super::{
    AccessGrant, Denial, LakeCaller, QueryError,
    execute::{Execution, Prepared, Target, execute, prepare},
    result::{PAGE_ROWS, PageCursor, ResultColumn, page_from_bytes, read_page},
    session::{SessionError, SessionScope, session_for},
    statement::classify,
    table_writer::delete_paths,
};
use crate::{
    clock::SharedClock,
    config::{MAX_CSV_LINK_LIFETIME_S, QueryConfig},
    lake::{self, Lake, presigned::ResultLinks, signing::LinkSigner},
    store::{
        Store,
        catalog::standard_databases,
        queries::{Finished, NewQuery, QueryJob, QueryOutcome, QueryState},
    },
};

/// How often idle workers look for jobs submitted to other replicas and for
/// expired leases (jobs submitted here wake a worker at once).
const POLL_INTERVAL: Duration = Duration::from_millis(250);

const LINK_KEY: &str = "link-signing-key";

/// Bytes of small results kept at most; the oldest go first.
const RECENT_RESULTS_BYTES: usize = 32 * 1024 * 1024;

/// Small result CSVs in the order they were written, up to
/// `RECENT_RESULTS_BYTES` in all. A path names one attempt of one query for
/// one user and access, so an entry is only ever read in place of its file.
#[derive(Default)]
struct RecentResults {
    by_path: HashMap<String, Bytes>,
    order: std::collections::VecDeque<String>,
    bytes: usize,
}

impl RecentResults {
    fn insert(&mut self, path: String, csv: Bytes) {
        if self.by_path.contains_key(&path) {
            return;
        }
        self.bytes += csv.len();
        self.order.push_back(path.clone());
        self.by_path.insert(path, csv);
        while self.bytes > RECENT_RESULTS_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.by_path.remove(&oldest) {
                self.bytes -= gone.len();
            }
        }
    }

    fn get(&self, path: &str) -> Option<Bytes> {
        self.by_path.get(path).cloned()
    }
}

/// A planned statement, ready to execute.
struct Planned {
    context: datafusion::prelude::SessionContext,
    prepared: Prepared,
    access: crate::auth::Access,
}

/// A statement executing on the engine runtime; dropping it aborts it.
struct Started {
    task: tokio::task::JoinHandle<Result<Execution, QueryError>>,
    _abort: AbortOnDrop,
}

impl Started {
    async fn outcome(self) -> Result<Execution, QueryError> {
        let Started { task, _abort } = self;
        match task.await {
            Ok(outcome) => outcome,
            Err(e) => Err(QueryError::Internal(format!("query task: {e}"))),
        }
    }
}

/// The runtime queries execute on, apart from the one serving HTTP.
struct EngineRuntime(Option<tokio::runtime::Runtime>);

impl EngineRuntime {
    /// One thread per core for each worker: a query uses up to one thread per
    /// core (its partitions), and one query that never yields must not hold
    /// the threads another worker's query needs; the OS shares the cores.
    fn new(workers: usize) -> std::io::Result<Self> {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let threads = (cores * workers).clamp(cores, 64);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("lakehost-query")
            .enable_all()
            .build()?;
        Ok(Self(Some(runtime)))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("runtime lives until drop").handle()
    }
}

impl Drop for EngineRuntime {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which is not allowed inside another
        // runtime (tests drop the service from async code).
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
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

pub struct QueryService {
    store: Store,
    lake: Lake,
    clock: SharedClock,
    limits: QueryConfig,
    engine: EngineRuntime,
    wake: Notify,
    /// One permit per query that may run at once on this replica.
    slots: Arc<Semaphore>,
    running: Mutex<HashMap<String, CancellationToken>>,
    /// Small results this replica wrote lately, by result path: their pages
    /// are served without reading the file back.
    recent_results: Mutex<RecentResults>,
    signer: LinkSigner,
    /// Presigned GETs of results on the storage endpoint (lake on disk).
    result_links: ResultLinks,
    worker_id: String,
    metadata_cache: Arc<datafusion::execution::cache::cache_manager::FileMetadataCache>,
}

impl std::fmt::Debug for QueryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryService")
            .field("worker_id", &self.worker_id)
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
        Ok(Arc::new(Self {
            store,
            lake,
            clock,
            limits,
            engine,
            wake: Notify::new(),
            slots: Arc::new(Semaphore::new(workers)),
            running: Mutex::new(HashMap::new()),
            recent_results: Mutex::new(RecentResults::default()),
            signer,
            result_links,
            worker_id: uuid::Uuid::new_v4().simple().to_string(),
            metadata_cache,
        }))
    }

    /// Starts the worker pool; the workers stop when `stop` is cancelled.
    pub fn start_workers(self: &Arc<Self>, stop: CancellationToken) {
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
    }

    fn now(&self) -> i64 {
        micros(&self.clock)
    }

    fn default_database(caller: &LakeCaller) -> String {
        standard_databases(&caller.org, caller.zone.as_deref()).lake
    }

    async fn session(
        &self,
        org: &str,
        zone: Option<&str>,
        access: &crate::auth::Access,
        default_database: &str,
        memory_limit: Option<usize>,
    ) -> Result<datafusion::prelude::SessionContext, QueryError> {
        session_for(
            &self.store,
            &self.lake,
            &SessionScope {
                org,
                zone,
                access,
                default_database,
                memory_limit,
                metadata_cache: Some(self.metadata_cache.clone()),
            },
        )
        .await
        .map_err(|e| match e {
            SessionError::UnknownDatabase(name) => {
                QueryError::Invalid(format!("Database '{name}' does not exist"))
            }
            other => QueryError::Internal(other.to_string()),
        })
    }

    /// POST /query: checks and plans `sql`, then runs it at once when a slot
    /// is free, else queues it. Returns the id.
    pub async fn submit(
        self: &Arc<Self>,
        caller: &LakeCaller,
        sql: &str,
        database: Option<&str>,
    ) -> Result<String, QueryError> {
        let classified = classify(sql).map_err(|e| QueryError::Invalid(e.to_string()))?;
        let database = database
            .map(str::to_string)
            .unwrap_or_else(|| Self::default_database(caller));
        let access = caller.grant.access();
        let context = self
            .session(
                &caller.org,
                caller.zone.as_deref(),
                &access,
                &database,
                Some(self.limits.memory_limit_bytes as usize),
            )
            .await?;
        let target = Target {
            store: &self.store,
            org: &caller.org,
            zone: caller.zone.as_deref(),
            default_database: &database,
            access: &access,
        };
        let prepared = prepare(&context, &target, sql, &classified, self.now()).await?;
        let id = uuid::Uuid::new_v4().to_string();
        let query = NewQuery {
            id: id.clone(),
            org: caller.org.clone(),
            zone: caller.zone.clone(),
            owner_sub: caller.sub.clone(),
            access_fingerprint: caller.grant.fingerprint(),
            sql: sql.to_string(),
            database,
            statement_type: classified.statement_type.as_str().to_string(),
            access_json: serde_json::to_string(&caller.grant).expect("grant serialises"),
        };
        // Run now when a slot is free and the org and caller are under their
        // caps (fair sharing); else queue, where the fairest job goes next.
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) if self.under_caps(&query).await? => Some(slot),
            _ => None,
        };
        let Some(slot) = slot else {
            self.store.insert_query(&query, self.now()).await?;
            self.wake.notify_one();
            return Ok(id);
        };
        // The plan starts now, while the job is stored: its result file and
        // any lake files stay unlisted until the job's end is recorded, which
        // needs the stored job and this replica's lease.
        let result_path = Self::result_path_of(&query, 1);
        let started = self.start_engine(
            Planned {
                context,
                prepared,
                access,
            },
            &id,
            &result_path,
        );
        let now = self.now();
        let job = match self
            .store
            .insert_running_query(&query, &self.worker_id, now, now + self.lease_micros())
            .await
        {
            Ok(job) => job,
            Err(e) => {
                drop(started);
                delete_paths(self.lake.object_store().as_ref(), &[result_path]).await;
                return Err(e.into());
            }
        };
        let service = self.clone();
        tokio::spawn(async move {
            service.run(job, Some(started)).await;
            drop(slot);
        });
        Ok(id)
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

    /// Starts executing `planned` on the engine runtime; dropping the
    /// returned handle aborts it.
    fn start_engine(&self, planned: Planned, id: &str, result_path: &str) -> Started {
        let Planned {
            context,
            prepared,
            access,
        } = planned;
        let lake = self.lake.clone();
        let id = id.to_string();
        let path = result_path.to_string();
        let task = self
            .engine
            .handle()
            .spawn(async move { execute(&context, prepared, &lake, &access, &id, &path).await });
        let abort = AbortOnDrop(task.abort_handle());
        Started {
            task,
            _abort: abort,
        }
    }

    /// The caller's own query on this API, or NotFound (also for another
    /// user's query: its existence is not revealed).
    pub async fn get(&self, caller: &LakeCaller, id: &str) -> Result<QueryJob, QueryError> {
        let not_found = || QueryError::NotFound(id.to_string());
        let job = self.store.query_job(id).await?.ok_or_else(not_found)?;
        let q = &job.query;
        if q.owner_sub != caller.sub || q.org != caller.org || q.zone != caller.zone {
            return Err(not_found());
        }
        Ok(job)
    }

    /// DELETE /query: cancels a QUEUED or RUNNING query and stops its work; a
    /// final query stays as it is.
    pub async fn cancel(&self, caller: &LakeCaller, id: &str) -> Result<(), QueryError> {
        let job = self.get(caller, id).await?;
        if job.state.is_final() {
            return Ok(());
        }
        if self.store.cancel_query(id, self.now()).await? {
            let token = self
                .running
                .lock()
                .expect("running map lock")
                .get(id)
                .cloned();
            if let Some(token) = token {
                token.cancel();
            }
        }
        Ok(())
    }

    /// A SUCCEEDED query the caller may still read (same roles and service
    /// clients as at submission).
    async fn readable(&self, caller: &LakeCaller, id: &str) -> Result<QueryJob, QueryError> {
        let job = self.get(caller, id).await?;
        match job.state {
            QueryState::Succeeded => {}
            QueryState::Queued | QueryState::Running => {
                return Err(QueryError::NoResult(format!(
                    "Query has not yet finished. Current state: {}",
                    job.state.as_str()
                )));
            }
            QueryState::Failed | QueryState::Cancelled => {
                return Err(QueryError::NoResult(format!(
                    "Query did not succeed. Current state: {}",
                    job.state.as_str()
                )));
            }
        }
        if job.query.access_fingerprint != caller.grant.fingerprint() {
            return Err(QueryError::Denied(Denial::Data));
        }
        Ok(job)
    }

    fn page_token(&self, id: &str, cursor: PageCursor) -> String {
        let (row, offset) = (cursor.row.to_string(), cursor.offset.to_string());
        let signature = self.signer.sign("page", &[id, &row, &offset]);
        format!("{row}.{offset}.{}", &signature[..32])
    }

    fn parse_page_token(&self, id: &str, token: &str) -> Result<PageCursor, QueryError> {
        let mut parts = token.splitn(3, '.');
        let (Some(row), Some(offset), Some(signature)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(QueryError::BadPageToken);
        };
        let full = self.signer.sign("page", &[id, row, offset]);
        let matches = signature.len() == 32
            && bool::from(subtle::ConstantTimeEq::ct_eq(
                &full.as_bytes()[..32],
                signature.as_bytes(),
            ));
        if !matches {
            return Err(QueryError::BadPageToken);
        }
        Ok(PageCursor {
            row: row.parse().map_err(|_| QueryError::BadPageToken)?,
            offset: offset.parse().map_err(|_| QueryError::BadPageToken)?,
        })
    }

    /// GET /query/{id}/result: the first page, or the one `next_token` names.
    pub async fn page(
        &self,
        caller: &LakeCaller,
        id: &str,
        next_token: Option<&str>,
    ) -> Result<ResultPage, QueryError> {
        let job = self.readable(caller, id).await?;
        let (Some(path), Some(bytes), Some(columns)) = (
            job.result_path.as_deref(),
            job.result_bytes,
            job.result_columns_json.as_deref(),
        ) else {
            return Err(QueryError::Internal(format!("query {id} has no result")));
        };
        let columns: Vec<ResultColumn> = serde_json::from_str(columns)
            .map_err(|e| QueryError::Internal(format!("result columns: {e}")))?;
        let cursor = match next_token {
            Some(token) => self.parse_page_token(id, token)?,
            None => PageCursor { row: 0, offset: 0 },
        };
        let kept = self
            .recent_results
            .lock()
            .expect("recent results lock")
            .get(path);
        let page = match kept {
            Some(csv) => page_from_bytes(&csv, cursor, PAGE_ROWS),
            None => {
                read_page(
                    self.lake.object_store().as_ref(),
                    path,
                    bytes as u64,
                    cursor,
                    PAGE_ROWS,
                )
                .await
            }
        }
        .map_err(|e| QueryError::Internal(format!("result page: {e}")))?;
        Ok(ResultPage {
            columns,
            first: cursor.offset == 0,
            rows: page.rows,
            next_token: page.next.map(|next| self.page_token(id, next)),
        })
    }

    /// GET /query/{id}/csv: a signed link to the whole result, valid for
    /// `query.csv_link_lifetime_s`: S3's own presigned GET when the lake is on
    /// S3, else the storage endpoint's presigned GET (`lake::presigned`).
    pub async fn csv_link(&self, caller: &LakeCaller, id: &str) -> Result<Url, QueryError> {
        let job = self.readable(caller, id).await?;
        let path = job
            .result_path
            .ok_or_else(|| QueryError::Internal(format!("query {id} has no result")))?;
        let lifetime = Duration::from_secs(self.limits.csv_link_lifetime_s);
        let presigned = self
            .lake
            .presigned_get(&path, lifetime)
            .await
            .map_err(|e| QueryError::Internal(format!("presigning the result: {e}")))?;
        match presigned {
            Some(url) => Ok(url),
            None => self
                .result_links
                .sign(&path, self.limits.csv_link_lifetime_s, self.clock.now())
                .map_err(|e| QueryError::Internal(format!("presigning the result: {e}"))),
        }
    }

    /// The storage endpoint's presigned result links (it serves them).
    pub fn result_links(&self) -> ResultLinks {
        self.result_links.clone()
    }

    /// Whether this replica runs fewer than the caps' queries of the job's
    /// org and caller.
    async fn under_caps(&self, query: &NewQuery) -> Result<bool, QueryError> {
        let caps = self.limits.caps();
        let (of_org, of_caller) = self
            .store
            .running_queries_of(&self.worker_id, &query.org, &query.owner_sub)
            .await?;
        Ok(of_org < caps.per_org && of_caller < caps.per_caller)
    }

    /// One worker: wait for a free slot, claim, run, repeat; sleep when there
    /// is nothing to do.
    async fn work(self: Arc<Self>) {
        loop {
            let slot: OwnedSemaphorePermit = match self.slots.clone().acquire_owned().await {
                Ok(slot) => slot,
                Err(_) => return,
            };
            let now = self.now();
            let lease_until = now + self.lease_micros();
            match self
                .store
                .claim_query(&self.worker_id, now, lease_until, self.limits.caps())
                .await
            {
                Ok(Some(job)) => {
                    self.run(job, None).await;
                    drop(slot);
                }
                Ok(None) => {
                    drop(slot);
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep(POLL_INTERVAL) => {}
                    }
                }
                Err(e) => {
                    drop(slot);
                    tracing::warn!(error = %e, "claiming a query failed");
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
            }
        }
    }

    fn lease(&self) -> Duration {
        Duration::from_secs(self.limits.lease_s)
    }

    fn lease_micros(&self) -> i64 {
        self.lease().as_micros() as i64
    }

    /// Renews the lease every third of its length; returns when it is lost
    /// (the query was cancelled elsewhere, or another worker took it over).
    async fn hold_lease(&self, id: &str) {
        let mut tick = tokio::time::interval(self.lease() / 3);
        tick.tick().await;
        loop {
            tick.tick().await;
            let until = self.now() + self.lease_micros();
            match self
                .store
                .renew_query_lease(id, &self.worker_id, until)
                .await
            {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => tracing::warn!(query = id, error = %e, "lease renewal failed"),
            }
        }
    }

    /// Runs a job this worker holds: `started` when the submission's plan is
    /// already executing, else planned again from the job and started.
    async fn run(self: &Arc<Self>, job: QueryJob, started: Option<Started>) {
        let id = job.query.id.clone();
        let span = tracing::info_span!("query", query = %id, attempt = job.attempts);
        let _guard = span.enter();
        if job.attempts > i64::from(self.limits.max_attempts) {
            let reason = format!(
                "The query was interrupted {} times (server restarts) and was not run again.",
                job.attempts - 1
            );
            self.record(&id, Err(QueryError::Failed(reason)), None)
                .await;
            return;
        }
        let token = CancellationToken::new();
        self.running
            .lock()
            .expect("running map lock")
            .insert(id.clone(), token.clone());
        let result_path = Self::result_path_of(&job.query, job.attempts);
        let time_limit = Duration::from_secs(self.limits.time_limit_s);
        let outcome = tokio::select! {
            outcome = self.run_job(&job, started, &result_path) => Some(outcome),
            _ = token.cancelled() => None,
            _ = self.hold_lease(&id) => None,
            _ = tokio::time::sleep(time_limit) => Some(Err(QueryError::Failed(format!(
                "Query exhausted its time limit of {} seconds.",
                self.limits.time_limit_s
            )))),
        };
        self.running.lock().expect("running map lock").remove(&id);
        match outcome {
            Some(outcome) => self.record(&id, outcome, Some(&result_path)).await,
            None => {
                tracing::info!("query stopped: cancelled or taken over");
                delete_paths(self.lake.object_store().as_ref(), &[result_path]).await;
            }
        }
    }

    /// Plans the job with the submitter's access (store work, on this runtime)
    /// and starts it on the engine runtime, unless `started` already is; then
    /// waits for it. Dropping this future (cancel, time limit) aborts it.
    async fn run_job(
        &self,
        job: &QueryJob,
        started: Option<Started>,
        result_path: &str,
    ) -> Result<Execution, QueryError> {
        let started = match started {
            Some(started) => started,
            None => {
                let planned = self.plan_job(job).await?;
                self.start_engine(planned, &job.query.id, result_path)
            }
        };
        started.outcome().await
    }

    /// Plans a claimed job again, with the access stored in it.
    async fn plan_job(&self, job: &QueryJob) -> Result<Planned, QueryError> {
        let q = &job.query;
        let grant: AccessGrant = serde_json::from_str(&q.access_json)
            .map_err(|e| QueryError::Internal(format!("stored access: {e}")))?;
        let access = grant.access();
        let classified = classify(&q.sql).map_err(|e| QueryError::Invalid(e.to_string()))?;
        let context = self
            .session(
                &q.org,
                q.zone.as_deref(),
                &access,
                &q.database,
                Some(self.limits.memory_limit_bytes as usize),
            )
            .await?;
        let target = Target {
            store: &self.store,
            org: &q.org,
            zone: q.zone.as_deref(),
            default_database: &q.database,
            access: &access,
        };
        let prepared = prepare(&context, &target, &q.sql, &classified, self.now())
            .await
            .map_err(|e| match e {
                QueryError::Invalid(message) => QueryError::Failed(message),
                other => other,
            })?;
        Ok(Planned {
            context,
            prepared,
            access,
        })
    }

    /// Records a run's end; deletes files that did not become part of the lake.
    async fn record(
        &self,
        id: &str,
        outcome: Result<Execution, QueryError>,
        result_path: Option<&str>,
    ) {
        let store = self.lake.object_store();
        let (job_outcome, write, staged, small_result) = match outcome {
            Ok(execution) => (
                QueryOutcome::Succeeded {
                    result_path: result_path.unwrap_or_default().to_string(),
                    rows: execution.rows as i64,
                    bytes: execution.bytes as i64,
                    columns_json: serde_json::to_string(&execution.columns)
                        .expect("columns serialise"),
                },
                execution.write,
                execution.staged,
                execution.small_result,
            ),
            Err(error) => {
                if let QueryError::Internal(why) = &error {
                    tracing::error!(error = %why, "query failed unexpectedly");
                }
                (
                    QueryOutcome::Failed {
                        reason: error.reason(),
                    },
                    crate::store::queries::CatalogWrite::None,
                    Vec::new(),
                    None,
                )
            }
        };
        let succeeded = matches!(job_outcome, QueryOutcome::Succeeded { .. });
        // Kept before the end is recorded, so the first GET after SUCCEEDED finds it.
        if let (Some(csv), Some(path)) = (small_result, result_path) {
            self.recent_results
                .lock()
                .expect("recent results lock")
                .insert(path.to_string(), csv);
        }
        match self
            .store
            .finish_query(id, &self.worker_id, &job_outcome, &write, self.now())
            .await
        {
            Ok(Finished::Recorded) => {
                if !succeeded && let Some(path) = result_path {
                    delete_paths(store.as_ref(), &[path.to_string()]).await;
                }
            }
            Ok(Finished::Lost) => {
                delete_paths(store.as_ref(), &staged).await;
                if let Some(path) = result_path {
                    delete_paths(store.as_ref(), &[path.to_string()]).await;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "recording the end of a query failed");
                delete_paths(store.as_ref(), &staged).await;
                // A catalog conflict (say, a table created meanwhile) fails the query.
                let failed = QueryOutcome::Failed {
                    reason: format!("The query's changes could not be committed: {e}"),
                };
                let none = crate::store::queries::CatalogWrite::None;
                let _ = self
                    .store
                    .finish_query(id, &self.worker_id, &failed, &none, self.now())
                    .await;
            }
        }
    }
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
