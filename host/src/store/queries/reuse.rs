//! Result reuse in the store: the newest earlier result with the same
//! reuse key, and a new job that answers with it without running.

use super::{COLUMNS, Delivery, NewQuery, QueryJob, QueryState, job_from_row};
use crate::store::{Result, Store};

impl Store {
    /// The newest SUCCEEDED query with `reuse_key` that ended at or after
    /// `ended_since` (the key covers org, zone and access: see `reuse.rs`).
    pub async fn reusable_query(
        &self,
        reuse_key: &str,
        ended_since: i64,
    ) -> Result<Option<QueryJob>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM query_jobs WHERE reuse_key = $1 AND completed_at >= $2 \
             AND state = 'SUCCEEDED' AND result_expired_at IS NULL ORDER BY completed_at DESC LIMIT 1"
        ))
        .bind(reuse_key)
        .bind(ended_since)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Inserts `query` SUCCEEDED at once with the result of `source`, which
    /// it names as the query it reused (a small result's bytes are copied
    /// from its row). It never runs and holds no lease.
    pub async fn insert_reused_query(
        &self,
        query: &NewQuery,
        source: &QueryJob,
        now: i64,
    ) -> Result<QueryJob> {
        sqlx::query(
            "INSERT INTO query_jobs (id, org, zone, owner_sub, access_fingerprint, sql_text, \
             database_name, statement_type, access_json, state, submitted_at, started_at, \
             completed_at, result_path, result_rows, result_bytes, result_columns_json, \
             attempts, reused_query_id, result_csv, result_arrow, result_first) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'SUCCEEDED', $10, $10, $10, $11, $12, \
             $13, $14, 0, $15, (SELECT result_csv FROM query_jobs WHERE id = $15), \
             (SELECT result_arrow FROM query_jobs WHERE id = $15), $16)",
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
        .bind(now)
        .bind(source.result_path.as_deref())
        .bind(source.result_rows)
        .bind(source.result_bytes)
        .bind(source.result_columns_json.as_deref())
        .bind(&source.query.id)
        .bind(source.query.result_first.as_str())
        .execute(self.pool())
        .await?;
        Ok(QueryJob {
            // The source's files, so its way of making the other forms.
            query: NewQuery {
                result_first: source.query.result_first,
                ..query.clone()
            },
            state: QueryState::Succeeded,
            state_change_reason: None,
            submitted_at: now,
            started_at: Some(now),
            completed_at: Some(now),
            result_path: source.result_path.clone(),
            result_rows: source.result_rows,
            result_bytes: source.result_bytes,
            result_columns_json: source.result_columns_json.clone(),
            attempts: 0,
            reused_query_id: Some(source.query.id.clone()),
            delivery: Delivery::Stored,
            workers: None,
            in_row: source.in_row,
            result_expired_at: None,
        })
    }
}
