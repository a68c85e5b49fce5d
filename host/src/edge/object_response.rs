//! A stored file (a query result) as an HTTP response, the way object
//! storage answers it: the whole file with its `Content-Length`, or one
//! byte range (206, `Content-Range`), or only the headers for HEAD; always
//! `Accept-Ranges: bytes`. The `Range` header is read as S3 reads it
//! (`byte_range`). Both the API's result downloads and the storage
//! endpoint's presigned links (`s3/results.rs`) answer through here; each
//! renders refusals in its own error shape.

use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::Response,
};

/// A `Range` header that cannot be served for a file of `size` bytes (416).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsatisfiable {
    pub size: u64,
}

impl Unsatisfiable {
    /// The `Content-Range` a 416 carries.
    pub fn content_range(self) -> HeaderValue {
        HeaderValue::from_str(&format!("bytes */{}", self.size)).expect("ASCII")
    }
}

/// The part of a file of `size` bytes a request asks for: the request's
/// `Range` header as inclusive bounds, `None` for the whole file.
pub fn requested_range(
    headers: &HeaderMap,
    size: u64,
) -> Result<Option<(u64, u64)>, Unsatisfiable> {
    match headers.get(header::RANGE) {
        None => Ok(None),
        Some(value) => byte_range(value.to_str().unwrap_or_default(), size)
            .map_err(|()| Unsatisfiable { size }),
    }
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

/// What a stored file's response says about it.
pub struct StoredFile<'a> {
    pub size: u64,
    pub content_type: &'static str,
    /// The name offered to save it as (`Content-Disposition`).
    pub name: &'a str,
    /// `Last-Modified`, when known.
    pub last_modified: Option<chrono::DateTime<chrono::Utc>>,
}

/// Whether the request needs the bytes at all (HEAD does not).
pub fn wants_body(method: &Method) -> bool {
    method != Method::HEAD
}

/// The response of `file`, `range` of it (206) or all of it (200), with
/// `body` (empty for HEAD).
pub fn stored_file_response(file: &StoredFile, range: Option<(u64, u64)>, body: Body) -> Response {
    let (status, length) = match range {
        Some((start, end)) => (StatusCode::PARTIAL_CONTENT, end - start + 1),
        None => (StatusCode::OK, file.size),
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(file.content_type),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some((start, end)) = range
        && let Ok(value) = HeaderValue::from_str(&format!("bytes {start}-{end}/{}", file.size))
    {
        headers.insert(header::CONTENT_RANGE, value);
    }
    if let Some(modified) = file.last_modified
        && let Ok(value) =
            HeaderValue::from_str(&modified.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
    {
        headers.insert(header::LAST_MODIFIED, value);
    }
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{}\"", file.name)) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
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

    #[test]
    fn a_range_is_answered_206_with_its_bounds() {
        let file = StoredFile {
            size: 100,
            content_type: "application/vnd.apache.parquet",
            name: "q-1.parquet",
            last_modified: None,
        };
        let response = stored_file_response(&file, Some((90, 99)), Body::empty());
        assert_eq!(response.status(), StatusCode::PARTIAL_CONTENT);
        let headers = response.headers();
        assert_eq!(headers[header::CONTENT_LENGTH], "10");
        assert_eq!(headers[header::CONTENT_RANGE], "bytes 90-99/100");
        assert_eq!(headers[header::ACCEPT_RANGES], "bytes");
        assert_eq!(
            headers[header::CONTENT_DISPOSITION],
            "attachment; filename=\"q-1.parquet\""
        );
        let whole = stored_file_response(&file, None, Body::empty());
        assert_eq!(whole.status(), StatusCode::OK);
        assert_eq!(whole.headers()[header::CONTENT_LENGTH], "100");
        assert!(whole.headers().get(header::CONTENT_RANGE).is_none());
    }
}
