//! The host side of every WIT import a step may call: the load world's
//! staged-files, staged-sql, lake-schema and lake-append, the daily world's
//! lake-sql, and log for both. Each one first checks the step's grants and
//! answers `not-granted` instead of data; the data work itself is the
//! `LoadData` or `DailyData` behind the store, run by `host_call` so that
//! the step's time limit and its run's stop end it (a trap ends the step).
//!
//! It must never answer an import before its grant check, nor let a step's
//! log lines past the run's budget into the server's log.

use std::future::Future;

use super::{
    bindings::lakehost::pipeline::{
        lake_append, lake_schema, log, staged_files, staged_sql,
        types::{self, CapabilityError},
    },
    daily_bindings::lakehost::pipeline::lake_sql,
    sandbox::{DailyState, LoadState, StepState},
    verdict::cut,
};
use crate::pipeline::{ColumnInfo, DataError, manifest::Capability};

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

/// An import's answer: refused or failed for the step to handle, or a
/// trap (`Err`) that ends the step.
type Answer<T> = wasmtime::Result<Result<T, CapabilityError>>;

/// A failed data call as the step is told it: the error's text (the WIT
/// carries no more).
fn failed(error: DataError) -> CapabilityError {
    CapabilityError::Failed(error.to_string())
}

impl<D: ?Sized> StepState<D> {
    /// The answer of a capability call: the grant checked, then the data
    /// side's work, which the step's time limit or its run's stop ends.
    fn answer<'a, T, F>(
        &'a self,
        capability: Capability,
        work: impl FnOnce(&'a D) -> F,
    ) -> Answer<T>
    where
        F: Future<Output = Result<T, DataError>> + 'a,
    {
        if let Err(refused) = self.grant(capability) {
            return Ok(Err(refused));
        }
        let answer = self.host_call(work(self.data.as_ref()))?;
        Ok(answer.map_err(failed))
    }
}

impl<D: ?Sized + Send> types::Host for StepState<D> {}

impl staged_files::Host for LoadState {
    fn list_files(&mut self) -> Answer<Vec<types::StagedFile>> {
        if let Err(refused) = self.grant(Capability::StagedFiles) {
            return Ok(Err(refused));
        }
        let files = self.data.list_files().map_err(failed);
        Ok(files.map(|files| {
            files
                .into_iter()
                .map(|f| types::StagedFile {
                    file_key: f.file_key,
                    size_bytes: f.size_bytes,
                    uploaded: f.uploaded,
                })
                .collect()
        }))
    }

    fn parquet_columns(&mut self, file_key: String) -> Answer<Vec<types::Column>> {
        let columns = self.answer(Capability::StagedFiles, |data| {
            data.parquet_columns(&file_key)
        })?;
        Ok(columns.map(|cs| cs.into_iter().map(wit_column).collect()))
    }
}

impl staged_sql::Host for LoadState {
    fn query(&mut self, sql: String, max_rows: u32) -> Answer<Vec<Vec<Option<String>>>> {
        self.answer(Capability::StagedSql, |data| data.query(&sql, max_rows))
    }
}

impl lake_schema::Host for LoadState {
    fn table_columns(&mut self) -> Answer<Option<Vec<types::Column>>> {
        let columns = self.answer(Capability::LakeSchema, |data| data.table_columns())?;
        Ok(columns.map(|cs| cs.map(|cs| cs.into_iter().map(wit_column).collect())))
    }
}

impl lake_append::Host for LoadState {
    fn append_staged(&mut self) -> Answer<u64> {
        self.answer(Capability::LakeAppend, |data| data.append_staged())
    }
}

impl lake_sql::Host for DailyState {
    fn query(&mut self, sql: String, max_rows: u32) -> Answer<Vec<Vec<Option<String>>>> {
        self.answer(Capability::LakeSql, |data| data.query(&sql, max_rows))
    }

    fn refresh_table(&mut self, table: String, sql: String) -> Answer<u64> {
        self.answer(Capability::LakeSql, |data| data.refresh_table(&table, &sql))
    }
}

impl<D: ?Sized + Send> log::Host for StepState<D> {
    fn write(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        if !self.grants.contains(&Capability::Log) || self.logged_bytes >= LOG_BUDGET_BYTES {
            return Ok(());
        }
        let message = cut(message, LOG_LINE_BYTES);
        self.logged_bytes += message.len();
        let (step, job) = (&self.step, &self.job);
        if self.logged_bytes >= LOG_BUDGET_BYTES {
            tracing::warn!(%step, job_id = %job, "the step's log budget of {LOG_BUDGET_BYTES} bytes is spent; its further lines are dropped");
        }
        match level {
            log::Level::Debug => tracing::debug!(%step, job_id = %job, "{message}"),
            log::Level::Info => tracing::info!(%step, job_id = %job, "{message}"),
            log::Level::Warn => tracing::warn!(%step, job_id = %job, "{message}"),
            log::Level::Error => tracing::error!(%step, job_id = %job, "{message}"),
        }
        Ok(())
    }
}
