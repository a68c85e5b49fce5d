//! What the front ends (`api`, `s3`, `flight`, `pg`, `cluster`, `idp`)
//! share, below them so that none imports another: the spec's generic 500
//! text, an error's causes on one line for the one log line of a failure,
//! request ids (`request_id.rs`) and a stored file as an HTTP answer
//! (`object_response.rs`).

use std::fmt;

pub mod object_response;
pub mod request_id;

/// The generic 500 message of the spec, before the request code is added.
pub const INTERNAL_MESSAGE: &str =
    "An Internal Server Error occurred. Please contact support if this error persists.";

/// An error and its causes on one line, `: ` between them; a cause whose
/// text is already shown (an error that prints its source) is not repeated.
pub struct CauseChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for CauseChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        let mut cause = self.0.source();
        while let Some(error) = cause {
            let text = error.to_string();
            if !shown.contains(&text) {
                shown.push_str(": ");
                shown.push_str(&text);
            }
            cause = error.source();
        }
        f.write_str(&shown)
    }
}
