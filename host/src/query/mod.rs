//! The query engine: DataFusion sessions over the catalogued lake, with access
//! decided inside the table provider's scan (after partition pruning, so a
//! `count(*)` answered from statistics cannot slip past it), statements checked
//! against the caller's roles, durable jobs run by a bounded worker pool, and
//! results stored as CSV that pages and signed links read back.
//!
//! This module knows no HTTP; its errors are plain enums that `api/error.rs`
//! maps to the spec's status codes.

pub mod bounded_functions;
pub mod execute;
pub mod expression_limits;
pub mod provider;
pub mod result;
pub mod service;
pub mod session;
pub mod statement;
pub mod table_writer;

use serde::{Deserialize, Serialize};

use crate::auth::Access;
pub use provider::{AccessDenied, LakeTableProvider};
pub use service::QueryService;

/// Who calls the lake APIs (queries and loads), and on which API.
#[derive(Debug, Clone)]
pub struct LakeCaller {
    pub sub: String,
    pub org: String,
    /// The zone of a Zone API request.
    pub zone: Option<String>,
    pub grant: AccessGrant,
}

/// The roles (on this API's client) and service clients a token carries: what
/// a query runs with, stored with the job so any replica can run it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessGrant {
    pub roles: Vec<String>,
    pub service_clients: Vec<u32>,
}

impl AccessGrant {
    pub fn access(&self) -> Access {
        Access::new(
            self.roles.iter().map(String::as_str),
            self.service_clients.iter().copied(),
        )
    }

    /// Changes whenever the roles or the service clients change.
    pub fn fingerprint(&self) -> String {
        crate::auth::claims::access_fingerprint(&self.roles, &self.service_clients)
    }
}

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
    /// A paging token that this server did not issue for this query.
    #[error("the next_token is not valid for this query")]
    BadPageToken,
    /// The query failed while running (reason for `stateChangeReason`).
    #[error("{0}")]
    Failed(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl QueryError {
    /// The text a FAILED query shows as `stateChangeReason`.
    pub fn reason(&self) -> String {
        match self {
            QueryError::Internal(_) => "An internal error occurred while running the query.".into(),
            other => other.to_string(),
        }
    }
}

impl From<crate::store::Error> for QueryError {
    fn from(e: crate::store::Error) -> Self {
        QueryError::Internal(format!("store: {e}"))
    }
}
