//! Query outcomes as gRPC statuses: one match on `QueryError`'s variants,
//! as `api/error.rs` has for HTTP. Refusals keep the spec's texts (a 403's
//! message is a `PermissionDenied` with the same words); an internal error
//! shows the REST API's generic text and is logged.
//!
//! It is also the one house of the bound on what a status message repeats:
//! a message travels in an HTTP/2 header, and a client drops the whole
//! answer when that header is past its limit (8 KiB in gRPC C++, which
//! pyarrow's Flight client builds on, and in gRPC Java), so a 3 MB
//! ticket echoed back would hide the refusal itself. Caller input (a ticket,
//! a handle, an org or action name) is cut at [`ECHO_CHARS`] where a message
//! quotes it, any message at [`MESSAGE_CHARS`] (the engine's texts quote
//! the SQL), and `gate.rs` cuts every answer that ends a call at once to the
//! same bound, whatever made it.

use std::borrow::Cow;

use http::HeaderMap;
use tonic::{Code, Status};

use crate::{
    edge::{CauseChain, INTERNAL_MESSAGE},
    query::QueryError,
};

/// The most characters of caller input a message repeats.
pub const ECHO_CHARS: usize = 200;

/// The most characters of any status message: enough for the engine's
/// errors to keep their context, far below any client's header limit.
pub const MESSAGE_CHARS: usize = 1_000;

/// What marks a cut.
const ELLIPSIS: char = '…';

/// `text`, cut at `chars` characters with an ellipsis when longer.
fn cut(text: &str, chars: usize) -> Cow<'_, str> {
    match text.char_indices().nth(chars) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!("{}{ELLIPSIS}", &text[..end])),
    }
}

/// Caller input as a message may quote it (at most [`ECHO_CHARS`]).
pub fn echo(input: &str) -> Cow<'_, str> {
    cut(input, ECHO_CHARS)
}

/// A status whose message is cut at [`MESSAGE_CHARS`].
pub fn bounded(code: Code, message: impl Into<String>) -> Status {
    let message = message.into();
    match cut(&message, MESSAGE_CHARS) {
        Cow::Borrowed(_) => Status::new(code, message),
        Cow::Owned(cut) => Status::new(code, cut),
    }
}

/// Cuts the `grpc-message` of `headers` (an answer that ended its call at
/// once) to [`MESSAGE_CHARS`], for statuses made where this module is not
/// asked (tonic's, arrow-flight's).
pub fn bound_message(headers: &mut HeaderMap) {
    // The header is percent-encoded, never shorter than its text: a short
    // one needs no decoding. A status with binary details is left whole
    // (lakehost sends none; tonic's decoder of them may panic).
    let long = headers
        .get(Status::GRPC_MESSAGE)
        .is_some_and(|message| message.len() > MESSAGE_CHARS);
    if !long || headers.contains_key(Status::GRPC_STATUS_DETAILS) {
        return;
    }
    if let Some(status) = Status::from_header_map(headers) {
        let cut = bounded(status.code(), status.message());
        if cut.add_header(headers).is_err() {
            headers.remove(Status::GRPC_MESSAGE);
        }
    }
}

/// `error` as the status a Flight SQL client sees.
pub fn status_of(error: QueryError) -> Status {
    match error {
        QueryError::Invalid(why) => bounded(Code::InvalidArgument, why),
        QueryError::Denied(denial) => Status::permission_denied(denial.message()),
        QueryError::Conflict(why) => bounded(Code::AlreadyExists, why),
        QueryError::NotFound(id) => Status::not_found(format!("query {} not found", echo(&id))),
        QueryError::NoResult(why) | QueryError::FormatUnavailable(why) => {
            bounded(Code::FailedPrecondition, why)
        }
        e @ QueryError::BadPageToken => Status::invalid_argument(e.to_string()),
        QueryError::Failed(why) => bounded(Code::Aborted, why),
        e @ QueryError::Internal(_) => {
            tracing::error!(error = %CauseChain(&e), "flight sql call failed");
            Status::internal(INTERNAL_MESSAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_input_and_messages_are_cut_with_an_ellipsis() {
        assert_eq!(echo("short"), "short");
        let long = "é".repeat(3 * ECHO_CHARS);
        let echoed = echo(&long);
        assert_eq!(echoed.chars().count(), ECHO_CHARS + 1);
        assert!(echoed.ends_with(ELLIPSIS));
        let not_found = status_of(QueryError::NotFound("x".repeat(3_000_000)));
        assert_eq!(not_found.code(), Code::NotFound);
        assert!(not_found.message().starts_with("query xxx"));
        assert!(not_found.message().ends_with("x… not found"));
        let invalid = status_of(QueryError::Invalid("y".repeat(5 * MESSAGE_CHARS)));
        assert_eq!(invalid.message().chars().count(), MESSAGE_CHARS + 1);
    }

    #[test]
    fn an_answers_long_message_is_cut_in_its_header() {
        let mut headers = HeaderMap::new();
        Status::not_found(format!("no {}", "%z".repeat(MESSAGE_CHARS)))
            .add_header(&mut headers)
            .unwrap();
        bound_message(&mut headers);
        let status = Status::from_header_map(&headers).unwrap();
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(status.message().chars().count(), MESSAGE_CHARS + 1);
        assert!(status.message().starts_with("no %z%z"));
        let mut short = HeaderMap::new();
        Status::not_found("no such org")
            .add_header(&mut short)
            .unwrap();
        let before = short.clone();
        bound_message(&mut short);
        assert_eq!(short, before);
    }
}
