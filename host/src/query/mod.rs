//! Queries as durable jobs: submission (checked against the caller's roles
//! and planned on the engine), a bounded worker pool that runs them on any
//! replica, results stored as CSV that pages and signed links read back, with
//! typed copies (Arrow IPC, and Parquet made from it) for whole downloads.
//!
//! The lake itself (sessions, the access decision, table layout and writes)
//! is `engine/`'s. This module knows no HTTP; its errors are plain enums that
//! `api/error.rs` maps to the spec's status codes.

mod csv_read_back;
mod csv_text;
pub mod execute;
mod internal;
pub mod ipc_batches;
mod ipc_encoding;
mod known_sizes;
pub(crate) mod page_tokens;
pub mod parameters;
mod parquet_row_groups;
pub mod prepare;
mod recent_results;
pub mod result;
pub mod result_arrow;
mod result_first;
pub mod result_parquet;
pub mod result_writer;
pub mod service;
pub mod typed_conversions;

pub use crate::engine::Denial;
use crate::engine::{EngineError, session::SessionError};
pub use internal::InternalCause;
pub use service::QueryService;

/// Everything that can go wrong with a query, grouped by what the caller
/// should do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The SQL cannot run: the engine's own message.
    #[error("{0}")]
    Invalid(String),
    #[error("{}", .0.message())]
    Denied(Denial),
    /// CREATE TABLE AS into a table that exists (holds data).
    #[error("{0}")]
    Conflict(String),
    /// No such query for this caller on this API.
    #[error("query {0} not found")]
    NotFound(String),
    /// The query has no result to read (not SUCCEEDED).
    #[error("{0}")]
    NoResult(String),
    /// The result exists but not in the format asked for (a typed format of
    /// a result kept without its typed copy): the message says why.
    #[error("{0}")]
    FormatUnavailable(String),
    /// A paging token that this server did not issue for this query.
    #[error("the next_token is not valid for this query")]
    BadPageToken,
    /// The query failed while running (reason for `stateChangeReason`).
    #[error("{0}")]
    Failed(String),
    /// Ours to fix: the cause is logged, the caller sees a generic text.
    #[error("internal error: {0}")]
    Internal(#[source] InternalCause),
}

impl QueryError {
    /// An internal error: `cause`, which happened while doing `context`.
    pub fn internal(
        context: impl Into<std::borrow::Cow<'static, str>>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        QueryError::Internal(InternalCause::new(context, cause))
    }

    /// An internal error with no error behind it: a broken expectation.
    pub fn unexpected(what: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        QueryError::Internal(InternalCause::unexpected(what))
    }

    /// The text a FAILED query shows as `stateChangeReason`.
    pub fn reason(&self) -> String {
        match self {
            QueryError::Internal(_) => "An internal error occurred while running the query.".into(),
            other => other.to_string(),
        }
    }
}

impl From<EngineError> for QueryError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::Invalid(message) => QueryError::Invalid(message),
            EngineError::Plan(_) => QueryError::Invalid(error.to_string()),
            EngineError::Refused(denied) => QueryError::Denied(denied.denial()),
            EngineError::WriteDenied(_) => QueryError::Denied(Denial::Data),
            EngineError::Run(_) | EngineError::Write(_) | EngineError::Read { .. } => {
                QueryError::Failed(error.to_string())
            }
            EngineError::Session(SessionError::UnknownDatabase(name)) => {
                QueryError::Invalid(format!("Database '{name}' does not exist"))
            }
            EngineError::Session(other) => QueryError::internal("", other),
        }
    }
}

impl From<crate::store::Error> for QueryError {
    fn from(e: crate::store::Error) -> Self {
        QueryError::internal("store", e)
    }
}
