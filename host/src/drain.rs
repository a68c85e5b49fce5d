//! A replica's graceful stop, as every part of the server sees it. On the
//! first SIGTERM or SIGINT (`startup/`) the replica begins draining:
//!
//! 1. `/readyz` answers 503 at once, and no worker claims a new job (a query
//!    submitted now is stored QUEUED for another replica);
//! 2. after `server.drain_notice_ms` the listeners stop accepting and open
//!    requests finish;
//! 3. running jobs get until `server.drain_s` after the signal; then they are
//!    stopped and handed back: a query goes back to QUEUED and a load commit
//!    back to nobody's, so another replica claims it at its next poll, not
//!    when a lease runs out; a daily run ends ABORTED at once (runs are not
//!    resumed), so a new one can start.
//!
//! A job's lease running out is therefore never a drain: it means the replica
//! holding the job died (see the query and commit workers).

use std::sync::Arc;

use tokio_util::{
    sync::CancellationToken,
    task::{TaskTracker, task_tracker::TaskTrackerToken},
};

/// The drain state one server shares; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Drain {
    inner: Arc<DrainState>,
}

#[derive(Debug, Default)]
struct DrainState {
    /// Cancelled when the drain begins.
    draining: CancellationToken,
    /// Cancelled when running jobs must stop and hand their work back.
    hand_back: CancellationToken,
    /// The jobs running on this replica.
    jobs: TaskTracker,
}

/// One running job, counted until dropped.
#[derive(Debug)]
pub struct RunningJob(#[allow(dead_code)] TaskTrackerToken);

impl Drain {
    pub fn new() -> Self {
        Self::default()
    }

    /// The drain begins: readiness fails and workers stop claiming.
    pub fn begin(&self) {
        self.inner.draining.cancel();
    }

    pub fn is_draining(&self) -> bool {
        self.inner.draining.is_cancelled()
    }

    /// Resolves once the drain began.
    pub async fn began(&self) {
        self.inner.draining.cancelled().await
    }

    /// Counts a job as running on this replica until the guard is dropped.
    pub fn running_job(&self) -> RunningJob {
        RunningJob(self.inner.jobs.token())
    }

    /// How many jobs run on this replica.
    pub fn running_jobs(&self) -> usize {
        self.inner.jobs.len()
    }

    /// Resolves once running jobs must stop and hand their work back.
    pub async fn handing_back(&self) {
        self.inner.hand_back.cancelled().await
    }

    /// Waits until no job runs, at most until `deadline`; then tells the
    /// jobs still running to hand their work back and waits for them to do
    /// so. Returns how many were told to.
    pub async fn end_jobs(&self, deadline: tokio::time::Instant) -> usize {
        let jobs = &self.inner.jobs;
        jobs.close();
        if tokio::time::timeout_at(deadline, jobs.wait()).await.is_ok() {
            return 0;
        }
        let handed_back = jobs.len();
        self.inner.hand_back.cancel();
        jobs.wait().await;
        handed_back
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn jobs_that_end_in_time_are_not_told_to_hand_back() {
        let drain = Drain::new();
        let job = drain.running_job();
        assert!(!drain.is_draining());
        drain.begin();
        assert!(drain.is_draining());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(job);
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        assert_eq!(drain.end_jobs(deadline).await, 0);
    }

    #[tokio::test]
    async fn jobs_still_running_at_the_deadline_hand_back() {
        let drain = Drain::new();
        let worker = drain.clone();
        let job = drain.running_job();
        let handed_back = tokio::spawn(async move {
            worker.handing_back().await;
            drop(job);
            true
        });
        let deadline = tokio::time::Instant::now() + Duration::from_millis(50);
        assert_eq!(drain.end_jobs(deadline).await, 1);
        assert!(handed_back.await.unwrap());
        assert_eq!(drain.running_jobs(), 0);
    }
}
