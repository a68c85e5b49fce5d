//! Presigned GETs and HEADs of result files on the storage endpoint
//! (`lake::presigned` makes and checks the links): the whole CSV with its
//! `Content-Length`, one byte range (206, `Content-Range`), or only the
//! headers; refusals in S3's XML error shape. A request carrying an
//! `Authorization` header beside the link's signature is refused as S3
//! refuses it.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::Request,
    http::{HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures::StreamExt as _;
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt as _, path::Path as ObjectPath,
};

use crate::{
    clock::SharedClock,
    lake::presigned::{PresignError, ResultLinks},
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
    let range = match request.headers().get(header::RANGE) {
        None => None,
        Some(value) => match byte_range(value.to_str().unwrap_or_default(), size) {
            Ok(range) => range,
            Err(()) => {
                let mut response = s3_error(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "InvalidRange",
                    "The requested range is not satisfiable",
                );
                if let Ok(value) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    response.headers_mut().insert(header::CONTENT_RANGE, value);
                }
                return response;
            }
        },
    };
    let (status, length) = match &range {
        Some((start, end)) => (StatusCode::PARTIAL_CONTENT, end - start + 1),
        None => (StatusCode::OK, size),
    };
    let body = if request.method() == Method::HEAD || length == 0 {
        Body::empty()
    } else {
        let options = GetOptions {
            range: range.map(|(start, end)| GetRange::Bounded(start..end + 1)),
            ..GetOptions::default()
        };
        match downloads.store.get_opts(&path, options).await {
            Ok(object) => Body::from_stream(
                object
                    .into_stream()
                    .map(|chunk| chunk.map_err(std::io::Error::other)),
            ),
            Err(e) => return internal(&e),
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some((start, end)) = range
        && let Ok(value) = HeaderValue::from_str(&format!("bytes {start}-{end}/{size}"))
    {
        headers.insert(header::CONTENT_RANGE, value);
    }
    if let Ok(value) = HeaderValue::from_str(
        &meta
            .last_modified
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string(),
    ) {
        headers.insert(header::LAST_MODIFIED, value);
    }
    if let Some(name) = key.rsplit('/').next()
        && let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
    {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}

/// One `bytes=` range of an object of `size` bytes as inclusive bounds;
/// `Ok(None)` when the header is to be ignored (several ranges, another unit:
/// the whole object is sent, as S3 does), `Err` when it is unsatisfiable.
fn byte_range(header: &str, size: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((first, last)) = spec.split_once('-') else {
        return Ok(None);
    };
    let (first, last) = (first.trim(), last.trim());
    let parse = |s: &str| s.parse::<u64>().map_err(|_| ());
    let (start, end) = match (first.is_empty(), last.is_empty()) {
        // bytes=-N: the last N bytes.
        (true, false) => {
            let n = parse(last)?;
            if n == 0 || size == 0 {
                return Err(());
            }
            (size.saturating_sub(n), size - 1)
        }
        (false, true) => (parse(first)?, size.saturating_sub(1)),
        (false, false) => (parse(first)?, parse(last)?.min(size.saturating_sub(1))),
        (true, true) => return Ok(None),
    };
    if start >= size || start > end {
        return Err(());
    }
    Ok(Some((start, end)))
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
    tracing::warn!(error = %error, "reading a result for a presigned link failed");
    s3_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        "We encountered an internal error. Please try again.",
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_s3_reads_them() {
        assert_eq!(byte_range("bytes=0-9", 100), Ok(Some((0, 9))));
        assert_eq!(byte_range("bytes=90-", 100), Ok(Some((90, 99))));
        assert_eq!(byte_range("bytes=-10", 100), Ok(Some((90, 99))));
        assert_eq!(byte_range("bytes=-500", 100), Ok(Some((0, 99))));
        assert_eq!(byte_range("bytes=50-500", 100), Ok(Some((50, 99))));
        assert_eq!(byte_range("bytes=100-", 100), Err(()));
        assert_eq!(byte_range("bytes=9-0", 100), Err(()));
        assert_eq!(byte_range("bytes=x-1", 100), Err(()));
        assert_eq!(byte_range("bytes=0-1,5-6", 100), Ok(None));
        assert_eq!(byte_range("items=0-1", 100), Ok(None));
    }
}
