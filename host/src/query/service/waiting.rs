//! Waiting for a query's end (`POST /query` with `Prefer: wait=N`).
//!
//! A waited query that a free slot runs at once is first run before it is
//! stored: the caller has no id to poll or cancel yet, so nothing can tell.
//! When it ends within `RUN_BEFORE_STORING` (the small queries waits are for)
//! it is stored once, final, and the POST answers from that row: one store
//! write in its whole life instead of three writes and two reads. A query
//! still running then is stored RUNNING and goes on as any other. Statements
//! that change the catalog are always stored RUNNING before their end is
//! recorded, so the change commits with the end under the job's lease.
//!
//! Otherwise the request holds until the job is final or the wait passes. A
//! query that ends on this replica wakes its waiters at once; one that runs
//! on another replica is seen through the store, read every
//! `OTHER_REPLICA_POLL`.
//!
//! `submit_and_wait` is the whole of such a POST below HTTP: the wait comes
//! as a `WaitLimit` (what the caller asked, and when the answer must leave
//! at the latest), and once the job exists an error while waiting answers
//! as no end (the caller gets its id, never an error that would hide it).
//!
//! The wire front ends (Flight SQL, Postgres) and a streamed read's last
//! batch wait for a statement's end with no deadline of their own
//! (`wait_for_final`): their client is there until it goes away, and the
//! query's time limit bounds the wait.

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;

use super::{QueryJobs, jobs::Started, submit::SubmitPreferences, worker::RunEnd};
use crate::{
    auth::LakeCaller,
    engine::table_writer::delete_paths,
    observability::jobs,
    query::QueryError,
    store::queries::{CatalogWrite, NewQuery, QueryJob, QueryState, ResultFirst},
};

/// How long one look for a query's end lasts before the next, in
/// `wait_for_final`.
const END_WAIT: Duration = Duration::from_secs(30);

/// How often a waiter reads the store for a query another replica runs.
const OTHER_REPLICA_POLL: Duration = Duration::from_millis(100);

/// How long a waited query runs before it is stored, at most.
pub const RUN_BEFORE_STORING: Duration = Duration::from_millis(200);

impl QueryJobs {
    /// Runs a waited query that is not stored yet for up to
    /// `RUN_BEFORE_STORING` (or `wait`, if shorter), and stores it once it
    /// ended: the job in its final state. `None` when it still runs: the
    /// caller stores it RUNNING and runs it on.
    pub(super) async fn end_before_storing(
        &self,
        query: &NewQuery,
        started: &mut Started,
        result_path: &str,
        wait: Duration,
    ) -> Result<Option<QueryJob>, QueryError> {
        let window = wait
            .min(RUN_BEFORE_STORING)
            .min(Duration::from_secs(self.limits.time_limit_s));
        let started_at = self.now();
        let ran = {
            let _draining_waits = self.drain.running_job();
            match tokio::time::timeout(window, started.wait()).await {
                Ok(ran) => ran,
                Err(_) => return Ok(None),
            }
        };
        if let Ok(execution) = &ran
            && !matches!(execution.write, CatalogWrite::None)
        {
            let stored = self
                .store
                .insert_running_query(query, &self.holder, started_at, self.lease.until())
                .await;
            if let Err(e) = stored {
                delete_paths(self.lake.object_store().as_ref(), &execution.staged).await;
                self.lake.delete_result(result_path).await;
                return Err(e.into());
            }
            jobs::query_submitted(&query.id, &query.statement_type, false);
            self.record(query, ran, Some(result_path)).await;
            return Ok(self.store.query_job(&query.id).await?);
        }
        let RunEnd {
            outcome,
            small_result,
            ..
        } = Self::end_of(query, ran, Some(result_path));
        self.keep_small_result(small_result, Some(result_path));
        let job = match self
            .store
            .insert_ended_query(query, started_at, &outcome, self.now())
            .await
        {
            Ok(job) => job,
            Err(e) => {
                self.lake.delete_result(result_path).await;
                return Err(e.into());
            }
        };
        jobs::query_submitted(&query.id, &query.statement_type, false);
        Self::count_end(query, &outcome);
        if job.state != QueryState::Succeeded {
            self.lake.delete_result(result_path).await;
        }
        Ok(Some(job))
    }

    /// The caller's query once it is final, or `None` when `within` passes
    /// first. The query itself is unaffected either way.
    pub async fn wait_for_end(
        &self,
        caller: &LakeCaller,
        id: &str,
        within: Duration,
    ) -> Result<Option<QueryJob>, QueryError> {
        let deadline = Instant::now() + within;
        // Made before the store is read, so an end recorded in between
        // still wakes this waiter.
        let mut ends = self.ended.watch();
        loop {
            let job = self.get(caller, id).await?;
            if job.state.is_final() {
                return Ok(Some(job));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let next_look = (now + OTHER_REPLICA_POLL).min(deadline);
            tokio::select! {
                () = ends.of(id) => {}
                () = tokio::time::sleep_until(next_look) => {}
            }
        }
    }

    /// The caller's query once it is final, however long it runs (the
    /// waiting call is dropped when its client goes away).
    pub async fn wait_for_final(
        &self,
        caller: &LakeCaller,
        id: &str,
    ) -> Result<QueryJob, QueryError> {
        loop {
            if let Some(job) = self.wait_for_end(caller, id, END_WAIT).await? {
                return Ok(job);
            }
        }
    }

    /// POST /query with or without `Prefer: wait`: `submit`, then, when the
    /// caller waits and the query did not end within `submit`, a wait for
    /// its end, as the caller's `Prefer` asks (`preferences`).
    pub async fn submit_and_wait(
        self: &Arc<Self>,
        caller: &LakeCaller,
        sql: &str,
        database: Option<&str>,
        preferences: SubmitPreferences,
        wait: Option<WaitLimit>,
    ) -> Result<WaitedSubmission, QueryError> {
        let submitted = self
            .submit(
                caller,
                sql,
                database,
                preferences,
                wait.map(|wait| wait.left()),
            )
            .await?;
        let (id, result_first) = (submitted.id, submitted.result_first);
        // The job exists from here on: whatever goes wrong while waiting, the
        // answer is at worst its id (never an error that would hide it, or
        // make a keyed retry submit it again).
        let ended = match (wait, submitted.ended) {
            (None, _) => None,
            (Some(_), Some(job)) => Some(job),
            (Some(wait), None) => match self.wait_for_end(caller, &id, wait.left()).await {
                Ok(ended) => ended,
                Err(e) => {
                    tracing::warn!(query = %id, error = %e, "waiting for a query failed, answering 202");
                    None
                }
            },
        };
        Ok(WaitedSubmission {
            id,
            ended,
            result_first,
        })
    }
}

/// How long a submission may wait for its query's end: what its caller
/// asked (`Prefer: wait=N`), cut so that its answer leaves by `answer_by`.
#[derive(Debug, Clone, Copy)]
pub struct WaitLimit {
    pub wanted: Duration,
    pub answer_by: Instant,
}

impl WaitLimit {
    /// What is left of the wait now.
    fn left(self) -> Duration {
        self.wanted
            .min(self.answer_by.saturating_duration_since(Instant::now()))
    }
}

/// What `submit_and_wait` made.
#[derive(Debug)]
pub struct WaitedSubmission {
    pub id: String,
    /// The job in its final state, when its caller waited and it ended in
    /// time (ran before it was stored, was answered with a reused result, or
    /// ended while waited for); `None` without a wait.
    pub ended: Option<QueryJob>,
    /// How its result is written (`Submitted::result_first`).
    pub result_first: ResultFirst,
}
