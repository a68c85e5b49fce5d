//! The worker side of the query service: claiming stored jobs fairly,
//! running each under its lease, time limit and cancellation, and recording
//! its end with the catalog changes it made (or deleting what it wrote);
//! handing jobs back at a drain's end, and ending the jobs of replicas that
//! died.
//!
//! The reasons such ends give (`ABANDONED_QUERY`, `STOPPED_WHILE_STREAMING`)
//! and the pool's intervals live here, where they are used; a streamed
//! read waiting for room polls at the workers' `POLL_INTERVAL`.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::{
    QueryJobs,
    jobs::{Planned, Started},
    reuse::reuse_key,
    runs_here::CountedRun,
};
use crate::{
    auth::AccessGrant,
    engine::{layout::StringColumns, table_writer::delete_paths},
    observability::{jobs, metrics::ResultKept},
    query::{QueryError, execute::Execution},
    store::{
        Finished,
        queries::{CatalogWrite, Delivery, NewQuery, QueryJob, QueryOutcome, QueryState},
    },
};

/// How often idle workers look for jobs submitted to other replicas and for
/// expired leases (jobs submitted here wake a worker at once).
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How often a replica looks for queries whose replica died.
const ABANDONED_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The reason a query whose replica died ends with.
pub const ABANDONED_QUERY: &str = "The server running this query stopped before the query ended \
     (it was killed, ran out of memory or crashed, or lost its metadata store for longer than \
     its lease). The query was not run again, in case it was the cause; submit it again.";

/// Why a streamed query ends when its replica stops under it (its client
/// reads from that replica: no other can go on).
const STOPPED_WHILE_STREAMING: &str =
    "The server stopped while it sent this query's rows; run the statement again.";

/// What the end of a run stores (`QueryJobs::end_of`).
pub(super) struct RunEnd {
    pub outcome: QueryOutcome,
    pub write: CatalogWrite,
    /// Lake files the run staged for `write`.
    pub staged: Vec<String>,
    /// A small result's CSV, kept in memory for its pages.
    pub small_result: Option<Bytes>,
}

/// How a run on this worker ended.
enum Ended {
    /// It ran to an end (or its time limit): record it.
    Ran(Box<Result<Execution, QueryError>>),
    /// Cancelled, or its lease lost: record nothing.
    Stopped,
    /// The replica drains: give the job back to the queue.
    HandedBack,
}

impl QueryJobs {
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

    /// One worker: wait for a free slot, claim, run, repeat; sleep when there
    /// is nothing to do. Stops claiming once the replica drains.
    async fn work(self: Arc<Self>) {
        loop {
            let slot: OwnedSemaphorePermit = tokio::select! {
                slot = self.slots.clone().acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => return,
                },
                () = self.drain.began() => return,
            };
            if self.drain.is_draining() {
                return;
            }
            let now = self.now();
            let lease_until = self.lease.until();
            match self
                .store
                .claim_query(&self.holder, now, lease_until, self.limits.caps())
                .await
            {
                Ok(Some(job)) => {
                    let counted = self.runs_here.enter(&job.query.org, &job.query.owner_sub);
                    self.run(job, None, counted).await;
                    drop(slot);
                }
                Ok(None) => {
                    drop(slot);
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep(POLL_INTERVAL) => {}
                        () = self.drain.began() => return,
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

    /// Runs a job this worker holds: `started` when the submission's plan is
    /// already executing, else planned again from the job and started.
    /// `counted` is the run's place in the fair-sharing counts, held until
    /// it ends.
    pub(super) async fn run(
        self: &Arc<Self>,
        job: QueryJob,
        started: Option<Started>,
        counted: CountedRun,
    ) {
        // Instrumented rather than entered: an entered span held across an
        // await would tag other tasks' lines on this thread.
        let span = tracing::info_span!("query", query = %job.query.id, attempt = job.attempts);
        self.run_in_span(job, started, counted)
            .instrument(span)
            .await;
        // Its caller's and org's caps have room again: a worker asleep
        // because the queue's next job was held by them claims it now, not
        // at its next poll.
        self.wake.notify_one();
    }

    async fn run_in_span(
        self: &Arc<Self>,
        job: QueryJob,
        started: Option<Started>,
        _counted: CountedRun,
    ) {
        let id = job.query.id.clone();
        if started.is_none() {
            jobs::query_claimed(&id, job.attempts);
        }
        if job.attempts > i64::from(self.limits.max_attempts) {
            let reason = format!(
                "The query was handed back by stopping servers {} times and was not run again.",
                job.attempts - 1
            );
            self.record(&job.query, Err(QueryError::Failed(reason)), None)
                .await;
            return;
        }
        let _counted = self.drain.running_job();
        let token = CancellationToken::new();
        self.running
            .lock()
            .expect("running map lock")
            .insert(id.clone(), token.clone());
        // A streamed query's rows go to its client, never to a file.
        let result_path = (job.delivery == Delivery::Stored)
            .then(|| Self::result_path_of(&job.query, job.attempts));
        let time_limit = Duration::from_secs(self.limits.time_limit_s);
        // Stops when the lease is lost: cancelled or taken over elsewhere.
        let held = self.lease.hold_while_held(
            &id,
            self.run_job(&job, started, result_path.as_deref()),
            |until| self.store.renew_query_lease(&id, &self.holder, until),
        );
        let outcome = tokio::select! {
            outcome = held => outcome.map(|ran| Ended::Ran(Box::new(ran))).unwrap_or(Ended::Stopped),
            _ = token.cancelled() => Ended::Stopped,
            () = self.drain.handing_back() => Ended::HandedBack,
            _ = tokio::time::sleep(time_limit) => Ended::Ran(Box::new(Err(QueryError::Failed(format!(
                "Query exhausted its time limit of {} seconds.",
                self.limits.time_limit_s
            ))))),
        };
        self.running.lock().expect("running map lock").remove(&id);
        match outcome {
            Ended::Ran(outcome) => {
                self.record(&job.query, *outcome, result_path.as_deref())
                    .await
            }
            Ended::Stopped => {
                tracing::info!("query stopped: cancelled or taken over");
                if let Some(path) = &result_path {
                    self.lake.delete_result(path).await;
                }
            }
            Ended::HandedBack if job.delivery != Delivery::Stored => {
                // Its client reads from this replica: no other can go on.
                let stopped = QueryError::Failed(STOPPED_WHILE_STREAMING.into());
                self.record(&job.query, Err(stopped), None).await;
            }
            Ended::HandedBack => {
                match self.store.hand_back_query(&id, &self.holder).await {
                    Ok(true) => tracing::info!("query handed back: the server drains"),
                    Ok(false) => tracing::info!("query ended elsewhere while the server drained"),
                    Err(e) => {
                        tracing::warn!(error = %e, "query not handed back; it ends FAILED when its lease runs out")
                    }
                }
                if let Some(path) = &result_path {
                    self.lake.delete_result(path).await;
                }
            }
        }
    }

    /// Ends FAILED the queries whose replica died while running them (their
    /// lease ran out), and deletes what their run wrote of a result. They are
    /// not run again: the query may be what killed the replica.
    async fn end_abandoned(&self) {
        let ended = match self
            .store
            .end_abandoned_queries(self.now(), ABANDONED_QUERY)
            .await
        {
            Ok(ended) => ended,
            Err(e) => {
                tracing::warn!(error = %e, "ending the queries of stopped servers failed");
                return;
            }
        };
        for job in ended {
            tracing::warn!(query = %job.query.id, attempt = job.attempts, "query ended FAILED: its server stopped while running it");
            jobs::query_abandoned(&job.query.id, &job.query.statement_type);
            self.ended.announce(&job.query.id);
            let result_path = Self::result_path_of(&job.query, job.attempts);
            self.lake.delete_result(&result_path).await;
        }
    }

    /// Plans the job with the submitter's access (store work, on this runtime)
    /// and starts it on the engine runtime, unless `started` already is; then
    /// waits for it. Dropping this future (cancel, time limit) aborts it.
    async fn run_job(
        &self,
        job: &QueryJob,
        started: Option<Started>,
        result_path: Option<&str>,
    ) -> Result<Execution, QueryError> {
        let started = match (started, result_path) {
            (Some(started), _) => started,
            (None, Some(result_path)) => {
                let planned = self.plan_job(job).await?;
                self.start_engine(planned, &job.query, result_path)
            }
            // Its rows had a client on the replica that started it.
            (None, None) => {
                return Err(QueryError::Failed(STOPPED_WHILE_STREAMING.into()));
            }
        };
        started.outcome().await
    }

    /// Plans a claimed job again, with the access stored in it.
    async fn plan_job(&self, job: &QueryJob) -> Result<Planned, QueryError> {
        let q = &job.query;
        let grant: AccessGrant = serde_json::from_str(&q.access_json)
            .map_err(|e| QueryError::internal("stored access", e))?;
        let (planned, _) = self
            .plan(
                (&q.org, q.zone.as_deref()),
                &q.database,
                grant.access(),
                &q.sql,
                StringColumns::Views,
            )
            .await
            .map_err(|e| match e {
                QueryError::Invalid(message) => QueryError::Failed(message),
                other => other,
            })?;
        Ok(planned)
    }

    /// What a run's end stores: the job's outcome, the catalog change, the
    /// files staged for it, and a small result's CSV to keep in memory.
    pub(super) fn end_of(
        query: &NewQuery,
        outcome: Result<Execution, QueryError>,
        result_path: Option<&str>,
    ) -> RunEnd {
        match outcome {
            Ok(execution) => RunEnd {
                outcome: QueryOutcome::Succeeded {
                    result_path: result_path.map(str::to_string),
                    rows: execution.rows as i64,
                    bytes: execution.bytes as i64,
                    columns_json: serde_json::to_string(&execution.columns)
                        .expect("columns serialise"),
                    reuse_key: execution
                        .snapshot
                        .as_deref()
                        .and_then(|snapshot| reuse_key(query, snapshot)),
                    workers: execution.workers.map(i64::from),
                    in_row: execution.in_row,
                },
                write: execution.write,
                staged: execution.staged,
                small_result: execution.small_result,
            },
            Err(error) => {
                if let QueryError::Internal(cause) = &error {
                    tracing::error!(error = %cause, "query failed unexpectedly");
                }
                RunEnd {
                    outcome: QueryOutcome::Failed {
                        reason: error.reason(),
                    },
                    write: CatalogWrite::None,
                    staged: Vec::new(),
                    small_result: None,
                }
            }
        }
    }

    /// Hands a small result to `QueryResults` before its end is recorded,
    /// so the first page read after SUCCEEDED finds it in memory.
    pub(super) fn keep_small_result(&self, small_result: Option<Bytes>, result_path: Option<&str>) {
        if let (Some(csv), Some(path)) = (small_result, result_path) {
            self.results.keep_small_result(path, csv);
        }
    }

    /// Counts a recorded end in the metrics (and logs it).
    pub(super) fn count_end(query: &NewQuery, outcome: &QueryOutcome) {
        let (id, statement_type) = (query.id.as_str(), query.statement_type.as_str());
        match outcome {
            // The metric counts stored results' bytes: a streamed result has none.
            QueryOutcome::Succeeded {
                bytes,
                result_path,
                in_row,
                ..
            } => jobs::query_ended(
                id,
                QueryState::Succeeded,
                statement_type,
                result_path.as_ref().map(|_| ResultKept {
                    csv_bytes: u64::try_from(*bytes).unwrap_or(0),
                    in_store: in_row.csv.is_some(),
                }),
            ),
            QueryOutcome::Failed { .. } => {
                jobs::query_ended(id, QueryState::Failed, statement_type, None)
            }
        }
    }

    /// Records a run's end; deletes files that did not become part of the lake.
    pub(super) async fn record(
        &self,
        query: &NewQuery,
        outcome: Result<Execution, QueryError>,
        result_path: Option<&str>,
    ) {
        let (id, statement_type) = (query.id.as_str(), query.statement_type.as_str());
        let store = self.lake.object_store();
        let RunEnd {
            outcome: job_outcome,
            write,
            staged,
            small_result,
        } = Self::end_of(query, outcome, result_path);
        self.keep_small_result(small_result, result_path);
        let succeeded = matches!(job_outcome, QueryOutcome::Succeeded { .. });
        match self
            .store
            .finish_query(id, &self.holder, &job_outcome, &write, self.now())
            .await
        {
            Ok(Finished::Recorded) => {
                self.ended.announce(id);
                Self::count_end(query, &job_outcome);
                if !succeeded && let Some(path) = result_path {
                    self.lake.delete_result(path).await;
                }
            }
            Ok(Finished::Lost) => {
                delete_paths(store.as_ref(), &staged).await;
                if let Some(path) = result_path {
                    self.lake.delete_result(path).await;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "recording the end of a query failed");
                delete_paths(store.as_ref(), &staged).await;
                // A catalog conflict (say, a table created meanwhile) fails the query.
                let failed = QueryOutcome::Failed {
                    reason: format!("The query's changes could not be committed: {e}"),
                };
                let none = CatalogWrite::None;
                if let Ok(Finished::Recorded) = self
                    .store
                    .finish_query(id, &self.holder, &failed, &none, self.now())
                    .await
                {
                    self.ended.announce(id);
                    jobs::query_ended(id, QueryState::Failed, statement_type, None);
                }
            }
        }
    }
}
