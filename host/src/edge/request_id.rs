//! Request ids: the caller's `x-request-id` when it is a short token, else
//! a fresh one; every front end that answers HTTP names its requests so
//! (the REST gateway, Flight SQL's calls).

use axum::extract::Request;

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The longest caller-sent request id kept.
pub const MAX_REQUEST_ID_BYTES: usize = 64;

/// The caller's `x-request-id` when it is a short token (letters, digits,
/// `-`, `_`, `.`; at most 64 bytes), so a proxy's id follows the request
/// into our logs; anything else (spaces, quotes, control characters, JSON,
/// long values) is replaced by a fresh id and never logged.
pub(crate) fn request_id(request: &Request) -> String {
    request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|id| {
            !id.is_empty()
                && id.len() <= MAX_REQUEST_ID_BYTES
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        })
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
}
