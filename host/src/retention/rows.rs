//! The sweeps of rows and of the files rows name: query results after
//! `retention.results_days`, then job rows (queries, loads, daily runs)
//! after `retention.jobs_days`, idempotency keys past their 24 hours and
//! the identity provider's login codes past their minute.
//!
//! A result is marked deleted in its row before its files go, so a read
//! from then on answers that it was deleted (`query::service::expired`)
//! rather than finding a file missing; a file whose delete fails is left to
//! the lake scan (`scan.rs`), which deletes result files no row keeps.

use super::{MAX_BATCHES, SweepError, Sweeper};
use crate::observability::retention::Swept;

impl Sweeper {
    /// Deletes the results of queries that ended `results_days` ago.
    pub(super) async fn sweep_results(&self) -> Result<u64, SweepError> {
        let now = self.now();
        let before = now.saturating_sub(self.config.results_micros());
        let store = &self.parts.store;
        let failed = |e| SweepError::new(Swept::Results, e);
        let mut removed = 0;
        for _ in 0..MAX_BATCHES {
            let due = store
                .results_due(before, self.batch())
                .await
                .map_err(failed)?;
            let ids: Vec<String> = due.iter().map(|d| d.id.clone()).collect();
            store.expire_results(&ids, now).await.map_err(failed)?;
            for result in due.iter().filter(|d| !d.shared) {
                self.parts.lake.delete_result(&result.result_path).await;
            }
            removed += due.len() as u64;
            if (due.len() as i64) < self.batch() {
                break;
            }
        }
        Ok(removed)
    }

    /// Deletes query rows that ended `jobs_days` ago.
    pub(super) async fn sweep_queries(&self) -> Result<u64, SweepError> {
        let before = self.jobs_before();
        self.in_batches(Swept::Queries, |limit| {
            self.parts.store.delete_old_queries(before, limit)
        })
        .await
    }

    /// Deletes load rows last changed `jobs_days` ago.
    pub(super) async fn sweep_loads(&self) -> Result<u64, SweepError> {
        let before = self.jobs_before();
        self.in_batches(Swept::Loads, |limit| {
            self.parts.store.delete_old_loads(before, limit)
        })
        .await
    }

    /// Deletes daily runs that stopped `jobs_days` ago (an org's latest stays).
    pub(super) async fn sweep_daily_runs(&self) -> Result<u64, SweepError> {
        let before = self.jobs_before();
        self.in_batches(Swept::DailyRuns, |limit| {
            self.parts.store.delete_old_daily_runs(before, limit)
        })
        .await
    }

    /// Forgets idempotency keys past their time (docs/api.md: 24 hours).
    pub(super) async fn sweep_idempotency_keys(&self) -> Result<u64, SweepError> {
        let now = self.now();
        self.in_batches(Swept::IdempotencyKeys, |limit| {
            self.parts.store.expire_idempotency_keys(now, limit)
        })
        .await
    }

    /// Deletes the embedded identity provider's login codes past their
    /// minute (each login also deletes some: this catches the rest).
    pub(super) async fn sweep_login_codes(&self) -> Result<u64, SweepError> {
        let now = self.now();
        self.in_batches(Swept::IdentityProvider, |limit| {
            self.parts.store.delete_expired_idp_codes(now, limit)
        })
        .await
    }

    fn jobs_before(&self) -> i64 {
        self.now().saturating_sub(self.config.jobs_micros())
    }

    /// Runs `delete` (which removes up to its limit) until a batch comes
    /// back short, at most `MAX_BATCHES` times; returns the total.
    async fn in_batches<F, R>(&self, kind: Swept, delete: F) -> Result<u64, SweepError>
    where
        F: Fn(i64) -> R,
        R: std::future::Future<Output = crate::store::Result<u64>>,
    {
        let mut removed = 0;
        for _ in 0..MAX_BATCHES {
            let done = delete(self.batch())
                .await
                .map_err(|e| SweepError::new(kind, e))?;
            removed += done;
            if done < self.config.batch {
                break;
            }
        }
        Ok(removed)
    }
}
