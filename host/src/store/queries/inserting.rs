//! Storing new query jobs: QUEUED for any replica's worker, RUNNING on the
//! submitting replica, or already final (cancelled before it ran, or run and
//! ended before it was stored). One INSERT each, returned without a read.

use super::{Delivery, EndColumns, NewQuery, QueryJob, QueryOutcome, QueryState, ResultInRow};
use crate::store::{Result, Store};

/// The state a job is stored in when it is inserted.
enum Inserted<'a> {
    Queued,
    /// Run at once by the submitting replica, under its lease.
    Running {
        holder: &'a str,
        lease_until: i64,
    },
    /// Cancelled before it ran (a streamed statement whose client cancelled
    /// it before fetching its rows): final, without a lease.
    Cancelled,
    /// Run by the submitting replica before it was stored, and ended (a
    /// waited query that ended at once): final, without a lease.
    Ended {
        started_at: i64,
        outcome: &'a QueryOutcome,
    },
}

impl Store {
    /// Inserts a QUEUED job.
    pub async fn insert_query(&self, query: &NewQuery, now: i64) -> Result<QueryJob> {
        self.insert_job(query, now, Inserted::Queued, Delivery::Stored)
            .await
    }

    /// Inserts a job already RUNNING, held by `holder` until `lease_until`
    /// (the submitting replica has a free worker and runs it at once).
    pub async fn insert_running_query(
        &self,
        query: &NewQuery,
        holder: &str,
        now: i64,
        lease_until: i64,
    ) -> Result<QueryJob> {
        let running = Inserted::Running {
            holder,
            lease_until,
        };
        self.insert_job(query, now, running, Delivery::Stored).await
    }

    /// Inserts a job RUNNING on `holder` whose rows go to a client as it
    /// runs (`delivery`), never to result files.
    pub async fn insert_streamed_query(
        &self,
        query: &NewQuery,
        delivery: Delivery,
        holder: &str,
        now: i64,
        lease_until: i64,
    ) -> Result<QueryJob> {
        let running = Inserted::Running {
            holder,
            lease_until,
        };
        self.insert_job(query, now, running, delivery).await
    }

    /// Inserts a streamed job CANCELLED before it ran: its client cancelled
    /// it before asking for its rows, and asking later finds it cancelled.
    pub async fn insert_cancelled_query(
        &self,
        query: &NewQuery,
        delivery: Delivery,
        now: i64,
    ) -> Result<QueryJob> {
        self.insert_job(query, now, Inserted::Cancelled, delivery)
            .await
    }

    /// Inserts a job that already ran (one attempt, from `started_at`) and
    /// ended at `now` with `outcome`, changing nothing in the catalog: a
    /// waited query the submitting replica ran before storing it, so its
    /// whole life is one write.
    pub async fn insert_ended_query(
        &self,
        query: &NewQuery,
        started_at: i64,
        outcome: &QueryOutcome,
        now: i64,
    ) -> Result<QueryJob> {
        let ended = Inserted::Ended {
            started_at,
            outcome,
        };
        self.insert_job(query, now, ended, Delivery::Stored).await
    }

    /// One INSERT for all of them. The job is returned as stored, without
    /// reading it.
    async fn insert_job(
        &self,
        query: &NewQuery,
        now: i64,
        inserted: Inserted<'_>,
        delivery: Delivery,
    ) -> Result<QueryJob> {
        let cancelled = EndColumns::without_result("CANCELLED", None);
        let (state, started_at, attempts, lease, ended) = match inserted {
            Inserted::Queued => (QueryState::Queued, None, 0, None, None),
            Inserted::Cancelled => (QueryState::Cancelled, None, 0, None, Some(cancelled)),
            Inserted::Running {
                holder,
                lease_until,
            } => (
                QueryState::Running,
                Some(now),
                1,
                Some((holder, lease_until)),
                None,
            ),
            Inserted::Ended {
                started_at,
                outcome,
            } => {
                let state = match outcome {
                    QueryOutcome::Succeeded { .. } => QueryState::Succeeded,
                    QueryOutcome::Failed { .. } => QueryState::Failed,
                };
                (
                    state,
                    Some(started_at),
                    1,
                    None,
                    Some(EndColumns::of(outcome)),
                )
            }
        };
        let end = ended.unwrap_or(EndColumns::without_result(state.as_str(), None));
        // A job stored at its end was submitted when it started (or now,
        // when it never started).
        let (submitted_at, completed_at) = match ended {
            Some(_) => (started_at.unwrap_or(now), Some(now)),
            None => (now, None),
        };
        sqlx::query(
            "INSERT INTO query_jobs (id, org, zone, owner_sub, access_fingerprint, sql_text, \
             database_name, statement_type, access_json, state, submitted_at, started_at, \
             lease_owner, lease_expires_at, attempts, state_change_reason, completed_at, \
             result_path, result_rows, result_bytes, result_columns_json, reuse_key, delivery, \
             workers, result_csv, result_arrow, result_first) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
             $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27)",
        )
        .bind(&query.id)
        .bind(&query.org)
        .bind(query.zone.as_deref().unwrap_or(""))
        .bind(&query.owner_sub)
        .bind(&query.access_fingerprint)
        .bind(&query.sql)
        .bind(&query.database)
        .bind(&query.statement_type)
        .bind(&query.access_json)
        .bind(state.as_str())
        .bind(submitted_at)
        .bind(started_at)
        .bind(lease.map(|(holder, _)| holder))
        .bind(lease.map(|(_, until)| until))
        .bind(attempts)
        .bind(end.reason)
        .bind(completed_at)
        .bind(end.path)
        .bind(end.rows)
        .bind(end.bytes)
        .bind(end.columns)
        .bind(end.reuse_key)
        .bind(delivery.as_str())
        .bind(end.workers)
        .bind(end.csv_in_row())
        .bind(end.arrow_in_row())
        .bind(query.result_first.as_str())
        .execute(self.pool())
        .await?;
        Ok(QueryJob {
            query: query.clone(),
            state,
            state_change_reason: end.reason.map(str::to_string),
            submitted_at,
            started_at,
            completed_at,
            result_path: end.path.map(str::to_string),
            result_rows: end.rows,
            result_bytes: end.bytes,
            result_columns_json: end.columns.map(str::to_string),
            attempts,
            reused_query_id: None,
            delivery,
            workers: end.workers,
            in_row: end.in_row.map(ResultInRow::sizes).unwrap_or_default(),
            result_expired_at: None,
        })
    }
}
