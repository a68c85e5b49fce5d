//! The daily run's stored state: the per-org flag (spec "Daily run flag") and
//! the executions (spec "Daily run execution"). The store, not the callers,
//! keeps at most one RUNNING execution per org and one execution per slot of
//! the schedule (unique indexes), so concurrent starts on any number of
//! replicas cannot both win.

use sqlx::Row as _;

use super::{
    Error, Finished, Result, Store,
    catalog::{self, LakeTable, NewDataFile},
};

/// An execution's status (spec "Daily run execution statuses").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    TimedOut,
    Aborted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "RUNNING",
            RunStatus::Succeeded => "SUCCEEDED",
            RunStatus::Failed => "FAILED",
            RunStatus::TimedOut => "TIMED_OUT",
            RunStatus::Aborted => "ABORTED",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "RUNNING" => RunStatus::Running,
            "SUCCEEDED" => RunStatus::Succeeded,
            "FAILED" => RunStatus::Failed,
            "TIMED_OUT" => RunStatus::TimedOut,
            "ABORTED" => RunStatus::Aborted,
            other => return Err(Error::Corrupt(format!("daily run status {other:?}"))),
        })
    }
}

/// A stored execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyRun {
    pub name: String,
    pub org: String,
    pub status: RunStatus,
    /// The schedule's slot it was started for; `None` for a manual start.
    pub scheduled_for: Option<i64>,
    pub started_at: i64,
    pub stopped_at: Option<i64>,
    pub deadline_at: i64,
    /// Why it did not succeed: a short name and the details.
    pub error: Option<String>,
    pub cause: Option<String>,
}

/// An execution to start, held by `holder` until `lease_until`.
#[derive(Debug, Clone)]
pub struct NewDailyRun<'a> {
    pub name: &'a str,
    pub org: &'a str,
    pub scheduled_for: Option<i64>,
    pub started_at: i64,
    pub deadline_at: i64,
    pub holder: &'a str,
    pub lease_until: i64,
}

/// What asking to start an execution came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartOutcome {
    Started(DailyRun),
    /// The org already has this RUNNING execution.
    AlreadyRunning(DailyRun),
    /// The schedule's slot (or the name) was used already.
    Taken,
}

/// How a run ended, as its runner records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    pub status: RunStatus,
    pub error: Option<String>,
    pub cause: Option<String>,
}

const COLUMNS: &str =
    "name, org, status, scheduled_for, started_at, stopped_at, deadline_at, error, cause";

fn run_from_row(row: &sqlx::any::AnyRow) -> Result<DailyRun> {
    Ok(DailyRun {
        name: row.try_get("name")?,
        org: row.try_get("org")?,
        status: RunStatus::parse(&row.try_get::<String, _>("status")?)?,
        scheduled_for: row.try_get("scheduled_for")?,
        started_at: row.try_get("started_at")?,
        stopped_at: row.try_get("stopped_at")?,
        deadline_at: row.try_get("deadline_at")?,
        error: row.try_get("error")?,
        cause: row.try_get("cause")?,
    })
}

impl Store {
    /// The org's flag, or `None` when it was never set.
    pub async fn daily_run_flag(&self, org: &str) -> Result<Option<bool>> {
        let row = sqlx::query("SELECT enabled FROM daily_run_flags WHERE org = $1")
            .bind(org)
            .fetch_optional(self.pool())
            .await?;
        let enabled: Option<i64> = row.map(|r| r.try_get("enabled")).transpose()?;
        Ok(enabled.map(|value| value != 0))
    }

    /// Sets the org's flag (creating its record on first use).
    pub async fn set_daily_run_flag(&self, org: &str, enabled: bool, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO daily_run_flags (org, enabled, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (org) DO UPDATE SET enabled = excluded.enabled, \
             updated_at = excluded.updated_at",
        )
        .bind(org)
        .bind(i64::from(enabled))
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Starts an execution unless the org has a RUNNING one (or the slot was
    /// used): the insert itself decides, through the unique indexes.
    pub async fn start_daily_run(&self, run: &NewDailyRun<'_>) -> Result<StartOutcome> {
        // A RUNNING execution that ends between the refused insert and the
        // look-up frees the org: try again (a few times, then report Taken).
        for _ in 0..3 {
            let inserted = sqlx::query(
                "INSERT INTO daily_runs (name, org, status, scheduled_for, started_at, \
                 deadline_at, lease_owner, lease_expires_at) \
                 VALUES ($1, $2, 'RUNNING', $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
            )
            .bind(run.name)
            .bind(run.org)
            .bind(run.scheduled_for)
            .bind(run.started_at)
            .bind(run.deadline_at)
            .bind(run.holder)
            .bind(run.lease_until)
            .execute(self.pool())
            .await?;
            if inserted.rows_affected() == 1 {
                return Ok(StartOutcome::Started(DailyRun {
                    name: run.name.to_string(),
                    org: run.org.to_string(),
                    status: RunStatus::Running,
                    scheduled_for: run.scheduled_for,
                    started_at: run.started_at,
                    stopped_at: None,
                    deadline_at: run.deadline_at,
                    error: None,
                    cause: None,
                }));
            }
            if let Some(running) = self.running_daily_run(run.org).await? {
                return Ok(StartOutcome::AlreadyRunning(running));
            }
            let slot_used = match run.scheduled_for {
                Some(slot) => {
                    sqlx::query("SELECT name FROM daily_runs WHERE org = $1 AND scheduled_for = $2")
                        .bind(run.org)
                        .bind(slot)
                        .fetch_optional(self.pool())
                        .await?
                        .is_some()
                }
                None => false,
            };
            if slot_used || self.daily_run(run.name).await?.is_some() {
                return Ok(StartOutcome::Taken);
            }
        }
        Ok(StartOutcome::Taken)
    }

    pub async fn daily_run(&self, name: &str) -> Result<Option<DailyRun>> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM daily_runs WHERE name = $1"))
            .bind(name)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// The org's RUNNING execution, if any.
    pub async fn running_daily_run(&self, org: &str) -> Result<Option<DailyRun>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM daily_runs WHERE org = $1 AND status = 'RUNNING'"
        ))
        .bind(org)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// The org's executions, most recent first, at most `limit`; only
    /// SUCCEEDED ones when `succeeded_only`.
    pub async fn daily_runs(
        &self,
        org: &str,
        limit: u32,
        succeeded_only: bool,
    ) -> Result<Vec<DailyRun>> {
        let filter = if succeeded_only {
            " AND status = 'SUCCEEDED'"
        } else {
            ""
        };
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM daily_runs WHERE org = $1{filter} \
             ORDER BY started_at DESC, name DESC LIMIT $2"
        ))
        .bind(org)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// Extends the runner's hold on a RUNNING execution; false when it no
    /// longer holds it (ended meanwhile: TIMED_OUT or ABORTED).
    pub async fn renew_daily_run(
        &self,
        name: &str,
        holder: &str,
        lease_until: i64,
    ) -> Result<bool> {
        self.renew_lease(
            "UPDATE daily_runs SET lease_expires_at = $1 \
             WHERE name = $2 AND lease_owner = $3 AND status = 'RUNNING'",
            name,
            holder,
            lease_until,
        )
        .await
    }

    /// Records how the holder's execution ended; `Lost` when it no longer
    /// held it (the record is left as the other party ended it).
    pub async fn finish_daily_run(
        &self,
        name: &str,
        holder: &str,
        end: &RunEnd,
        now: i64,
    ) -> Result<Finished> {
        let finished = sqlx::query(
            "UPDATE daily_runs SET status = $1, stopped_at = $2, error = $3, cause = $4, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE name = $5 AND lease_owner = $6 AND status = 'RUNNING'",
        )
        .bind(end.status.as_str())
        .bind(now)
        .bind(end.error.as_deref())
        .bind(end.cause.as_deref())
        .bind(name)
        .bind(holder)
        .execute(self.pool())
        .await?;
        Ok(if finished.rows_affected() == 1 {
            Finished::Recorded
        } else {
            Finished::Lost
        })
    }

    /// Ends every RUNNING execution past its deadline TIMED_OUT, then every
    /// one whose runner stopped renewing its hold ABORTED; returns them.
    pub async fn end_stale_daily_runs(&self, now: i64) -> Result<Vec<DailyRun>> {
        let mut ended = Vec::new();
        for (status, error, cause, stale) in [
            (
                RunStatus::TimedOut,
                "States.Timeout",
                "the run went on past its maximum duration (dailyrun.max_duration_s)",
                "deadline_at <= $4",
            ),
            (
                RunStatus::Aborted,
                "Aborted",
                "the server running it stopped before the run ended",
                "lease_expires_at < $4",
            ),
        ] {
            let rows = sqlx::query(&format!(
                "UPDATE daily_runs SET status = $1, stopped_at = $4, error = $2, cause = $3, \
                 lease_owner = NULL, lease_expires_at = NULL \
                 WHERE status = 'RUNNING' AND {stale} RETURNING {COLUMNS}"
            ))
            .bind(status.as_str())
            .bind(error)
            .bind(cause)
            .bind(now)
            .fetch_all(self.pool())
            .await?;
            for row in &rows {
                ended.push(run_from_row(row)?);
            }
        }
        Ok(ended)
    }

    /// Replaces table `table.name` of `table.database_id` by `table` with
    /// `files`, in one transaction that also checks that the run `name` is
    /// still RUNNING, held by `holder` and within its deadline. The replaced
    /// table's files are retired (the sweeper deletes them later, so queries
    /// planned on them finish). False when the run no longer holds (nothing
    /// changed then).
    pub async fn replace_table_for_run(
        &self,
        name: &str,
        holder: &str,
        table: &LakeTable,
        files: &[NewDataFile],
        now: i64,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let holding = sqlx::query(
            "UPDATE daily_runs SET lease_owner = lease_owner \
             WHERE name = $1 AND lease_owner = $2 AND status = 'RUNNING' AND deadline_at > $3",
        )
        .bind(name)
        .bind(holder)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if holding.rows_affected() != 1 {
            return Ok(false);
        }
        match catalog::delete_table(&mut tx, &table.database_id, &table.name, now).await {
            Ok(_) | Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        catalog::insert_table(&mut tx, table).await?;
        catalog::insert_files(&mut tx, &table.id, files, now).await?;
        tx.commit().await?;
        Ok(true)
    }
}
