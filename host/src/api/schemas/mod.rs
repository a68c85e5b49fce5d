//! The wire shapes of the APIs as OpenAPI schemas: every rule a handler
//! enforces on a request (required fields, enums, patterns, lengths, value
//! types) and the shape of every response body. The small response bodies
//! (`{queryId}`, `{loadId}`, `{message}`, `{location}`, `{dailyRun}`) are
//! these types, serialised. The request types and the larger responses are
//! schema-only (handlers read request bodies field by field so each problem
//! gets the spec's own 400 text), and the schemathesis run in the test suite holds both sides to the server's
//! answers (tests/tests/integration/contract.rs).
//!
//! One file per API: `query`, `load`, `daily_run`; the bodies every API
//! answers with are here.
#![allow(dead_code)]

mod daily_run;
mod load;
mod query;

use serde::Serialize;
use utoipa::ToSchema;

pub use daily_run::*;
pub use load::*;
pub use query::*;

/// The body of every error answer: the spec's `{message}` (500s add the
/// request code to it; the identity endpoint adds `error`).
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub message: String,
}

/// 202 of POST /load/{load_id}/commit, and other `{message}` answers.
#[derive(Serialize, ToSchema)]
pub struct MessageBody {
    pub message: String,
}
