//! Presigned GETs and HEADs of result files (CSV, Arrow, Parquet, each with
//! its media type) on the storage endpoint (`lake::presigned` makes and
//! checks the links): the whole file with its `Content-Length`, one byte
//! range (206, `Content-Range`), or only the headers, as
//! `edge::object_response` answers stored files; refusals in S3's XML error
//! shape. A request carrying an `Authorization` header beside the link's
//! signature is refused as S3 refuses it.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::Request,
    http::{Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use object_store::{ObjectStore, ObjectStoreExt as _, path::Path as ObjectPath};

use crate::{
    clock::SharedClock,
    edge::object_response::{StoredFile, requested_range, stored_file_response, wants_body},
    lake::{
        ResultFormat, object_bytes,
        presigned::{PresignError, ResultLinks},
    },
};

/// What the storage endpoint needs to serve result links.
#[derive(Clone)]
pub struct ResultDownloads {
    pub links: ResultLinks,
    pub store: Arc<dyn ObjectStore>,
    pub clock: SharedClock,
}

/// A GET or HEAD with `X-Amz-Signature` in its query: a presigned request.
pub fn is_presigned_read(request: &Request) -> bool {
    matches!(*request.method(), Method::GET | Method::HEAD)
        && request
            .uri()
            .query()
            .is_some_and(|q| q.contains("X-Amz-Signature="))
}

/// Serves one presigned GET or HEAD.
pub async fn serve(downloads: &ResultDownloads, request: Request) -> Response {
    if request.headers().contains_key(header::AUTHORIZATION) {
        return s3_error(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, \
             Signature query string parameter or the Authorization header should be specified",
        );
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .unwrap_or_default();
    let now =
        chrono::DateTime::from_timestamp(downloads.clock.unix_seconds(), 0).unwrap_or_default();
    let key = match downloads.links.verify(
        request.method().as_str(),
        host,
        request.uri().path(),
        request.uri().query().unwrap_or_default(),
        now,
    ) {
        Ok(key) => key,
        Err(e) => return refusal(&e),
    };
    let path = ObjectPath::from(key.as_str());
    let meta = match downloads.store.head(&path).await {
        Ok(meta) => meta,
        Err(object_store::Error::NotFound { .. }) => {
            return s3_error(
                StatusCode::NOT_FOUND,
                "NoSuchKey",
                "The specified key does not exist.",
            );
        }
        Err(e) => return internal(&e),
    };
    let size = meta.size;
    let range = match requested_range(request.headers(), size) {
        Ok(range) => range,
        Err(unsatisfiable) => {
            let mut response = s3_error(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "InvalidRange",
                "The requested range is not satisfiable",
            );
            response
                .headers_mut()
                .insert(header::CONTENT_RANGE, unsatisfiable.content_range());
            return response;
        }
    };
    let length = range.map_or(size, |(start, end)| end - start + 1);
    let body = if !wants_body(request.method()) || length == 0 {
        Body::empty()
    } else {
        let range = range.map(|(start, end)| start..end + 1);
        match object_bytes(downloads.store.as_ref(), &key, range).await {
            Ok(bytes) => Body::from_stream(bytes),
            Err(e) => return internal(&e),
        }
    };
    let file = StoredFile {
        size,
        content_type: ResultFormat::of_path(&key)
            .unwrap_or(ResultFormat::Csv)
            .media_type(),
        name: key.rsplit('/').next().unwrap_or_default(),
        last_modified: Some(meta.last_modified),
    };
    stored_file_response(&file, range, body)
}

fn refusal(error: &PresignError) -> Response {
    let message = error.to_string();
    match error {
        PresignError::Malformed(_) => s3_error(
            StatusCode::BAD_REQUEST,
            "AuthorizationQueryParametersError",
            &message,
        ),
        PresignError::Expired | PresignError::NotAResult => {
            s3_error(StatusCode::FORBIDDEN, "AccessDenied", &message)
        }
        PresignError::SignatureMismatch => {
            s3_error(StatusCode::FORBIDDEN, "SignatureDoesNotMatch", &message)
        }
    }
}

fn internal(error: &object_store::Error) -> Response {
    super::refusal::internal("reading a result for a presigned link", error).into_response()
}

/// S3's error document.
fn s3_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{}</Message></Error>",
        message
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    );
    (status, [(header::CONTENT_TYPE, "application/xml")], body).into_response()
}
