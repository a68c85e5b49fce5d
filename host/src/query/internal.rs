//! The cause of an internal query failure (`QueryError::Internal`): the
//! error that happened, kept whole for the log, with a short text of what
//! was being done. Shared so that `QueryError` stays `Clone`.

use std::{borrow::Cow, error::Error, fmt, sync::Arc};

/// What failed (`context`) and why (`cause`, when an error caused it):
/// shows as `context: cause`, chains to the cause, and is equal to its
/// clones (the same cause) only.
#[derive(Debug, Clone)]
pub struct InternalCause {
    context: Cow<'static, str>,
    cause: Option<Arc<dyn Error + Send + Sync>>,
}

impl InternalCause {
    /// `cause`, which happened while doing `context`.
    pub fn new(
        context: impl Into<Cow<'static, str>>,
        cause: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            context: context.into(),
            cause: Some(Arc::new(cause)),
        }
    }

    /// A broken expectation with no error behind it, said by `what`.
    pub fn unexpected(what: impl Into<Cow<'static, str>>) -> Self {
        Self {
            context: what.into(),
            cause: None,
        }
    }

    /// The error that caused it, if an error did.
    pub fn cause(&self) -> Option<&(dyn Error + Send + Sync + 'static)> {
        self.cause.as_deref()
    }
}

impl fmt::Display for InternalCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Some(cause) if self.context.is_empty() => write!(f, "{cause}"),
            Some(cause) => write!(f, "{}: {cause}", self.context),
            None => f.write_str(&self.context),
        }
    }
}

impl Error for InternalCause {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause
            .as_deref()
            .map(|cause| cause as &(dyn Error + 'static))
    }
}

impl PartialEq for InternalCause {
    fn eq(&self, other: &Self) -> bool {
        let same_cause = match (&self.cause, &other.cause) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        same_cause && self.context == other.context
    }
}

impl Eq for InternalCause {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_the_context_and_chains_to_the_cause() {
        let io = std::io::Error::other("disk gone");
        let internal = InternalCause::new("result file", io);
        assert_eq!(internal.to_string(), "result file: disk gone");
        assert_eq!(
            internal.source().map(ToString::to_string).as_deref(),
            Some("disk gone")
        );
        assert_eq!(internal, internal.clone());
        assert_ne!(
            internal,
            InternalCause::new("result file", std::io::Error::other("disk gone"))
        );
        let bare = InternalCause::new("", std::io::Error::other("x"));
        assert_eq!(bare.to_string(), "x");
        let unexpected = InternalCause::unexpected("no result");
        assert_eq!(unexpected.to_string(), "no result");
        assert!(unexpected.source().is_none());
        assert_eq!(unexpected, InternalCause::unexpected("no result"));
    }
}
