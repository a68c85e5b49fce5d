//! Query outcomes as gRPC statuses: one match on `QueryError`'s variants,
//! as `api/error.rs` has for HTTP. Refusals keep the spec's texts (a 403's
//! message is a `PermissionDenied` with the same words); an internal error
//! shows the REST API's generic text and is logged.

use tonic::Status;

use crate::{api::error::INTERNAL_MESSAGE, query::QueryError};

/// `error` as the status a Flight SQL client sees.
pub fn status_of(error: QueryError) -> Status {
    match error {
        QueryError::Invalid(why) => Status::invalid_argument(why),
        QueryError::Denied(denial) => Status::permission_denied(denial.message()),
        QueryError::Conflict(why) => Status::already_exists(why),
        e @ QueryError::NotFound(_) => Status::not_found(e.to_string()),
        QueryError::NoResult(why) | QueryError::FormatUnavailable(why) => {
            Status::failed_precondition(why)
        }
        e @ QueryError::BadPageToken => Status::invalid_argument(e.to_string()),
        QueryError::Failed(why) => Status::aborted(why),
        QueryError::Internal(why) => {
            tracing::error!(error = %why, "flight sql call failed");
            Status::internal(INTERNAL_MESSAGE)
        }
    }
}
