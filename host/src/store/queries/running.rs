//! A job's life after it is stored: claimed by a worker under a lease (fair
//! shares per org and caller), the lease renewed, the end recorded with its
//! catalog change in one transaction, handed back by a draining replica,
//! ended when its replica died, or cancelled.

use super::{COLUMNS, CatalogWrite, EndColumns, QueryJob, QueryOutcome, job_from_row};
use crate::store::{Backend, Error, Finished, JobCaps, Result, Store, catalog};

impl Store {
    /// Claims a QUEUED job for `holder` until `lease_until` (a RUNNING one
    /// whose lease ran out is not run again: `end_abandoned_queries`). At most one worker gets each job: the
    /// claim is one UPDATE, with `FOR UPDATE SKIP LOCKED` on Postgres; SQLite
    /// serialises writers.
    ///
    /// Fair sharing: a QUEUED job is taken only while `holder` runs fewer
    /// than `caps.per_org` jobs of its org and `caps.per_caller` of its
    /// caller, and the org `holder` runs the fewest jobs of goes first (then
    /// the caller it runs the fewest of, then the oldest job), so one org's flood interleaves with the others'
    /// queries instead of holding every worker.
    pub async fn claim_query(
        &self,
        holder: &str,
        now: i64,
        lease_until: i64,
        caps: JobCaps,
    ) -> Result<Option<QueryJob>> {
        let lock = match self.backend() {
            Backend::Postgres => "FOR UPDATE OF q SKIP LOCKED",
            Backend::Sqlite => "",
        };
        // The holder's running jobs are counted once per claim, not once per
        // queued job: every count reads the RUNNING entries of the state
        // index, dead versions of finished jobs among them, and a hundred
        // queued jobs made each claim read them hundreds of times.
        let sql = format!(
            "WITH by_caller AS (SELECT org, owner_sub, count(*) AS n FROM query_jobs \
                 WHERE state = 'RUNNING' AND lease_owner = $1 GROUP BY org, owner_sub), \
             by_org AS (SELECT org, CAST(sum(n) AS BIGINT) AS n FROM by_caller GROUP BY org) \
             UPDATE query_jobs SET state = 'RUNNING', lease_owner = $1, lease_expires_at = $2, \
             started_at = COALESCE(started_at, $3), attempts = attempts + 1 \
             WHERE id = (SELECT q.id FROM query_jobs q \
                 LEFT JOIN by_org o ON o.org = q.org \
                 LEFT JOIN by_caller c ON c.org = q.org AND c.owner_sub = q.owner_sub \
                 WHERE q.state = 'QUEUED' AND COALESCE(o.n, 0) < $4 AND COALESCE(c.n, 0) < $5 \
                 ORDER BY COALESCE(o.n, 0), COALESCE(c.n, 0), q.submitted_at, q.id LIMIT 1 {lock}) \
             RETURNING {COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(holder)
            .bind(lease_until)
            .bind(now)
            .bind(caps.per_org)
            .bind(caps.per_caller)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Extends a lease the worker still holds; false when it lost the job.
    pub async fn renew_query_lease(
        &self,
        id: &str,
        holder: &str,
        lease_until: i64,
    ) -> Result<bool> {
        self.renew_lease(
            "UPDATE query_jobs SET lease_expires_at = $1 \
             WHERE id = $2 AND lease_owner = $3 AND state = 'RUNNING'",
            id,
            holder,
            lease_until,
        )
        .await
    }

    /// Records the end of a run together with its catalog change, in one
    /// transaction; `Lost` (and nothing written) when the worker no longer holds
    /// the job (it was cancelled, or its lease expired and another worker took it).
    pub async fn finish_query(
        &self,
        id: &str,
        holder: &str,
        outcome: &QueryOutcome,
        write: &CatalogWrite,
        now: i64,
    ) -> Result<Finished> {
        let ended = EndColumns::of(outcome);
        let end = sqlx::query(
            "UPDATE query_jobs SET state = $1, state_change_reason = $2, result_path = $3, \
             result_rows = $4, result_bytes = $5, result_columns_json = $6, completed_at = $7, \
             reuse_key = $10, workers = $11, result_csv = $12, result_arrow = $13, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $8 AND lease_owner = $9 AND state = 'RUNNING'",
        )
        .bind(ended.state)
        .bind(ended.reason)
        .bind(ended.path)
        .bind(ended.rows)
        .bind(ended.bytes)
        .bind(ended.columns)
        .bind(now)
        .bind(id)
        .bind(holder)
        .bind(ended.reuse_key)
        .bind(ended.workers)
        .bind(ended.csv_in_row())
        .bind(ended.arrow_in_row());
        if matches!(write, CatalogWrite::None) {
            // Nothing else to write: one statement is its own transaction.
            let done = end.execute(self.pool()).await?;
            return Ok(if done.rows_affected() == 1 {
                Finished::Recorded
            } else {
                Finished::Lost
            });
        }
        let mut tx = self.begin_write().await?;
        let done = end.execute(&mut *tx).await?;
        if done.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(Finished::Lost);
        }
        match write {
            CatalogWrite::None => {}
            CatalogWrite::CreateTable { table } => catalog::insert_table(&mut tx, table).await?,
            CatalogWrite::CreateTableWithFiles { table, files } => {
                catalog::insert_table(&mut tx, table).await?;
                catalog::insert_files(&mut tx, &table.id, files, now).await?;
            }
            CatalogWrite::Append { table_id, files } => {
                catalog::insert_files(&mut tx, table_id, files, now).await?;
            }
            CatalogWrite::DropTables { tables } => {
                for (database_id, name) in tables {
                    match catalog::delete_table(&mut tx, database_id, name, now).await {
                        Ok(_) => {}
                        Err(Error::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            CatalogWrite::AlterTable {
                table_id,
                new_name,
                new_schema_json,
            } => {
                catalog::alter_table(
                    &mut tx,
                    table_id,
                    new_name.as_deref(),
                    new_schema_json.as_deref(),
                )
                .await?;
            }
        }
        tx.commit().await?;
        Ok(Finished::Recorded)
    }

    /// Gives a job `holder` runs back to the queue (a draining replica): any
    /// replica claims it next. False when `holder` no longer held it.
    pub async fn hand_back_query(&self, id: &str, holder: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE query_jobs SET state = 'QUEUED', lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $1 AND lease_owner = $2 AND state = 'RUNNING'",
        )
        .bind(id)
        .bind(holder)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Ends FAILED with `reason` every RUNNING job whose lease ran out (its
    /// replica died without handing it back); returns them.
    pub async fn end_abandoned_queries(&self, now: i64, reason: &str) -> Result<Vec<QueryJob>> {
        let rows = sqlx::query(&format!(
            "UPDATE query_jobs SET state = 'FAILED', state_change_reason = $1, completed_at = $2, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE state = 'RUNNING' AND lease_expires_at < $2 RETURNING {COLUMNS}"
        ))
        .bind(reason)
        .bind(now)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(job_from_row).collect()
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
