//! S3's error answers on the storage endpoint, for every route (the form
//! POST and the result links render them themselves, s3s renders the SigV4
//! route's): an S3 code, its status and a message. The refusals of the one
//! upload check (`LoadService::check_upload`) are mapped here, once, for
//! both upload routes; every failure of ours (the store, the catalog) is
//! S3's generic `InternalError`, its cause logged here once and never shown
//! to the uploader.

use std::error::Error;

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};

use crate::load::grant::{GrantError, UploadRefusal};

/// S3's message of an `InternalError`, the only text a failure of ours shows.
pub const INTERNAL_MESSAGE: &str = "We encountered an internal error. Please try again.";

/// S3's message for an upload whose load stopped taking files.
pub const LOAD_CLOSED: &str = "The load of these credentials no longer takes files.";

/// An S3 error: its code, status and message, rendered as S3's XML.
#[derive(Debug)]
pub struct S3Refusal {
    status: StatusCode,
    code: &'static str,
    pub(super) message: String,
}

pub(super) fn error(
    status: StatusCode,
    code: &'static str,
    message: impl Into<String>,
) -> S3Refusal {
    S3Refusal {
        status,
        code,
        message: message.into(),
    }
}

pub(super) fn denied(message: impl Into<String>) -> S3Refusal {
    error(StatusCode::FORBIDDEN, "AccessDenied", message)
}

/// A failure of ours while `doing`: logged with its causes, here and
/// nowhere else; the answer is S3's generic `InternalError`.
pub(super) fn internal(doing: &'static str, cause: &(dyn Error + 'static)) -> S3Refusal {
    let mut causes = cause.to_string();
    let mut source = cause.source();
    while let Some(next) = source {
        causes.push_str(": ");
        causes.push_str(&next.to_string());
        source = next.source();
    }
    tracing::error!(error = %causes, "storage endpoint failed {doing}");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        INTERNAL_MESSAGE,
    )
}

/// A refusal of the upload check as S3 answers it (its statuses for these
/// codes, as s3s answers them on the SigV4 route).
pub(super) fn upload_refused(refusal: UploadRefusal) -> S3Refusal {
    match refusal {
        UploadRefusal::Grant(GrantError::Expired) => error(
            StatusCode::BAD_REQUEST,
            "ExpiredToken",
            "The provided token has expired.",
        ),
        UploadRefusal::Grant(GrantError::OutsideGrant) => {
            denied("Upload credentials do not allow access to this bucket or key.")
        }
        UploadRefusal::Grant(invalid @ (GrantError::BadToken | GrantError::WrongAccessKey)) => {
            error(StatusCode::BAD_REQUEST, "InvalidToken", invalid.to_string())
        }
        UploadRefusal::LoadClosed => denied(LOAD_CLOSED),
        UploadRefusal::Load(e) => internal("checking an upload's load", &e),
    }
}

impl S3Refusal {
    pub(super) fn with_code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }
}

pub(super) fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl IntoResponse for S3Refusal {
    fn into_response(self) -> Response {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message></Error>",
            self.code,
            xml_escape(&self.message)
        );
        let mut response = (self.status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml"),
        );
        response
    }
}

impl From<S3Refusal> for s3s::S3Error {
    fn from(refusal: S3Refusal) -> Self {
        let code = s3s::S3ErrorCode::from_bytes(refusal.code.as_bytes())
            .unwrap_or(s3s::S3ErrorCode::InternalError);
        let mut error = s3s::S3Error::with_message(code, refusal.message);
        error.set_status_code(refusal.status);
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::LoadError;

    #[test]
    fn a_failure_of_ours_never_shows_its_cause() {
        let refusal = upload_refused(UploadRefusal::Load(LoadError::Store(
            crate::store::Error::Corrupt("database is locked at /srv/lakehost/catalog.db".into()),
        )));
        assert_eq!(refusal.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(refusal.code, "InternalError");
        assert_eq!(refusal.message, INTERNAL_MESSAGE);
        let s3 = s3s::S3Error::from(refusal);
        assert_eq!(s3.code(), &s3s::S3ErrorCode::InternalError);
        assert_eq!(s3.message(), Some(INTERNAL_MESSAGE));
        assert_eq!(s3.status_code(), Some(StatusCode::INTERNAL_SERVER_ERROR));
    }

    #[test]
    fn grant_refusals_are_s3s_codes_with_s3s_statuses() {
        let cases = [
            (GrantError::Expired, "ExpiredToken", StatusCode::BAD_REQUEST),
            (
                GrantError::BadToken,
                "InvalidToken",
                StatusCode::BAD_REQUEST,
            ),
            (
                GrantError::WrongAccessKey,
                "InvalidToken",
                StatusCode::BAD_REQUEST,
            ),
            (
                GrantError::OutsideGrant,
                "AccessDenied",
                StatusCode::FORBIDDEN,
            ),
        ];
        for (grant, code, status) in cases {
            let refusal = upload_refused(UploadRefusal::Grant(grant));
            assert_eq!((refusal.code, refusal.status), (code, status));
            let s3 = s3s::S3Error::from(refusal);
            assert_eq!(s3.code().as_str(), code);
            assert_eq!(s3.code().status_code(), Some(status));
        }
        let closed = upload_refused(UploadRefusal::LoadClosed);
        assert_eq!(
            (closed.code, closed.message.as_str()),
            ("AccessDenied", LOAD_CLOSED)
        );
    }
}
