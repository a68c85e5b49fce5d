//! The server's metrics: every name, every label and every place a figure is
//! recorded goes through this module, so the table below is the whole list.
//! `GET /metrics` on `server.metrics_listen` renders them in the Prometheus
//! text format (`metrics` facade, `metrics-exporter-prometheus`).
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `lakehost_http_requests_total` | counter | `api`, `method`, `route`, `status` | requests answered on the API listener |
//! | `lakehost_http_request_duration_seconds` | histogram | `api`, `method`, `route`, `status` | time to the response head (a streamed body may take longer) |
//! | `lakehost_queries_submitted_total` | counter | `statement_type`, `admission` | queries accepted: `started` at once, `queued`, or answered with a `reused` result |
//! | `lakehost_queries_ended_total` | counter | `state`, `statement_type` | queries that ended `SUCCEEDED`, `FAILED` or `CANCELLED` |
//! | `lakehost_query_result_bytes_total` | counter | `statement_type` | bytes of the result files SUCCEEDED queries wrote (the CSV, or the Arrow or Parquet file of one written typed first) |
//! | `lakehost_query_scanned_bytes_total` | counter | | parquet bytes read by statements that ran to their end (DataFusion's `bytes_scanned`) |
//! | `lakehost_read_cache_bytes_total` | counter | `outcome` | bytes of lake file ranges queries read: `hit` (kept in memory from an earlier read, `query.read_cache_bytes`) or `miss` (read from the lake) |
//! | `lakehost_jobs_queued` | gauge | `kind` | `query`: QUEUED; `load_commit`: PROCESSING, held by no worker (store-wide) |
//! | `lakehost_jobs_running` | gauge | `kind` | `query`, `load_commit`, `daily_run` held by a replica (store-wide) |
//! | `lakehost_load_commits_total` | counter | `outcome`, `error_type` | commits ended `SUCCESS` (`error_type="none"`) or `FAIL` |
//! | `lakehost_pipeline_step_duration_seconds` | histogram | `pipeline`, `step`, `outcome` | one run of one manifest step (`passed`, `failed`, `error`, `halted`) |
//! | `lakehost_daily_runs_ended_total` | counter | `status` | daily runs ended `SUCCEEDED`, `FAILED`, `TIMED_OUT`, `ABORTED` |
//! | `lakehost_lease_takeovers_total` | counter | `kind`, `how` | a `query` or `load_commit` another holder had started was run again after a drain `handed_back`, or ended because its `holder_died` |
//! | `lakehost_jwks_fetches_total` | counter | `reason`, `outcome` | JWKS (and discovery) fetches: `stale` keys or an `unknown_kid`; `ok` or `failed` |
//! | `lakehost_token_rejections_total` | counter | `reason` | bearer tokens refused, by a fixed reason (`TokenError::reason`, `missing_bearer`, `insufficient_scope`, `invalid_claims`: a verified token without a claim a query or load endpoint reads) |
//! | `lakehost_idempotent_requests_total` | counter | `operation`, `outcome` | requests with an `Idempotency-Key` (`submit_query`, `create_load`, `commit_load`): `first` (claimed the key and ran), `replayed` (answered with the first answer), `conflict` (409: the key is another request's, or still in progress), `error` (the store failed) |
//! | `lakehost_flight_calls_total` | counter | `call`, `outcome` | Arrow Flight SQL calls: the RPC (`GetFlightInfo`, `DoGet`, `DoAction`, `Handshake`, ..., `unknown`) and its gRPC status when it ended at once (`ok` when it answered, or began streaming; `permission_denied`, `unauthenticated`, ...) |
//! | `lakehost_pg_connections_total` | counter | `outcome` | Postgres connections: `ready` (authenticated), `over_cap`, `tls_failed`, `refused` (FATAL at startup: plain, unknown database, bad secret), `cancel_request`, `abandoned` (closed or timed out before authenticating) |
//! | `lakehost_pg_statements_total` | counter | `kind`, `sqlstate` | Postgres statements: `query` (a job), `catalog` (psql's catalog queries), `session` (BEGIN, SET, SHOW, ...); `00000` or the error's SQLSTATE |
//! | `lakehost_distributed_reads_total` | counter | `plan` | reads past `distributed.min_scan_bytes` or `min_scan_files` on a coordinating replica: `distributed` (cut into stages for workers), `local` (datafusion-distributed kept it whole) or `no_workers` (no configured worker answered: it ran here) |
//! | `lakehost_cluster_tasks_total` | counter | | stages of other replicas' distributed reads this worker started |
//! | `lakehost_cluster_moved_bytes_total` | counter | `boundary` | bytes this coordinator's distributed reads moved between processes, as Arrow in memory before compression: `shuffle` (rows re-partitioned between stages), `coalesce` (a stage's tasks gathered into one), `broadcast` (a small side sent to every task) |
//! | `lakehost_cluster_refusals_total` | counter | `reason` | calls to this worker refused: `secret` (missing or wrong cluster secret, before any plan is read) or `plan` (a stage holding more than reads) |
//! | `lakehost_store_pool_connections` | gauge | `state` | this replica's metadata-store connections, `open` and `idle` |
//!
//! Labels come from closed or capped sets (`labels.rs`): the route is the
//! template (`/v2/query/{query_id}`, `unmatched` for 404s), never the path;
//! step names are capped; no label carries SQL, an id, a token, a table name
//! or an org (orgs are configured, hence bounded, but a label per tenant
//! multiplies every series by the tenant count; per-org figures are in the
//! store and the logs). The gauges are sampled when `/metrics` is scraped.
//!
//! The recorder is global, one per process, installed by the first server
//! built (`install`); later servers in the same process (tests) share it.

use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

use super::labels::{self, ApiLabel, BoundedNames, MAX_STEP_NAMES};
use crate::store::{Store, dailyrun::RunStatus, queries::QueryState};

const HTTP_REQUESTS: &str = "lakehost_http_requests_total";
const HTTP_DURATION: &str = "lakehost_http_request_duration_seconds";
const QUERIES_SUBMITTED: &str = "lakehost_queries_submitted_total";
const QUERIES_ENDED: &str = "lakehost_queries_ended_total";
const QUERY_RESULT_BYTES: &str = "lakehost_query_result_bytes_total";
const QUERY_SCANNED_BYTES: &str = "lakehost_query_scanned_bytes_total";
const READ_CACHE_BYTES: &str = "lakehost_read_cache_bytes_total";
const JOBS_QUEUED: &str = "lakehost_jobs_queued";
const JOBS_RUNNING: &str = "lakehost_jobs_running";
const LOAD_COMMITS: &str = "lakehost_load_commits_total";
const STEP_DURATION: &str = "lakehost_pipeline_step_duration_seconds";
const DAILY_RUNS_ENDED: &str = "lakehost_daily_runs_ended_total";
const LEASE_TAKEOVERS: &str = "lakehost_lease_takeovers_total";
const JWKS_FETCHES: &str = "lakehost_jwks_fetches_total";
const TOKEN_REJECTIONS: &str = "lakehost_token_rejections_total";
const POOL_CONNECTIONS: &str = "lakehost_store_pool_connections";
const IDEMPOTENT_REQUESTS: &str = "lakehost_idempotent_requests_total";
const FLIGHT_CALLS: &str = "lakehost_flight_calls_total";
const PG_CONNECTIONS: &str = "lakehost_pg_connections_total";
const PG_STATEMENTS: &str = "lakehost_pg_statements_total";
const DISTRIBUTED_READS: &str = "lakehost_distributed_reads_total";
const CLUSTER_TASKS: &str = "lakehost_cluster_tasks_total";
const CLUSTER_REFUSALS: &str = "lakehost_cluster_refusals_total";
const CLUSTER_MOVED_BYTES: &str = "lakehost_cluster_moved_bytes_total";

/// Histogram buckets (seconds): from a cached status poll to a long step.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// How long a scrape waits for the store's job counts before rendering the
/// last ones.
const JOB_COUNTS_TIMEOUT: Duration = Duration::from_secs(1);

/// How often histograms are folded (the exporter leaves it to its owner).
const UPKEEP_PERIOD: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's recorder, installed on first use.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                .expect("the bucket list is not empty");
            let handle = match builder.install_recorder() {
                Ok(handle) => handle,
                Err(e) => {
                    // Another recorder owns the process (an embedding program):
                    // ours renders what it has, which is nothing.
                    tracing::warn!(error = %e, "metrics recorder not installed");
                    PrometheusBuilder::new().build_recorder().handle()
                }
            };
            describe();
            handle
        })
        .clone()
}

/// Folds histogram samples every few seconds until `stop`.
pub fn start_upkeep(handle: PrometheusHandle, stop: CancellationToken) {
    crate::periodic::spawn_every(UPKEEP_PERIOD, stop, move || {
        handle.run_upkeep();
        std::future::ready(())
    });
}

fn describe() {
    use metrics::Unit;
    describe_counter!(HTTP_REQUESTS, "Requests answered on the API listener.");
    describe_histogram!(HTTP_DURATION, Unit::Seconds, "Time to the response head.");
    describe_counter!(
        QUERIES_SUBMITTED,
        "Queries accepted, started at once or queued."
    );
    describe_counter!(QUERIES_ENDED, "Queries that reached a final state.");
    describe_counter!(
        QUERY_RESULT_BYTES,
        Unit::Bytes,
        "Result CSV bytes of SUCCEEDED queries."
    );
    describe_counter!(
        QUERY_SCANNED_BYTES,
        Unit::Bytes,
        "Parquet bytes read by statements that ran to their end."
    );
    describe_counter!(
        READ_CACHE_BYTES,
        Unit::Bytes,
        "Bytes of lake file ranges read by queries, from memory (hit) or the lake (miss)."
    );
    describe_gauge!(JOBS_QUEUED, "Jobs waiting for a worker, across replicas.");
    describe_gauge!(JOBS_RUNNING, "Jobs held by a replica, across replicas.");
    describe_counter!(
        LOAD_COMMITS,
        "Load commits ended, by outcome and ErrorType."
    );
    describe_histogram!(
        STEP_DURATION,
        Unit::Seconds,
        "One run of one pipeline step."
    );
    describe_counter!(DAILY_RUNS_ENDED, "Daily runs ended, by status.");
    describe_counter!(
        LEASE_TAKEOVERS,
        "Jobs run again after their holder lost them."
    );
    describe_counter!(JWKS_FETCHES, "Signing-key fetches from identity providers.");
    describe_counter!(TOKEN_REJECTIONS, "Bearer tokens refused, by reason.");
    describe_counter!(
        IDEMPOTENT_REQUESTS,
        "Requests with an Idempotency-Key, by operation and what the key held."
    );
    describe_counter!(
        FLIGHT_CALLS,
        "Arrow Flight SQL calls, by RPC and gRPC status."
    );
    describe_counter!(
        PG_CONNECTIONS,
        "Postgres connections, by how their startup ended."
    );
    describe_counter!(PG_STATEMENTS, "Postgres statements, by kind and SQLSTATE.");
    describe_counter!(
        DISTRIBUTED_READS,
        "Reads past the distribution threshold, by whether they were cut into stages."
    );
    describe_counter!(
        CLUSTER_TASKS,
        "Stages of other replicas' distributed reads started here."
    );
    describe_counter!(CLUSTER_REFUSALS, "Calls to this worker refused, by reason.");
    describe_counter!(
        CLUSTER_MOVED_BYTES,
        "Bytes distributed reads moved between processes (Arrow in memory), by boundary."
    );
    describe_gauge!(
        POOL_CONNECTIONS,
        "Metadata-store connections of this replica."
    );
    super::retention::describe();
}

/// The scrape: samples the gauges, then renders everything.
pub async fn render(handle: &PrometheusHandle, store: &Store) -> String {
    let pool = store.pool_usage();
    gauge!(POOL_CONNECTIONS, "state" => "open").set(f64::from(pool.open));
    gauge!(POOL_CONNECTIONS, "state" => "idle").set(pool.idle as f64);
    match tokio::time::timeout(JOB_COUNTS_TIMEOUT, store.job_counts()).await {
        Ok(Ok(counts)) => {
            gauge!(JOBS_QUEUED, "kind" => "query").set(counts.queries_queued as f64);
            gauge!(JOBS_QUEUED, "kind" => "load_commit").set(counts.commits_waiting as f64);
            gauge!(JOBS_RUNNING, "kind" => "query").set(counts.queries_running as f64);
            gauge!(JOBS_RUNNING, "kind" => "load_commit").set(counts.commits_running as f64);
            gauge!(JOBS_RUNNING, "kind" => "daily_run").set(counts.daily_runs_running as f64);
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "job counts for /metrics"),
        Err(_) => tracing::warn!("job counts for /metrics timed out"),
    }
    handle.render()
}

/// One request answered on the API listener.
pub fn http_request(api: ApiLabel, method: &str, route: &str, status: u16, elapsed: Duration) {
    let labels = [
        ("api", api.as_str().to_string()),
        ("method", labels::method(method).to_string()),
        ("route", route.to_string()),
        ("status", status.to_string()),
    ];
    counter!(HTTP_REQUESTS, &labels).increment(1);
    histogram!(HTTP_DURATION, &labels).record(elapsed.as_secs_f64());
}

/// A query accepted by POST /query.
pub fn query_submitted(statement_type: &str, admission: Admission) {
    let admission = match admission {
        Admission::Started => "started",
        Admission::Queued => "queued",
        Admission::Reused => "reused",
    };
    counter!(
        QUERIES_SUBMITTED,
        "statement_type" => labels::statement_type(statement_type),
        "admission" => admission
    )
    .increment(1);
}

/// How a submitted query was taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Run at once on a free worker.
    Started,
    Queued,
    /// Answered with an earlier query's result (result reuse).
    Reused,
}

/// A query that reached a final state; `result_bytes` when it SUCCEEDED.
pub fn query_ended(state: QueryState, statement_type: &str, result: Option<ResultKept>) {
    let statement_type = labels::statement_type(statement_type);
    counter!(QUERIES_ENDED, "state" => state.as_str(), "statement_type" => statement_type)
        .increment(1);
    if let Some(result) = result {
        let kept = if result.in_store { "store" } else { "lake" };
        counter!(QUERY_RESULT_BYTES, "statement_type" => statement_type, "kept" => kept)
            .increment(result.csv_bytes);
    }
}

/// A stored result's CSV size, and whether the store's row keeps it (a
/// small result) rather than the lake.
#[derive(Debug, Clone, Copy)]
pub struct ResultKept {
    pub csv_bytes: u64,
    pub in_store: bool,
}

/// Parquet bytes one statement scanned.
pub fn query_scanned(bytes: u64) {
    counter!(QUERY_SCANNED_BYTES).increment(bytes);
}

/// Bytes of lake ranges one read took from memory (`hit`) and from the lake
/// (`miss`).
pub fn read_cache(hit: u64, miss: u64) {
    if hit > 0 {
        counter!(READ_CACHE_BYTES, "outcome" => "hit").increment(hit);
    }
    if miss > 0 {
        counter!(READ_CACHE_BYTES, "outcome" => "miss").increment(miss);
    }
}

/// How a read past the distribution threshold was planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPlan {
    /// Cut into stages for workers.
    Distributed,
    /// datafusion-distributed found nothing worth sending.
    Local,
    /// No worker answered: it ran here.
    NoWorkers,
}

/// A read past the distribution threshold was planned.
pub fn read_planned(plan: ReadPlan) {
    let plan = match plan {
        ReadPlan::Distributed => "distributed",
        ReadPlan::Local => "local",
        ReadPlan::NoWorkers => "no_workers",
    };
    counter!(DISTRIBUTED_READS, "plan" => plan).increment(1);
}

/// A distributed read's stages moved `bytes` across one kind of boundary
/// (`shuffle`, `coalesce` or `broadcast`).
pub fn cluster_bytes_moved(boundary: &'static str, bytes: u64) {
    counter!(CLUSTER_MOVED_BYTES, "boundary" => boundary).increment(bytes);
}

/// This worker started a stage of another replica's read.
pub fn cluster_task_started() {
    counter!(CLUSTER_TASKS).increment(1);
}

/// This worker refused a call without the cluster secret.
pub fn cluster_call_refused() {
    counter!(CLUSTER_REFUSALS, "reason" => "secret").increment(1);
}

/// This worker refused a stage holding more than reads.
pub fn cluster_plan_refused() {
    counter!(CLUSTER_REFUSALS, "reason" => "plan").increment(1);
}

/// Which kind of leased job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeasedJob {
    Query,
    LoadCommit,
}

/// How a job another holder had started came to this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// A draining replica handed it back: it runs again here.
    HandedBack,
    /// Its holder died (the lease ran out): it is ended, not run again.
    HolderDied,
}

/// A job that another holder had started was taken over.
pub fn lease_taken_over(job: LeasedJob, how: Takeover) {
    let kind = match job {
        LeasedJob::Query => "query",
        LeasedJob::LoadCommit => "load_commit",
    };
    let how = match how {
        Takeover::HandedBack => "handed_back",
        Takeover::HolderDied => "holder_died",
    };
    counter!(LEASE_TAKEOVERS, "kind" => kind, "how" => how).increment(1);
}

/// What a request's `Idempotency-Key` held when it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdempotentOutcome {
    /// Nothing: the request claimed it and ran.
    First,
    /// The first request's answer, sent again.
    Replayed,
    /// Another request's key, or one still in progress: 409.
    Conflict,
    /// The store could not say.
    Error,
}

/// A request with an `Idempotency-Key`; `operation` is a fixed label.
pub fn idempotent_request(operation: &'static str, outcome: IdempotentOutcome) {
    let outcome = match outcome {
        IdempotentOutcome::First => "first",
        IdempotentOutcome::Replayed => "replayed",
        IdempotentOutcome::Conflict => "conflict",
        IdempotentOutcome::Error => "error",
    };
    counter!(IDEMPOTENT_REQUESTS, "operation" => operation, "outcome" => outcome).increment(1);
}

/// A load commit's end: `None` for SUCCESS, else the FAIL's ErrorType.
pub fn load_commit_ended(fail_error_type: Option<&str>) {
    let (outcome, error_type) = match fail_error_type {
        None => ("SUCCESS", "none"),
        Some(error_type) => ("FAIL", labels::load_error_type(error_type)),
    };
    counter!(LOAD_COMMITS, "outcome" => outcome, "error_type" => error_type).increment(1);
}

/// How one run of a pipeline step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    Passed,
    /// It failed the load or run (a verdict).
    Failed,
    /// It gave no verdict: a limit, a trap, its own error.
    Error,
    /// Its runner could not run it, or the run was stopped.
    Halted,
}

static STEP_NAMES: BoundedNames = BoundedNames::new(MAX_STEP_NAMES);

/// Times one step run; `finish` records it.
pub struct StepTimer {
    started: Instant,
}

impl StepTimer {
    pub fn start() -> Self {
        Self {
            started: Instant::now(),
        }
    }

    /// `pipeline` is the pipeline's label (`PipelineKind::label`).
    pub fn finish(self, pipeline: &'static str, step: &str, outcome: StepOutcome) {
        let outcome = match outcome {
            StepOutcome::Passed => "passed",
            StepOutcome::Failed => "failed",
            StepOutcome::Error => "error",
            StepOutcome::Halted => "halted",
        };
        histogram!(
            STEP_DURATION,
            "pipeline" => pipeline,
            "step" => STEP_NAMES.label(step),
            "outcome" => outcome
        )
        .record(self.started.elapsed().as_secs_f64());
    }
}

/// A daily run's end.
pub fn daily_run_ended(status: RunStatus) {
    counter!(DAILY_RUNS_ENDED, "status" => status.as_str()).increment(1);
}

/// Why the keys of a realm were fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwksFetch {
    /// None yet, or older than `auth.jwks_max_age_s`.
    Stale,
    /// A token named a `kid` the cached keys lack (a rotation, or probing).
    UnknownKid,
}

/// A fetch of an identity provider's keys.
pub fn jwks_fetched(why: JwksFetch, ok: bool) {
    let reason = match why {
        JwksFetch::Stale => "stale",
        JwksFetch::UnknownKid => "unknown_kid",
    };
    let outcome = if ok { "ok" } else { "failed" };
    counter!(JWKS_FETCHES, "reason" => reason, "outcome" => outcome).increment(1);
}

/// One Arrow Flight SQL call answered (both labels from closed sets).
pub fn flight_call(call: &'static str, outcome: &'static str) {
    counter!(FLIGHT_CALLS, "call" => call, "outcome" => outcome).increment(1);
}

/// A Postgres connection: `ready` (authenticated), `over_cap`,
/// `tls_failed`, `refused` (a FATAL error at startup), `frame_refused` (a
/// message too large for its phase, or malformed), `cancel_request` or
/// `abandoned`.
pub fn pg_connection(outcome: &'static str) {
    counter!(PG_CONNECTIONS, "outcome" => outcome).increment(1);
}

/// A Postgres statement: its kind (`query`, `catalog`, `session`) and its
/// SQLSTATE (`00000` when it succeeded), from lakehost's closed list.
pub fn pg_statement(kind: &'static str, sqlstate: &'static str) {
    counter!(PG_STATEMENTS, "kind" => kind, "sqlstate" => sqlstate).increment(1);
}

/// A bearer token refused, for a reason from a fixed list.
pub fn token_rejected(reason: &'static str) {
    counter!(TOKEN_REJECTIONS, "reason" => reason).increment(1);
}
