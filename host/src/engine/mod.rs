//! The lake engine: DataFusion sessions over an org's (or zone's) catalogued
//! lake, the table provider whose scan makes the access decision, the rules
//! of a lake table's layout, the one writer of lake files, statement
//! classification, the bounds on expressions and functions, and column typing.
//!
//! Queries, load commits, daily refreshes and imports all build on this
//! module; it knows no HTTP, no job and no wire format, and it never commits
//! to the catalog (the caller does, with its job's end).

pub mod bounded_functions;
pub mod columns;
pub mod distributed;
pub mod expression_limits;
pub mod late_filters;
pub mod layout;
pub mod literal_lists;
mod partition_filters;
pub mod plain_columns;
pub mod plan_rules;
pub mod provider;
pub mod session;
pub mod snapshot;
pub mod statement;
pub mod table_writer;
#[cfg(test)]
mod table_writer_tests;
#[cfg(test)]
mod test_tables;
pub mod topk_input;
pub mod topk_scan;
pub mod write;
pub mod yield_points;

#[cfg(test)]
mod scan_tests;

use std::sync::Arc;

use datafusion::{
    common::DataFusionError, execution::SessionState, logical_expr::LogicalPlan,
    physical_plan::ExecutionPlan, prelude::SessionContext,
};

pub use provider::{AccessDenied, LakeTableProvider};
use session::SessionError;
use table_writer::TableWriteError;

/// The spec's permission refusals; each has its own friendly message, used as
/// the 403 body and as a FAILED query's `stateChangeReason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// Rows of a service client the caller may not read (or write).
    Data,
    /// A database or table the caller's roles may not use.
    Execute,
    /// CREATE TABLE where the caller's roles may not create tables.
    CreateTable,
    /// Any other statement the caller's roles may not run.
    Statement,
}

impl Denial {
    pub fn message(self) -> &'static str {
        match self {
            Denial::Data => {
                "You seem to have a permissions problem. You are trying to access data you do not have permissions for."
            }
            Denial::Execute => {
                "You seem to have a permissions problem. You may be trying to perform a query you do not have permission to execute."
            }
            Denial::CreateTable => "You don't have the right permissions to create tables there.",
            Denial::Statement => "You don't have the right permissions to execute that query.",
        }
    }
}

/// What can go wrong in the engine, grouped by what the caller should do.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A rule of the lake's layout is broken (a table or column name, the
    /// service-client column): the message says which.
    #[error("{0}")]
    Invalid(String),
    /// The statement cannot be planned: the engine's own message.
    #[error("{}", .0.strip_backtrace())]
    Plan(#[source] DataFusionError),
    /// A scan refused by the access decision; shown as the spec's refusal,
    /// the detail (which table, which service client) kept for the log.
    #[error("{}", .0.denial().message())]
    Refused(AccessDenied),
    /// The statement failed while running.
    #[error("{}", .0.strip_backtrace())]
    Run(#[source] DataFusionError),
    /// A row of a service client the writer may not write (or of none): the
    /// writer's own message, which names the client; a query shows the
    /// spec's data refusal instead.
    #[error(transparent)]
    WriteDenied(TableWriteError),
    /// Rows could not be written as lake files.
    #[error(transparent)]
    Write(TableWriteError),
    /// An input file (an import's) could not be read.
    #[error("{file}: {source}")]
    Read {
        file: String,
        #[source]
        source: datafusion::parquet::errors::ParquetError,
    },
    /// The session could not be built.
    #[error(transparent)]
    Session(#[from] SessionError),
}

impl EngineError {
    /// A planning error: a refusal found in a scan, or the engine's message.
    pub fn plan(error: DataFusionError) -> Self {
        Self::denial_in(&error).unwrap_or(Self::Plan(error))
    }

    /// An error while running: a refusal found in a scan, or the engine's message.
    pub fn run(error: DataFusionError) -> Self {
        Self::denial_in(&error).unwrap_or(Self::Run(error))
    }

    fn denial_in(error: &DataFusionError) -> Option<Self> {
        AccessDenied::find(error).cloned().map(Self::Refused)
    }

    /// The spec's refusal this error is, if it is one.
    pub fn denial(&self) -> Option<Denial> {
        match self {
            Self::Refused(denied) => Some(denied.denial()),
            Self::WriteDenied(_) => Some(Denial::Data),
            _ => None,
        }
    }
}

impl From<TableWriteError> for EngineError {
    fn from(error: TableWriteError) -> Self {
        match error {
            TableWriteError::Denied(_) | TableWriteError::MissingServiceClient => {
                Self::WriteDenied(error)
            }
            _ => Self::Write(error),
        }
    }
}

/// Plans a read so that every table's access check has run. `EXPLAIN` turns
/// physical-planning errors into result rows instead of failing, so its
/// inner statement is planned first: an EXPLAIN of a read the caller may not
/// do is refused like the read itself.
pub async fn plan_read(
    state: &SessionState,
    plan: &LogicalPlan,
) -> Result<Arc<dyn ExecutionPlan>, EngineError> {
    if let LogicalPlan::Explain(explain) = plan {
        state
            .create_physical_plan(&explain.plan)
            .await
            .map_err(EngineError::plan)?;
    }
    state
        .create_physical_plan(plan)
        .await
        .map_err(EngineError::plan)
}

/// `plan_read` of one SQL statement (planned, never run: a DDL statement is
/// not executed here).
pub async fn plan_sql(
    context: &SessionContext,
    sql: &str,
) -> Result<Arc<dyn ExecutionPlan>, EngineError> {
    let state = context.state();
    let plan = state
        .create_logical_plan(sql)
        .await
        .map_err(EngineError::plan)?;
    plan_read(&state, &plan).await
}
