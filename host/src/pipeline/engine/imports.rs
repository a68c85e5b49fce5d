//! The host side of every WIT import a step may call: the load world's
//! staged-files, staged-sql, lake-schema and lake-append, the daily world's
//! lake-sql, and log for both. Each one first checks the step's grants and
//! answers `not-granted` instead of data; the data work itself is the
//! `LoadData` or `DailyData` behind the store.
//!
//! It must never answer an import before its grant check, nor let a step's
//! log lines past the run's budget into the server's log.

use super::{
    bindings::lakehost::pipeline::{
        lake_append, lake_schema, log, staged_files, staged_sql,
        types::{self, CapabilityError},
    },
    daily_bindings::lakehost::pipeline::lake_sql,
    sandbox::{DailyState, LoadState, StepState},
    verdict::cut,
};
use crate::pipeline::{ColumnInfo, manifest::Capability};

/// What one run of a step may write to the server's log, and the longest
/// line kept: a step cannot fill the server's disk.
pub(super) const LOG_BUDGET_BYTES: usize = 64 * 1024;
const LOG_LINE_BYTES: usize = 4096;

fn wit_column(column: ColumnInfo) -> types::Column {
    types::Column {
        name: column.name,
        sql_type: column.sql_type,
        nullable: column.nullable,
    }
}

impl<D: ?Sized + Send> types::Host for StepState<D> {}

impl staged_files::Host for LoadState {
    fn list_files(&mut self) -> Result<Vec<types::StagedFile>, CapabilityError> {
        self.grant(Capability::StagedFiles)?;
        let files = self.data.list_files().map_err(CapabilityError::Failed)?;
        Ok(files
            .into_iter()
            .map(|f| types::StagedFile {
                file_key: f.file_key,
                size_bytes: f.size_bytes,
                uploaded: f.uploaded,
            })
            .collect())
    }

    fn parquet_columns(&mut self, file_key: String) -> Result<Vec<types::Column>, CapabilityError> {
        self.grant(Capability::StagedFiles)?;
        let columns = self
            .data
            .parquet_columns(&file_key)
            .map_err(CapabilityError::Failed)?;
        Ok(columns.into_iter().map(wit_column).collect())
    }
}

impl staged_sql::Host for LoadState {
    fn query(
        &mut self,
        sql: String,
        max_rows: u32,
    ) -> Result<Vec<Vec<Option<String>>>, CapabilityError> {
        self.grant(Capability::StagedSql)?;
        self.data
            .query(&sql, max_rows)
            .map_err(CapabilityError::Failed)
    }
}

impl lake_schema::Host for LoadState {
    fn table_columns(&mut self) -> Result<Option<Vec<types::Column>>, CapabilityError> {
        self.grant(Capability::LakeSchema)?;
        let columns = self.data.table_columns().map_err(CapabilityError::Failed)?;
        Ok(columns.map(|cs| cs.into_iter().map(wit_column).collect()))
    }
}

impl lake_append::Host for LoadState {
    fn append_staged(&mut self) -> Result<u64, CapabilityError> {
        self.grant(Capability::LakeAppend)?;
        self.data.append_staged().map_err(CapabilityError::Failed)
    }
}

impl lake_sql::Host for DailyState {
    fn query(
        &mut self,
        sql: String,
        max_rows: u32,
    ) -> Result<Vec<Vec<Option<String>>>, CapabilityError> {
        self.grant(Capability::LakeSql)?;
        self.data
            .query(&sql, max_rows)
            .map_err(CapabilityError::Failed)
    }

    fn refresh_table(&mut self, table: String, sql: String) -> Result<u64, CapabilityError> {
        self.grant(Capability::LakeSql)?;
        self.data
            .refresh_table(&table, &sql)
            .map_err(CapabilityError::Failed)
    }
}

impl<D: ?Sized + Send> log::Host for StepState<D> {
    fn write(&mut self, level: log::Level, message: String) {
        if !self.grants.contains(&Capability::Log) || self.logged_bytes >= LOG_BUDGET_BYTES {
            return;
        }
        let message = cut(message, LOG_LINE_BYTES);
        self.logged_bytes += message.len();
        let (step, job) = (&self.step, &self.job);
        if self.logged_bytes >= LOG_BUDGET_BYTES {
            tracing::warn!(%step, %job, "the step's log budget of {LOG_BUDGET_BYTES} bytes is spent; its further lines are dropped");
        }
        match level {
            log::Level::Debug => tracing::debug!(%step, %job, "{message}"),
            log::Level::Info => tracing::info!(%step, %job, "{message}"),
            log::Level::Warn => tracing::warn!(%step, %job, "{message}"),
            log::Level::Error => tracing::error!(%step, %job, "{message}"),
        }
    }
}
