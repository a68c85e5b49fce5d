//! Query jobs: durable rows that any replica's worker can claim with a lease
//! (DESIGN.md "Jobs"). A job moves QUEUED → RUNNING → SUCCEEDED / FAILED, or to
//! CANCELLED from any non-final state. A RUNNING job whose lease ran out (its
//! worker died) can be claimed again; every claim counts an attempt so the
//! caller can give up after a few.

use sqlx::Row as _;

use super::{Backend, Error, Result, Store};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl QueryState {
    pub fn as_str(self) -> &'static str {
        match self {
            QueryState::Queued => "QUEUED",
            QueryState::Running => "RUNNING",
            QueryState::Succeeded => "SUCCEEDED",
            QueryState::Failed => "FAILED",
            QueryState::Cancelled => "CANCELLED",
        }
    }

    pub fn is_final(self) -> bool {
        matches!(
            self,
            QueryState::Succeeded | QueryState::Failed | QueryState::Cancelled
        )
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "QUEUED" => QueryState::Queued,
            "RUNNING" => QueryState::Running,
            "SUCCEEDED" => QueryState::Succeeded,
            "FAILED" => QueryState::Failed,
            "CANCELLED" => QueryState::Cancelled,
            other => return Err(Error::Corrupt(format!("query state {other:?}"))),
        })
    }
}

/// What a caller submits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewQuery {
    pub id: String,
    pub org: String,
    pub zone: Option<String>,
    pub owner_sub: String,
    /// Roles and service clients at submission (results are tied to them).
    pub access_fingerprint: String,
    pub sql: String,
    pub database: String,
    pub statement_type: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryJob {
    pub query: NewQuery,
    pub state: QueryState,
    pub state_change_reason: Option<String>,
    pub submitted_at: i64,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub result_path: Option<String>,
    pub result_rows: Option<i64>,
    pub attempts: i64,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryOutcome {
    Succeeded { result_path: String, rows: i64 },
    Failed { reason: String },
}

const COLUMNS: &str = "id, org, zone, owner_sub, access_fingerprint, sql_text, database_name, \
    statement_type, state, state_change_reason, submitted_at, started_at, completed_at, \
    result_path, result_rows, CAST(attempts AS BIGINT) AS attempts";

fn job_from_row(row: &sqlx::any::AnyRow) -> Result<QueryJob> {
    let zone: String = row.try_get("zone")?;
    Ok(QueryJob {
        query: NewQuery {
            id: row.try_get("id")?,
            org: row.try_get("org")?,
            zone: (!zone.is_empty()).then_some(zone),
            owner_sub: row.try_get("owner_sub")?,
            access_fingerprint: row.try_get("access_fingerprint")?,
            sql: row.try_get("sql_text")?,
            database: row.try_get("database_name")?,
            statement_type: row.try_get("statement_type")?,
        },
        state: QueryState::parse(&row.try_get::<String, _>("state")?)?,
        state_change_reason: row.try_get("state_change_reason")?,
        submitted_at: row.try_get("submitted_at")?,
        started_at: row.try_get("started_at")?,
        completed_at: row.try_get("completed_at")?,
        result_path: row.try_get("result_path")?,
        result_rows: row.try_get("result_rows")?,
        attempts: row.try_get("attempts")?,
    })
}

impl Store {
    pub async fn insert_query(&self, query: &NewQuery, now: i64) -> Result<QueryJob> {
        sqlx::query(
            "INSERT INTO query_jobs (id, org, zone, owner_sub, access_fingerprint, sql_text, \
             database_name, statement_type, state, submitted_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'QUEUED', $9)",
        )
        .bind(&query.id)
        .bind(&query.org)
        .bind(query.zone.as_deref().unwrap_or(""))
        .bind(&query.owner_sub)
        .bind(&query.access_fingerprint)
        .bind(&query.sql)
        .bind(&query.database)
        .bind(&query.statement_type)
        .bind(now)
        .execute(self.pool())
        .await?;
        self.query_job(&query.id)
            .await?
            .ok_or_else(|| Error::Corrupt("inserted query vanished".into()))
    }

    pub async fn query_job(&self, id: &str) -> Result<Option<QueryJob>> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM query_jobs WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Claims the oldest QUEUED job, or a RUNNING one whose lease has run out,
    /// for `worker` until `lease_until`. At most one worker gets each job: the
    /// claim is one UPDATE, with `FOR UPDATE SKIP LOCKED` on Postgres; SQLite
    /// serialises writers.
    pub async fn claim_query(
        &self,
        worker: &str,
        now: i64,
        lease_until: i64,
    ) -> Result<Option<QueryJob>> {
        let lock = match self.backend() {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let sql = format!(
            "UPDATE query_jobs SET state = 'RUNNING', lease_owner = $1, lease_expires_at = $2, \
             started_at = COALESCE(started_at, $3), attempts = attempts + 1 \
             WHERE id = (SELECT id FROM query_jobs \
                 WHERE state = 'QUEUED' OR (state = 'RUNNING' AND lease_expires_at < $3) \
                 ORDER BY submitted_at, id LIMIT 1 {lock}) \
             RETURNING {COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(worker)
            .bind(lease_until)
            .bind(now)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Extends a lease the worker still holds; false when it lost the job.
    pub async fn renew_query_lease(
        &self,
        id: &str,
        worker: &str,
        lease_until: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE query_jobs SET lease_expires_at = $1 \
             WHERE id = $2 AND lease_owner = $3 AND state = 'RUNNING'",
        )
        .bind(lease_until)
        .bind(id)
        .bind(worker)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records the end of a run; false when the worker no longer holds the job
    /// (it was cancelled, or its lease expired and another worker took it).
    pub async fn finish_query(
        &self,
        id: &str,
        worker: &str,
        outcome: &QueryOutcome,
        now: i64,
    ) -> Result<bool> {
        let (state, reason, path, rows) = match outcome {
            QueryOutcome::Succeeded { result_path, rows } => {
                ("SUCCEEDED", None, Some(result_path.as_str()), Some(*rows))
            }
            QueryOutcome::Failed { reason } => ("FAILED", Some(reason.as_str()), None, None),
        };
        let done = sqlx::query(
            "UPDATE query_jobs SET state = $1, state_change_reason = $2, result_path = $3, \
             result_rows = $4, completed_at = $5, lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $6 AND lease_owner = $7 AND state = 'RUNNING'",
        )
        .bind(state)
        .bind(reason)
        .bind(path)
        .bind(rows)
        .bind(now)
        .bind(id)
        .bind(worker)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Cancels a job that is not final yet; false when it already was.
    pub async fn cancel_query(&self, id: &str, now: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE query_jobs SET state = 'CANCELLED', completed_at = $1, lease_owner = NULL, \
             lease_expires_at = NULL WHERE id = $2 AND state IN ('QUEUED', 'RUNNING')",
        )
        .bind(now)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }
}
