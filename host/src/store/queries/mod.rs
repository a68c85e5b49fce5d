//! Query jobs: durable rows that any replica's worker can claim with a lease
//! (DESIGN.md "Jobs"). A job moves QUEUED → RUNNING → SUCCEEDED / FAILED, or to
//! CANCELLED from any non-final state. A RUNNING job whose lease ran out (its
//! worker died) can be claimed again; every claim counts an attempt so the
//! caller can give up after a few. A streamed job (`Delivery::FlightSql`) is
//! inserted RUNNING by the replica its client reads from and never QUEUED.

use sqlx::Row as _;

mod result_row;

use result_row::EndColumns;
pub use result_row::{KeptInRow, ResultInRow, RowForm};

use super::{
    Backend, Error, Finished, JobCaps, Result, Store,
    catalog::{self, LakeTable, NewDataFile},
};

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

/// Where a query's rows go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Into the result files that pages, downloads and links read.
    Stored,
    /// To its Flight SQL client while it runs; no result is kept.
    FlightSql,
    /// To its Postgres client while it runs; no result is kept.
    PgWire,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Stored => "stored",
            Delivery::FlightSql => "flight-sql",
            Delivery::PgWire => "pg-wire",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "stored" => Delivery::Stored,
            "flight-sql" => Delivery::FlightSql,
            "pg-wire" => Delivery::PgWire,
            other => return Err(Error::Corrupt(format!("query delivery {other:?}"))),
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
    /// The caller's roles and service clients, as JSON, so that any replica's
    /// worker plans the query with the submitter's access.
    pub access_json: String,
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
    pub result_bytes: Option<i64>,
    /// The result's columns (name, type, nullability) as JSON.
    pub result_columns_json: Option<String>,
    pub attempts: i64,
    /// Set when this query answered with another's result (result reuse).
    pub reused_query_id: Option<String>,
    pub delivery: Delivery,
    /// How many workers a distributed read ran on; `None` when it ran on
    /// one replica alone.
    pub workers: Option<i64>,
    /// The forms of a small result kept in this row instead of the lake.
    pub in_row: KeptInRow,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryOutcome {
    Succeeded {
        /// The result CSV; none for a streamed query (`Delivery`).
        result_path: Option<String>,
        rows: i64,
        bytes: i64,
        columns_json: String,
        /// Set on reads whose result later queries may reuse.
        reuse_key: Option<String>,
        /// The workers of a distributed read (`QueryJob::workers`).
        workers: Option<i64>,
        /// The result's forms kept in the row instead of the lake.
        in_row: ResultInRow,
    },
    Failed {
        reason: String,
    },
}

/// A catalog change a statement makes, applied in the same transaction as the
/// job's SUCCEEDED state: a crash leaves both or neither, so a query that is
/// run again after a crash never writes its rows twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogWrite {
    None,
    CreateTable {
        table: LakeTable,
    },
    /// CREATE TABLE AS: the new table and its files.
    CreateTableWithFiles {
        table: LakeTable,
        files: Vec<NewDataFile>,
    },
    Append {
        table_id: String,
        files: Vec<NewDataFile>,
    },
    /// (database id, table name) pairs; missing tables are skipped.
    DropTables {
        tables: Vec<(String, String)>,
    },
    AlterTable {
        table_id: String,
        new_name: Option<String>,
        new_schema_json: Option<String>,
    },
}

const COLUMNS: &str = "id, org, zone, owner_sub, access_fingerprint, sql_text, database_name, \
    statement_type, state, state_change_reason, submitted_at, started_at, completed_at, \
    result_path, result_rows, result_bytes, result_columns_json, access_json, \
    CAST(attempts AS BIGINT) AS attempts, reused_query_id, delivery, workers, \
    CAST(length(result_csv) AS BIGINT) AS csv_in_row_bytes, \
    CAST(length(result_arrow) AS BIGINT) AS arrow_in_row_bytes";

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
            access_json: row.try_get("access_json")?,
        },
        state: QueryState::parse(&row.try_get::<String, _>("state")?)?,
        state_change_reason: row.try_get("state_change_reason")?,
        submitted_at: row.try_get("submitted_at")?,
        started_at: row.try_get("started_at")?,
        completed_at: row.try_get("completed_at")?,
        result_path: row.try_get("result_path")?,
        result_rows: row.try_get("result_rows")?,
        result_bytes: row.try_get("result_bytes")?,
        result_columns_json: row.try_get("result_columns_json")?,
        attempts: row.try_get("attempts")?,
        reused_query_id: row.try_get("reused_query_id")?,
        delivery: Delivery::parse(&row.try_get::<String, _>("delivery")?)?,
        workers: row.try_get("workers")?,
        in_row: KeptInRow {
            csv_bytes: row.try_get("csv_in_row_bytes")?,
            arrow_bytes: row.try_get("arrow_in_row_bytes")?,
        },
    })
}

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
             workers, result_csv, result_arrow) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
             $17, $18, $19, $20, $21, $22, $23, $24, $25, $26)",
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
        })
    }

    pub async fn query_job(&self, id: &str) -> Result<Option<QueryJob>> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM query_jobs WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

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

    /// The newest SUCCEEDED query with `reuse_key` that ended at or after
    /// `ended_since` (the key covers org, zone and access: see `reuse.rs`).
    pub async fn reusable_query(
        &self,
        reuse_key: &str,
        ended_since: i64,
    ) -> Result<Option<QueryJob>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM query_jobs WHERE reuse_key = $1 AND completed_at >= $2 \
             AND state = 'SUCCEEDED' ORDER BY completed_at DESC LIMIT 1"
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
             attempts, reused_query_id, result_csv, result_arrow) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'SUCCEEDED', $10, $10, $10, $11, $12, \
             $13, $14, 0, $15, (SELECT result_csv FROM query_jobs WHERE id = $15), \
             (SELECT result_arrow FROM query_jobs WHERE id = $15))",
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
        .execute(self.pool())
        .await?;
        Ok(QueryJob {
            query: query.clone(),
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
        })
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
