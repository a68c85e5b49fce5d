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

use std::{collections::HashMap, sync::Mutex, time::Duration};

use tokio::time::Instant;

use super::{QueryService, Started, worker::RunEnd};
use crate::{
    auth::LakeCaller,
    engine::table_writer::delete_paths,
    observability::jobs,
    query::QueryError,
    store::queries::{CatalogWrite, NewQuery, QueryJob, QueryState},
};

/// How often a waiter reads the store for a query another replica runs.
const OTHER_REPLICA_POLL: Duration = Duration::from_millis(100);

/// How long a waited query runs before it is stored, at most.
pub const RUN_BEFORE_STORING: Duration = Duration::from_millis(200);

/// Waited queries running on this replica before they are stored, per org
/// and caller: the fair-sharing caps count them beside the stored RUNNING
/// jobs (a worker's claim sees only the stored ones, for at most
/// `RUN_BEFORE_STORING`).
#[derive(Debug, Default)]
pub(super) struct UnstoredRuns(Mutex<HashMap<(String, String), i64>>);

/// One unstored run, counted until dropped.
struct UnstoredRun<'a> {
    runs: &'a UnstoredRuns,
    key: (String, String),
}

impl UnstoredRuns {
    fn enter(&self, org: &str, caller_sub: &str) -> UnstoredRun<'_> {
        let key = (org.to_string(), caller_sub.to_string());
        *self
            .0
            .lock()
            .expect("unstored runs lock")
            .entry(key.clone())
            .or_default() += 1;
        UnstoredRun { runs: self, key }
    }

    /// How many run for `org`, and for its caller `caller_sub`.
    pub(super) fn of(&self, org: &str, caller_sub: &str) -> (i64, i64) {
        let runs = self.0.lock().expect("unstored runs lock");
        let of_org = runs
            .iter()
            .filter(|((run_org, _), _)| run_org == org)
            .map(|(_, count)| count)
            .sum();
        let of_caller = runs
            .get(&(org.to_string(), caller_sub.to_string()))
            .copied()
            .unwrap_or(0);
        (of_org, of_caller)
    }
}

impl Drop for UnstoredRun<'_> {
    fn drop(&mut self) {
        let mut runs = self.runs.0.lock().expect("unstored runs lock");
        if let Some(count) = runs.get_mut(&self.key) {
            *count -= 1;
            if *count <= 0 {
                runs.remove(&self.key);
            }
        }
    }
}

impl QueryService {
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
            let _counted = self.unstored.enter(&query.org, &query.owner_sub);
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
        loop {
            // Registered before the store is read, so an end recorded in
            // between still wakes this waiter.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
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
                () = ended => {}
                () = tokio::time::sleep_until(next_look) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::UnstoredRuns;

    #[test]
    fn unstored_runs_count_per_org_and_caller_until_dropped() {
        let runs = UnstoredRuns::default();
        let first = runs.enter("demo", "alice");
        let second = runs.enter("demo", "alice");
        let other_caller = runs.enter("demo", "bob");
        let other_org = runs.enter("acme", "alice");
        assert_eq!(runs.of("demo", "alice"), (3, 2));
        assert_eq!(runs.of("demo", "carol"), (3, 0));
        assert_eq!(runs.of("acme", "alice"), (1, 1));
        drop((first, other_caller));
        assert_eq!(runs.of("demo", "alice"), (1, 1));
        drop((second, other_org));
        assert_eq!(runs.of("demo", "alice"), (0, 0));
        assert_eq!(runs.of("acme", "alice"), (0, 0));
        assert!(runs.0.lock().unwrap().is_empty(), "no counts left behind");
    }
}
