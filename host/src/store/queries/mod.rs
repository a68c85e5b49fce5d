//! Query jobs: durable rows that any replica's worker can claim with a lease
//! (DESIGN.md "Jobs"). A job moves QUEUED → RUNNING → SUCCEEDED / FAILED, or to
//! CANCELLED from any non-final state. A RUNNING job whose lease ran out (its
//! worker died) can be claimed again; every claim counts an attempt so the
//! caller can give up after a few. A streamed job (`Delivery::FlightSql`) is
//! inserted RUNNING by the replica its client reads from and never QUEUED.
//!
//! This file holds the job's types and how a row reads back; `inserting`
//! stores new jobs, `running` moves them through claims, leases and ends,
//! `reuse` finds and copies an earlier result, `result_row` is what an end
//! writes.

use sqlx::Row as _;

mod inserting;
mod result_row;
mod reuse;
mod running;

use result_row::EndColumns;
pub use result_row::{KeptInRow, ResultInRow, RowForm};

use super::{
    Error, Result, Store,
    catalog::{LakeTable, NewDataFile},
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

/// The file a query writes its result to while it runs; every other form
/// is made from it when first asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResultFirst {
    /// The spec's CSV (typed copies read it back).
    #[default]
    Csv,
    /// The Arrow IPC stream, and the CSV only while it is small
    /// (`Prefer: result-format=arrow`).
    Arrow,
    /// The Parquet file, and the CSV only while it is small
    /// (`Prefer: result-format=parquet`).
    Parquet,
}

impl ResultFirst {
    pub fn as_str(self) -> &'static str {
        match self {
            ResultFirst::Csv => "csv",
            ResultFirst::Arrow => "arrow",
            ResultFirst::Parquet => "parquet",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "csv" => ResultFirst::Csv,
            "arrow" => ResultFirst::Arrow,
            "parquet" => ResultFirst::Parquet,
            other => return Err(Error::Corrupt(format!("query result_first {other:?}"))),
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
    /// The file its result is written to while it runs (a reused job
    /// answers with its source's files, so it has its source's).
    pub result_first: ResultFirst,
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
    /// When the retention sweep deleted the result (`retention/`).
    pub result_expired_at: Option<i64>,
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
    CAST(length(result_arrow) AS BIGINT) AS arrow_in_row_bytes, result_expired_at, result_first";

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
            result_first: ResultFirst::parse(&row.try_get::<String, _>("result_first")?)?,
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
        result_expired_at: row.try_get("result_expired_at")?,
    })
}

impl Store {
    pub async fn query_job(&self, id: &str) -> Result<Option<QueryJob>> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM query_jobs WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }
}
