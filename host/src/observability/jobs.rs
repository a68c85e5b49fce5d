//! Job transitions, each logged once and counted: queries (QUEUED, RUNNING,
//! SUCCEEDED, FAILED, CANCELLED), load commits (PROCESSING, claimed by a
//! worker, SUCCESS or FAIL) and daily runs (RUNNING, then their end).
//!
//! Every line is `"job state"` with `job` (`query`, `load`, `daily_run`),
//! `job_id` (the query id, load id or execution name) and `state`; one logged
//! while a request is served also carries that request's `request_id` (its
//! span). Nothing else a caller sent (SQL, table names) is logged here.

use super::metrics::{self, Admission, LeasedJob, Takeover};
use crate::store::{dailyrun::RunStatus, queries::QueryState};

/// POST /query accepted a statement: started at once or queued.
pub fn query_submitted(id: &str, statement_type: &str, queued: bool) {
    let state = if queued {
        QueryState::Queued
    } else {
        QueryState::Running
    };
    tracing::info!(
        job = "query",
        job_id = id,
        state = state.as_str(),
        statement_type,
        "job state"
    );
    let admission = if queued {
        Admission::Queued
    } else {
        Admission::Started
    };
    metrics::query_submitted(statement_type, admission);
}

/// POST /query answered with the result of `reused` (result reuse): the new
/// query is SUCCEEDED from the start.
pub fn query_reused(id: &str, reused: &str, statement_type: &str) {
    tracing::info!(
        job = "query",
        job_id = id,
        state = QueryState::Succeeded.as_str(),
        reused_query_id = reused,
        statement_type,
        "job state"
    );
    metrics::query_submitted(statement_type, Admission::Reused);
}

/// A worker claimed a stored query; an attempt past the first is a rerun
/// after a draining replica handed it back (a dead holder's query is never
/// claimed: `query_abandoned`).
pub fn query_claimed(id: &str, attempt: i64) {
    tracing::info!(
        job = "query",
        job_id = id,
        state = "RUNNING",
        attempt,
        "job state"
    );
    if attempt > 1 {
        metrics::lease_taken_over(LeasedJob::Query, Takeover::HandedBack);
    }
}

/// A query whose holder died was ended FAILED (not run again).
pub fn query_abandoned(id: &str, statement_type: &str) {
    metrics::lease_taken_over(LeasedJob::Query, Takeover::HolderDied);
    query_ended(id, QueryState::Failed, statement_type, None);
}

/// A query's end was recorded (or, for CANCELLED, requested).
pub fn query_ended(
    id: &str,
    state: QueryState,
    statement_type: &str,
    result: Option<metrics::ResultKept>,
) {
    tracing::info!(
        job = "query",
        job_id = id,
        state = state.as_str(),
        statement_type,
        "job state"
    );
    metrics::query_ended(state, statement_type, result);
}

/// POST /load/{id}/commit moved a load to PROCESSING.
pub fn load_committed(id: &str) {
    tracing::info!(job = "load", job_id = id, state = "PROCESSING", "job state");
}

/// A commit worker claimed a load; an attempt past the first is a takeover:
/// a rerun after a hand-back, or the end of one whose holder died.
pub fn load_commit_claimed(id: &str, attempt: i64, holder_died: bool) {
    tracing::info!(
        job = "load",
        job_id = id,
        state = "PROCESSING",
        attempt,
        "job state: commit claimed"
    );
    if attempt > 1 {
        let how = if holder_died {
            Takeover::HolderDied
        } else {
            Takeover::HandedBack
        };
        metrics::lease_taken_over(LeasedJob::LoadCommit, how);
    }
}

/// A commit's end was recorded: SUCCESS (`None`) or FAIL with its ErrorType.
pub fn load_ended(id: &str, fail_error_type: Option<&str>) {
    let state = if fail_error_type.is_some() {
        "FAIL"
    } else {
        "SUCCESS"
    };
    tracing::info!(
        job = "load",
        job_id = id,
        state,
        error_type = fail_error_type.unwrap_or(""),
        "job state"
    );
    metrics::load_commit_ended(fail_error_type);
}

/// A daily run started, by hand or by the scheduler.
pub fn daily_run_started(name: &str, scheduled: bool) {
    tracing::info!(
        job = "daily_run",
        job_id = name,
        state = "RUNNING",
        scheduled,
        "job state"
    );
}

/// A daily run ended: recorded by its runner, or by the scheduler's tick
/// (TIMED_OUT, ABORTED).
pub fn daily_run_ended(name: &str, status: RunStatus, cause: Option<&str>) {
    tracing::info!(
        job = "daily_run",
        job_id = name,
        state = status.as_str(),
        cause = cause.unwrap_or(""),
        "job state"
    );
    metrics::daily_run_ended(status);
}
