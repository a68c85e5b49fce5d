//! How many jobs wait and run across every replica sharing the store, and
//! how busy this replica's connection pool is: the figures `/metrics` samples
//! when it is scraped. Read-only, one statement on the state indexes.

use sqlx::Row as _;

use super::{Result, Store};

/// Jobs by stage, counted in the store (so the same on every replica).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCounts {
    pub queries_queued: i64,
    pub queries_running: i64,
    /// Loads PROCESSING that no commit worker holds yet.
    pub commits_waiting: i64,
    /// Loads PROCESSING held by a commit worker (its lease may have lapsed).
    pub commits_running: i64,
    pub daily_runs_running: i64,
}

/// This replica's metadata-store connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUsage {
    pub open: u32,
    pub idle: usize,
}

impl Store {
    pub async fn job_counts(&self) -> Result<JobCounts> {
        let row = sqlx::query(
            "SELECT \
               (SELECT count(*) FROM query_jobs WHERE state = 'QUEUED'), \
               (SELECT count(*) FROM query_jobs WHERE state = 'RUNNING'), \
               (SELECT count(*) FROM loads WHERE state = 'PROCESSING' AND lease_owner IS NULL), \
               (SELECT count(*) FROM loads WHERE state = 'PROCESSING' AND lease_owner IS NOT NULL), \
               (SELECT count(*) FROM daily_runs WHERE status = 'RUNNING')",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(JobCounts {
            queries_queued: row.try_get(0)?,
            queries_running: row.try_get(1)?,
            commits_waiting: row.try_get(2)?,
            commits_running: row.try_get(3)?,
            daily_runs_running: row.try_get(4)?,
        })
    }

    pub fn pool_usage(&self) -> PoolUsage {
        PoolUsage {
            open: self.pool().size(),
            idle: self.pool().num_idle(),
        }
    }
}
