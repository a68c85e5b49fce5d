//! Query outcomes and authentication refusals as Postgres errors: one match
//! on `QueryError`'s variants, as `api/error.rs` has for HTTP and
//! `flight/status.rs` for gRPC, and one on `auth::Refusal`'s (`refused`).
//! Refusals keep the spec's texts under SQLSTATE 42501, found at submission
//! or while the job ran (`failed`); an internal error shows the REST API's
//! generic text and is logged.

use pgwire::error::{ErrorInfo, PgWireError};

use crate::{
    auth::Refusal,
    edge::{CauseChain, INTERNAL_MESSAGE},
    query::{Denial, QueryError, service::StreamStop},
};

/// The text every refused or missing credential gets (REST's 401 body).
pub const UNAUTHORIZED: &str = "Unauthorized";

/// An error that ends the statement (the session goes on).
pub fn error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        code.to_string(),
        message.into(),
    )))
}

/// An error that ends the connection.
pub fn fatal(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_string(),
        code.to_string(),
        message.into(),
    )))
}

/// The SQLSTATEs lakehost answers with: the metric label of an error's code
/// (`other` for pgwire's own protocol errors).
const SQLSTATES: &[&str] = &[
    "08006", "0A000", "22021", "22023", "22P02", "22P03", "2201B", "25P01", "28000", "28P01",
    "34000", "3D000", "42501", "42601", "42703", "42704", "42P02", "42P03", "42P07", "53200",
    "53300", "53400", "54000", "54023", "55000", "57014", "08P01", "XX000",
];

/// `code` as a metric label, from the closed list.
pub fn label(code: &str) -> &'static str {
    SQLSTATES
        .iter()
        .find(|known| **known == code)
        .copied()
        .unwrap_or("other")
}

/// The SQLSTATE of a failed statement, as a metric label.
pub fn label_of(error: &PgWireError) -> &'static str {
    match error {
        PgWireError::UserError(info) => label(&info.code),
        _ => "other",
    }
}

/// `error` as the error a Postgres client sees.
pub fn error_of(error: QueryError) -> PgWireError {
    match error {
        QueryError::Invalid(why) => self::error("42601", why),
        QueryError::Denied(denial) => self::error("42501", denial.message()),
        QueryError::Conflict(why) => self::error("42P07", why),
        e @ QueryError::NotFound(_) => self::error("42704", e.to_string()),
        QueryError::NoResult(why) | QueryError::FormatUnavailable(why) => self::error("55000", why),
        e @ QueryError::BadPageToken => self::error("22023", e.to_string()),
        QueryError::Failed(why) => self::error("XX000", why),
        e @ QueryError::Internal(_) => {
            tracing::error!(error = %CauseChain(&e), "postgres statement failed");
            self::error("XX000", INTERNAL_MESSAGE)
        }
    }
}

/// A refusal of `auth::authenticate` (for the client id `client_id`) as
/// the error a Postgres client sees, the one place the wire maps one: a
/// refused secret is 28P01 as Postgres answers a wrong password; a token or
/// claims the API does not accept end the connection with 28000 and REST's
/// 401 text; a missing scope ends the statement with 42501 and REST's 403
/// text; an address past its failure budget is 53400 with when to retry; an
/// identity provider out of reach is 08006 (logged: ours to fix).
pub fn refused(refusal: Refusal, client_id: &str) -> PgWireError {
    match refusal {
        Refusal::SecretRefused => fatal(
            "28P01",
            format!("password authentication failed for user \"{client_id}\""),
        ),
        Refusal::MissingScope { .. } => self::error("42501", "Forbidden"),
        Refusal::Throttled(throttled) => fatal("53400", throttled.to_string()),
        Refusal::ProviderUnavailable(e) => {
            tracing::error!(error = %e, "identity provider unavailable");
            fatal("08006", "the identity provider is unavailable")
        }
        unauthorized @ (Refusal::MissingCredentials
        | Refusal::InvalidToken(_)
        | Refusal::WrongIssuerOrAudience(_)
        | Refusal::Expired
        | Refusal::Claims(_)) => {
            tracing::debug!(refusal = ?unauthorized, client_id, "postgres credentials refused");
            fatal("28000", UNAUTHORIZED)
        }
    }
}

/// A streamed read that ended short of its last row, as the error that
/// ends its statement: cancelled in Postgres's words (57014), else as its
/// FAILED job's reason (`failed`).
pub fn stopped(stop: StreamStop) -> PgWireError {
    match stop {
        StreamStop::Cancelled => error("57014", "canceling statement due to user request"),
        StreamStop::Failed(reason) => failed(reason),
    }
}

/// The spec's refusals, every one: `refusal_of` knows each of them.
const REFUSALS: [Denial; 4] = [
    Denial::Data,
    Denial::Execute,
    Denial::CreateTable,
    Denial::Statement,
];

/// The refusal a FAILED job's reason is, if it is one. A job keeps how it
/// ended as its `stateChangeReason` only (the one form every replica reads),
/// and a refusal found while it ran (rows of a service client the caller may
/// not write, say) is stored as the spec's text, which nothing else is:
/// engine errors carry their kind's prefix.
fn refusal_of(reason: &str) -> Option<Denial> {
    REFUSALS
        .into_iter()
        .find(|denial| denial.message() == reason)
}

/// A statement whose job FAILED, with its `reason`, as the error its client
/// sees: a refusal as refusals found at submission are (42501, the spec's
/// text); anything else XX000 with the reason.
pub fn failed(reason: String) -> PgWireError {
    match refusal_of(&reason) {
        Some(denial) => error_of(QueryError::Denied(denial)),
        None => error_of(QueryError::Failed(reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_come_from_the_closed_list() {
        assert_eq!(label_of(&error("42501", "no")), "42501");
        assert_eq!(label_of(&fatal("28P01", "no")), "28P01");
        assert_eq!(label("12345"), "other");
        assert_eq!(label_of(&PgWireError::PortalNotFound("p".into())), "other");
    }

    fn code_and_text(error: &PgWireError) -> (&str, &str) {
        match error {
            PgWireError::UserError(info) => (info.code.as_str(), info.message.as_str()),
            other => panic!("not a statement's error: {other}"),
        }
    }

    #[test]
    fn each_refusal_has_its_sqlstate_and_never_its_causes_text() {
        use crate::auth::{
            ClaimError, TokenError, authenticate::Unreachable, failure_budget::Throttled,
        };
        let severity = |error: &PgWireError| match error {
            PgWireError::UserError(info) => info.severity.clone(),
            other => panic!("not a user error: {other}"),
        };
        let claim = ClaimError::MalformedServiceClient {
            claim: "1,2".into(),
        };
        let cases = [
            (Refusal::MissingCredentials, "FATAL", "28000", UNAUTHORIZED),
            (
                Refusal::InvalidToken(TokenError::Malformed),
                "FATAL",
                "28000",
                UNAUTHORIZED,
            ),
            (
                Refusal::WrongIssuerOrAudience(TokenError::WrongIssuer),
                "FATAL",
                "28000",
                UNAUTHORIZED,
            ),
            (Refusal::Expired, "FATAL", "28000", UNAUTHORIZED),
            (Refusal::Claims(claim), "FATAL", "28000", UNAUTHORIZED),
            (
                Refusal::SecretRefused,
                "FATAL",
                "28P01",
                "password authentication failed for user \"demo-admin\"",
            ),
            (
                Refusal::MissingScope {
                    needed: "query:write".into(),
                },
                "ERROR",
                "42501",
                "Forbidden",
            ),
            (
                Refusal::ProviderUnavailable(Unreachable::Keys(TokenError::KeysUnavailable(
                    "connection refused".into(),
                ))),
                "FATAL",
                "08006",
                "the identity provider is unavailable",
            ),
        ];
        for (refusal, level, code, text) in cases {
            let what = format!("{refusal:?}");
            let error = refused(refusal, "demo-admin");
            assert_eq!(severity(&error), level, "{what}");
            assert_eq!(code_and_text(&error), (code, text), "{what}");
        }
        let throttled = refused(
            Refusal::Throttled(Throttled {
                retry_after: std::time::Duration::from_secs(7),
            }),
            "demo-admin",
        );
        assert_eq!(
            code_and_text(&throttled),
            (
                "53400",
                "too many failed attempts from this address; retry in 7 s"
            )
        );
    }

    #[test]
    fn a_job_failed_by_a_refusal_is_the_refusal_and_other_failures_are_not() {
        for denial in REFUSALS {
            // A new refusal fails to compile here, to be listed above too.
            match denial {
                Denial::Data | Denial::Execute | Denial::CreateTable | Denial::Statement => {}
            }
            let error = failed(denial.message().to_string());
            assert_eq!(code_and_text(&error), ("42501", denial.message()));
        }
        let cast = format!(
            "Cast error: Cannot cast string '{}'",
            Denial::Data.message()
        );
        assert_eq!(
            code_and_text(&failed(cast.clone())),
            ("XX000", cast.as_str())
        );
        assert_eq!(code_and_text(&failed("Divide by zero".into())).0, "XX000");
    }
}
