//! The one error type of the HTTP APIs: every outcome a handler or extractor can
//! have, mapped to the spec's exact status and body ("Errors"). Domain errors
//! become `ApiError` here and only here.
//!
//! 5xx variants keep their source for the log; callers see only the spec's text.
//! A 5xx is logged here and only here (`ApiError::log_cause`, from
//! `into_response`, which runs inside the request's span, so the line
//! carries the request id), with its whole cause chain. The generic 500 body
//! gains the request code in `gateway::request_context`.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};

use super::schemas::ErrorBody;
use crate::{
    auth::ClaimError,
    edge::{CauseChain, INTERNAL_MESSAGE},
    engine::Denial,
    load::LoadError,
    pipeline::deployed::DeployError,
    query::QueryError,
};

/// The engine operation a query endpoint stands for, named in its 400 and
/// 404 messages the way the spec's engine names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryOperation {
    Start,
    Get,
    Stop,
    Results,
}

impl QueryOperation {
    fn name(self) -> &'static str {
        match self {
            QueryOperation::Start => "StartQueryExecution",
            QueryOperation::Get => "GetQueryExecution",
            QueryOperation::Stop => "StopQueryExecution",
            QueryOperation::Results => "GetQueryResults",
        }
    }
}

/// The cause of an unexpected failure, kept for the log.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An unexpected failure while doing `what`, with its cause.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct Failed {
    what: &'static str,
    #[source]
    source: BoxError,
}

/// A broken assumption of the server's own (a handler that panicked, a
/// request without its API target): nothing caused it but a bug.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Broken(pub &'static str);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 401: no, malformed or invalid token.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// 403: the token lacks the endpoint's scope.
    #[error("missing scope {0}")]
    Forbidden(String),
    #[error("not found")]
    NotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("request body too large")]
    PayloadTooLarge,
    #[error("gateway timeout")]
    Timeout,
    /// 403 of the identity endpoint: a claim it needs is missing or malformed.
    #[error("identity claim: {0}")]
    IdentityClaim(ClaimError),
    /// 500 of the identity endpoint, with its cause.
    #[error("identity endpoint failed: {0}")]
    IdentityInternal(#[source] BoxError),
    /// Any other unexpected failure, with its cause: the generic 500.
    #[error("internal error")]
    Unexpected(#[source] BoxError),
    /// 400 with a message of its own (body not JSON, parameter missing).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// 400: the engine refused the request (its message, in the engine's frame).
    #[error("invalid request in {operation:?}: {message}")]
    InvalidRequest {
        operation: QueryOperation,
        message: String,
    },
    /// 404 of the query endpoints.
    #[error("query {id} not found")]
    QueryNotFound {
        operation: QueryOperation,
        id: String,
    },
    /// 403 with the spec's friendly permission message.
    #[error("permission denied: {}", .0.message())]
    Denied(Denial),
    /// 404 of GET /dailyRun/dailyRun_enabled: the org's flag was never set.
    #[error("daily run flag not set")]
    DailyRunNotFound,
    /// 500 of the DailyRun API with the spec's message for the endpoint.
    #[error("daily run store")]
    DailyRunStore {
        message: &'static str,
        #[source]
        cause: BoxError,
    },
    /// 404 of the load endpoints: unknown load, or another user's.
    #[error("load not found")]
    LoadNotFound,
    /// 409 with the engine's message.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Any failure of GET /query/{id}/csv: 500 {"message":"Internal Server Error"}.
    #[error("csv link failed: {0}")]
    CsvFailure(#[source] BoxError),
    /// 406: the `Accept` header names nothing the endpoint serves (the
    /// message lists what it does).
    #[error("not acceptable: {0}")]
    NotAcceptable(String),
    /// 416: a `Range` outside a result file of this many bytes.
    #[error("range not satisfiable in {0} bytes")]
    RangeNotSatisfiable(u64),
    /// 404 of the pipeline endpoints: the component or version named.
    #[error("{0}")]
    PipelineNotFound(String),
}

impl ApiError {
    /// The generic 500 for `cause`, which only the log sees.
    pub fn unexpected(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        ApiError::Unexpected(Box::new(cause))
    }

    /// The generic 500 for a failure while doing `what`, caused by `cause`.
    pub fn failed(
        what: &'static str,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ApiError::unexpected(Failed {
            what,
            source: Box::new(cause),
        })
    }

    /// The generic 500 for a broken assumption of the server's own.
    pub fn broken(what: &'static str) -> Self {
        ApiError::unexpected(Broken(what))
    }

    /// A query service outcome as the endpoint of `operation` reports it.
    pub fn query(error: QueryError, operation: QueryOperation) -> Self {
        let invalid = |message: String| ApiError::InvalidRequest { operation, message };
        match error {
            QueryError::Invalid(message)
            | QueryError::NoResult(message)
            | QueryError::Failed(message) => invalid(message),
            QueryError::BadPageToken => invalid(QueryError::BadPageToken.to_string()),
            QueryError::Denied(denial) => ApiError::Denied(denial),
            QueryError::Conflict(message) | QueryError::FormatUnavailable(message) => {
                ApiError::Conflict(message)
            }
            QueryError::NotFound(id) => ApiError::QueryNotFound { operation, id },
            e @ QueryError::Internal(_) => ApiError::unexpected(e),
        }
    }
}

impl From<LoadError> for ApiError {
    fn from(e: LoadError) -> Self {
        match e {
            LoadError::BadFileKey => ApiError::BadRequest(super::load_body::BAD_FILE_KEY.into()),
            LoadError::NotFound => ApiError::LoadNotFound,
            LoadError::AlreadyCommitted => {
                ApiError::BadRequest("InvalidParameter: Load Already Committed.".into())
            }
            e @ (LoadError::Store(_) | LoadError::Staging { .. }) => ApiError::unexpected(e),
        }
    }
}

impl From<DeployError> for ApiError {
    fn from(e: DeployError) -> Self {
        match e {
            DeployError::BadDigest(_)
            | DeployError::DigestMismatch { .. }
            | DeployError::NotUsable(_)
            | DeployError::Manifest(_) => ApiError::BadRequest(e.to_string()),
            DeployError::TooLarge { .. } => ApiError::PayloadTooLarge,
            DeployError::ComponentNotFound(_) | DeployError::VersionNotFound(_) => {
                ApiError::PipelineNotFound(e.to_string())
            }
            DeployError::Files(_)
            | DeployError::Store(_)
            | DeployError::Lake(_)
            | DeployError::Damaged(_)
            | DeployError::Compiler(_) => ApiError::unexpected(e),
        }
    }
}

/// Marks a generic 500 response so the gateway layer adds the request code
/// to its message.
#[derive(Debug, Clone, Copy)]
pub struct GenericInternalError;

fn message(status: StatusCode, message: &str) -> Response {
    let body = ErrorBody {
        message: message.to_string(),
        error: None,
    };
    (status, Json(body)).into_response()
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::IdentityClaim(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ApiError::IdentityInternal(_) | ApiError::Unexpected(_) | ApiError::CsvFailure(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ApiError::BadRequest(_) | ApiError::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::QueryNotFound { .. }
            | ApiError::LoadNotFound
            | ApiError::DailyRunNotFound
            | ApiError::PipelineNotFound(_) => StatusCode::NOT_FOUND,
            ApiError::DailyRunStore { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Denied(_) => StatusCode::FORBIDDEN,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            ApiError::RangeNotSatisfiable(_) => StatusCode::RANGE_NOT_SATISFIABLE,
        }
    }
}

impl ApiError {
    /// Logs what a failure the caller cannot fix came from, once, with its
    /// cause chain: every 500 (a CSV link's at `warn`: most are a query
    /// that is not there, which the spec answers with a 500). The 504 has
    /// no cause beyond the request's own line.
    fn log_cause(&self) {
        match self {
            ApiError::CsvFailure(_) => {
                tracing::warn!(error = %CauseChain(self), "csv link refused");
            }
            ApiError::IdentityInternal(_)
            | ApiError::Unexpected(_)
            | ApiError::DailyRunStore { .. } => {
                tracing::error!(error = %CauseChain(self), "internal error");
            }
            _ => {}
        }
    }
}

/// The generic 500: the spec's message, marked for the gateway to add the
/// request code.
fn generic_internal(status: StatusCode) -> Response {
    let mut response = message(status, INTERNAL_MESSAGE);
    response.extensions_mut().insert(GenericInternalError);
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        self.log_cause();
        match self {
            ApiError::Unauthorized(why) => {
                tracing::debug!(reason = %why, "token refused");
                message(status, "Unauthorized")
            }
            ApiError::Forbidden(scope) => {
                tracing::debug!(%scope, "scope missing");
                message(status, "Forbidden")
            }
            ApiError::NotFound => message(status, "Not Found"),
            ApiError::MethodNotAllowed => message(status, "Method Not Allowed"),
            ApiError::PayloadTooLarge => message(status, "Request Entity Too Large"),
            ApiError::Timeout => message(status, "Endpoint request timed out"),
            ApiError::IdentityClaim(claim) => {
                let text = match &claim {
                    ClaimError::MissingServiceClient => {
                        "No service client provided in access token".to_string()
                    }
                    ClaimError::MissingSub => "Sub not provided in access token".into(),
                    ClaimError::MissingJti => "no JTI in the access token".into(),
                    ClaimError::MissingResourceAccess => {
                        "No resource access provided in access token".into()
                    }
                    ClaimError::MissingClientRoles { client } => {
                        format!("No resource access provided for {client} in access token")
                    }
                    ClaimError::MalformedServiceClient { claim } => {
                        format!("Invalid Service Client claim (claim in incorrect format: {claim})")
                    }
                    ClaimError::NoServiceClient => "No service client is configured".into(),
                };
                let body = ErrorBody {
                    message: text,
                    error: Some("Unauthorized".into()),
                };
                (status, Json(body)).into_response()
            }
            ApiError::IdentityInternal(_) => {
                let body = ErrorBody {
                    message: "There was a problem returning the security metadata".into(),
                    error: Some("Error".into()),
                };
                (status, Json(body)).into_response()
            }
            ApiError::BadRequest(text)
            | ApiError::PipelineNotFound(text)
            | ApiError::Conflict(text)
            | ApiError::NotAcceptable(text) => message(status, &text),
            ApiError::RangeNotSatisfiable(size) => {
                let mut response = message(status, "The requested range is not satisfiable");
                let unsatisfiable = crate::edge::object_response::Unsatisfiable { size };
                response.headers_mut().insert(
                    axum::http::header::CONTENT_RANGE,
                    unsatisfiable.content_range(),
                );
                response
            }
            ApiError::InvalidRequest {
                operation,
                message: text,
            } => message(
                status,
                &format!(
                    "An error occurred (InvalidRequestException) when calling the {} operation: {text}",
                    operation.name()
                ),
            ),
            ApiError::QueryNotFound { operation, id } => message(
                status,
                &format!(
                    "An error occurred (InvalidRequestException) when calling the {} operation: \
                     QueryExecution {id} was not found",
                    operation.name()
                ),
            ),
            ApiError::DailyRunNotFound => message(status, "DailyRun not found"),
            ApiError::DailyRunStore { message: text, .. } => message(status, text),
            ApiError::LoadNotFound => {
                message(status, "NotFound: load_id does not exist for this user.")
            }
            ApiError::Denied(denial) => message(status, denial.message()),
            ApiError::CsvFailure(_) => message(status, "Internal Server Error"),
            ApiError::Unexpected(_) => generic_internal(status),
        }
    }
}
