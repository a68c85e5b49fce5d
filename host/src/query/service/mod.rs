//! The query service behind the query endpoints, Flight SQL and the Postgres
//! wire: two parts, and `QueryService`, the one handle the front ends hold.
//!
//! - **`QueryJobs`**, the job lifecycle (`jobs.rs` and the files it names):
//!   submission classifies and plans the statement with the caller's access
//!   (so SQL and permission errors answer the POST). At most `query.workers`
//!   queries run at once per replica (admission control). When one of those
//!   slots is free, the job is stored RUNNING under this replica's lease and
//!   the plan made for the POST runs at once; otherwise it is stored QUEUED,
//!   and a worker claims it with a lease when a slot frees, plans it again
//!   with the access stored in the job, and runs it. Plans run on a
//!   dedicated runtime so a heavy query cannot starve the HTTP server. Each
//!   query has its own memory pool (spilling past `query.memory_limit_bytes`)
//!   and a time limit. A Flight SQL or Postgres read is streamed instead
//!   (`streamed.rs`): stored RUNNING when its client asks for the rows, run
//!   by the same `run`, its batches sent to the client as they come and no
//!   result file written.
//! - **`QueryResults`**, result serving (`results.rs`, `result_file.rs`):
//!   pages and their tokens, whole results as files and signed links, the
//!   typed result of a wire statement, and recent small results in memory.
//!   It reads jobs it is handed and never changes one.
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
//! Why a facade: the three front ends share one door to queries (REST's,
//! Flight's and Postgres's states each hold one `Arc<QueryService>`), and
//! the two parts are built together (one link key signs page tokens and
//! result links; one engine runtime runs statements and Parquet copies).
//! `QueryService` holds both and has no logic of its own: each method hands
//! over to one part, or, for a request that needs both, finds the caller's
//! job with `QueryJobs` and serves its result with `QueryResults`.

use std::{sync::Arc, time::Duration};

use datafusion::{arrow::datatypes::SchemaRef, execution::cache::cache_manager::FileMetadataCache};
use tokio_util::sync::CancellationToken;
use url::Url;

use super::{
    QueryError,
    page_tokens::PageTokens,
    result::{CellSink, PageExtent, PageSource},
};
use crate::{
    auth::LakeCaller,
    clock::SharedClock,
    config::{MAX_CSV_LINK_LIFETIME_S, QueryConfig},
    drain::Drain,
    engine::distributed::Coordinator,
    lake::{Lake, ResultFormat, presigned::ResultLinks, signing::LinkSigner},
    runtime::EngineRuntime,
    store::{
        Store,
        queries::{Delivery, QueryJob},
    },
};

mod ends;
mod jobs;
mod result_file;
mod results;
mod reuse;
mod runs_here;
mod streamed;
mod submit;
mod visible_catalog;
mod waiting;
mod worker;

pub use jobs::QueryJobs;
pub use result_file::ResultFile;
pub use results::{QueryResults, ResultPage, WireEnd};
pub use runs_here::{CountedRun, RunsHere};
pub use streamed::{StreamPlan, StreamStart, StreamStop, StreamedRows};
pub use submit::{SubmitPreferences, Submitted};
pub use visible_catalog::{VisibleCatalog, columns_of};
pub use waiting::{WaitLimit, WaitedSubmission};
pub use worker::ABANDONED_QUERY;

/// The store's name of the replicas' shared key for page tokens and links.
const LINK_KEY: &str = "link-signing-key";

/// Whether `job` is `caller`'s: submitted by them, on this API (org and
/// zone). Anyone else is told it does not exist.
fn owns(caller: &LakeCaller, job: &QueryJob) -> bool {
    let q = &job.query;
    q.owner_sub == caller.sub && q.org == caller.org && q.zone == caller.zone
}

/// The one handle on queries: their lifecycle and their results.
pub struct QueryService {
    jobs: Arc<QueryJobs>,
    results: Arc<QueryResults>,
    /// The catalog callers list (`visible_catalog`).
    store: Store,
}

impl std::fmt::Debug for QueryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryService")
            .field("jobs", &self.jobs)
            .finish()
    }
}

impl QueryService {
    pub async fn new(
        store: Store,
        lake: Lake,
        clock: SharedClock,
        limits: QueryConfig,
        storage_endpoint: (Url, String),
        drain: Drain,
        cluster: Option<Arc<dyn Coordinator>>,
    ) -> anyhow::Result<Arc<Self>> {
        let key = store
            .shared_secret(
                LINK_KEY,
                LinkSigner::generate_key,
                clock.now().timestamp_micros(),
            )
            .await?;
        let signer = LinkSigner::new(key.as_bytes());
        let (endpoint, bucket) = storage_endpoint;
        let result_links = ResultLinks::new(&signer, endpoint, bucket, MAX_CSV_LINK_LIFETIME_S);
        let engine = Arc::new(EngineRuntime::new(limits.workers)?);
        let results = Arc::new(QueryResults::new(results::ResultsParts {
            store: store.clone(),
            lake: lake.clone(),
            clock: clock.clone(),
            link_lifetime_s: limits.csv_link_lifetime_s,
            engine: engine.clone(),
            page_tokens: PageTokens::new(signer),
            result_links,
            typed_copies: limits
                .typed_results
                .then_some(limits.typed_results_compression),
        }));
        let jobs = QueryJobs::new(
            jobs::JobsParts {
                store: store.clone(),
                lake,
                clock,
                limits,
                engine,
                drain,
                cluster,
            },
            results.clone(),
        );
        Ok(Arc::new(Self {
            jobs,
            results,
            store,
        }))
    }

    /// `QueryJobs::start`: the worker pool and the round that ends the jobs
    /// of replicas that died.
    pub fn start(&self, stop: CancellationToken) {
        self.jobs.start(stop);
    }

    /// `QueryJobs::metadata_cache`.
    pub fn metadata_cache(&self) -> Arc<FileMetadataCache> {
        self.jobs.metadata_cache()
    }

    /// `QueryJobs::spawn_on_engine`.
    pub fn spawn_on_engine<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.jobs.spawn_on_engine(work)
    }

    /// `QueryJobs::describe`.
    pub async fn describe(&self, caller: &LakeCaller, sql: &str) -> Result<SchemaRef, QueryError> {
        self.jobs.describe(caller, sql).await
    }

    /// `QueryJobs::submit`.
    pub async fn submit(
        &self,
        caller: &LakeCaller,
        sql: &str,
        database: Option<&str>,
        preferences: SubmitPreferences,
        wait: Option<Duration>,
    ) -> Result<Submitted, QueryError> {
        self.jobs
            .submit(caller, sql, database, preferences, wait)
            .await
    }

    /// `QueryJobs::submit_and_wait`: POST /query below HTTP.
    pub async fn submit_and_wait(
        &self,
        caller: &LakeCaller,
        sql: &str,
        database: Option<&str>,
        preferences: SubmitPreferences,
        wait: Option<WaitLimit>,
    ) -> Result<WaitedSubmission, QueryError> {
        self.jobs
            .submit_and_wait(caller, sql, database, preferences, wait)
            .await
    }

    /// `QueryJobs::get`: the caller's own query, or NotFound.
    pub async fn get(&self, caller: &LakeCaller, id: &str) -> Result<QueryJob, QueryError> {
        self.jobs.get(caller, id).await
    }

    /// `QueryJobs::cancel`.
    pub async fn cancel(&self, caller: &LakeCaller, id: &str) -> Result<bool, QueryError> {
        self.jobs.cancel(caller, id).await
    }

    /// `QueryJobs::wait_for_end`.
    pub async fn wait_for_end(
        &self,
        caller: &LakeCaller,
        id: &str,
        within: Duration,
    ) -> Result<Option<QueryJob>, QueryError> {
        self.jobs.wait_for_end(caller, id, within).await
    }

    /// Waits for the caller's query `id` to end, however long it runs (the
    /// waiting call is dropped when its client goes away), and opens its
    /// typed result (`QueryResults::wire_end`).
    pub async fn typed_result_at_end(
        &self,
        caller: &LakeCaller,
        id: &str,
    ) -> Result<WireEnd, QueryError> {
        let job = self.jobs.wait_for_final(caller, id).await?;
        self.results.wire_end(caller, &job).await
    }

    /// `QueryJobs::plan_streamed`.
    pub async fn plan_streamed(
        &self,
        caller: &LakeCaller,
        sql: &str,
    ) -> Result<StreamPlan, QueryError> {
        self.jobs.plan_streamed(caller, sql).await
    }

    /// `QueryJobs::run_streamed`.
    pub async fn run_streamed(
        &self,
        caller: &LakeCaller,
        id: &str,
        sql: &str,
    ) -> Result<StreamStart, QueryError> {
        self.jobs.run_streamed(caller, id, sql).await
    }

    /// `QueryJobs::stream_if_read`.
    pub async fn stream_if_read(
        &self,
        caller: &LakeCaller,
        sql: &str,
        delivery: Delivery,
    ) -> Result<Option<StreamedRows>, QueryError> {
        self.jobs.stream_if_read(caller, sql, delivery).await
    }

    /// `QueryJobs::cancel_streamed`.
    pub async fn cancel_streamed(
        &self,
        caller: &LakeCaller,
        id: &str,
        sql: &str,
    ) -> Result<bool, QueryError> {
        self.jobs.cancel_streamed(caller, id, sql).await
    }

    /// GET /query/{id}/result: the caller's query `id`, then its page
    /// (`QueryResults::page_source`).
    pub async fn page_source(
        &self,
        caller: &LakeCaller,
        id: &str,
        next_token: Option<&str>,
    ) -> Result<PageSource, QueryError> {
        let job = self.jobs.get(caller, id).await?;
        self.results.page_source(caller, &job, next_token).await
    }

    /// A page of `job`, just read from the store or stored (the POST that
    /// waited for it), without reading the job again.
    pub async fn page_source_of(
        &self,
        caller: &LakeCaller,
        job: &QueryJob,
        next_token: Option<&str>,
    ) -> Result<PageSource, QueryError> {
        self.results.page_source(caller, job, next_token).await
    }

    /// `QueryResults::scan_page`.
    pub async fn scan_page(
        &self,
        page: &PageSource,
        sink: &mut impl CellSink,
    ) -> Result<PageExtent, QueryError> {
        self.results.scan_page(page, sink).await
    }

    /// The caller's query `id`, then its whole result in `format`
    /// (`QueryResults::result_file`).
    pub async fn result_file(
        &self,
        caller: &LakeCaller,
        id: &str,
        format: ResultFormat,
    ) -> Result<ResultFile, QueryError> {
        let job = self.jobs.get(caller, id).await?;
        self.results.result_file(caller, &job, format).await
    }

    /// The caller's query `id`, then a signed link to its whole result in
    /// `format` (`QueryResults::result_link`).
    pub async fn result_link(
        &self,
        caller: &LakeCaller,
        id: &str,
        format: ResultFormat,
    ) -> Result<Url, QueryError> {
        let job = self.jobs.get(caller, id).await?;
        self.results.result_link(caller, &job, format).await
    }

    /// `QueryResults::result_links`: the storage endpoint serves them.
    pub fn result_links(&self) -> ResultLinks {
        self.results.result_links()
    }
}
