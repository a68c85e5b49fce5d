//! `Idempotency-Key` on POST /query, POST /load and POST /load/{id}/commit
//! (issue 19; Athena's ClientRequestToken, BigQuery's job ids, the IETF
//! httpapi draft's header): a retry of a request with the same key gets the
//! first answer back and makes no second query, load or commit. Opt-in: a
//! request without the header never reaches anything here but a `None`.
//!
//! The rules (docs/api.md says them to users):
//! - **The key** is 1 to 255 of `A-Z a-z 0-9 - _ . : ~ + / =`, bare or as
//!   the draft's structured-field string in double quotes (`"k"` and `k` are
//!   one key). Anything else, or the header twice, is 400.
//! - **Whose**: the caller's org, zone (the Org API or which Zone API) and
//!   token subject. Another caller's same key is another key.
//! - **The request**: the operation (method and path; a commit's path names
//!   its load) and the body as canonical JSON (object keys sorted, no
//!   insignificant white space; a body that is not JSON, byte for byte),
//!   digested together, and the caller's access (roles and service
//!   clients). The same key for another operation, body or access is 409.
//!   Other headers (`Prefer`) are not part of it.
//! - **The first answer** (status, headers, body) of a request that
//!   succeeded (2xx) is kept in the store for 24 hours from the first
//!   request, for every replica on that store; a retry gets it back as it
//!   was, with `Idempotent-Replayed: true`. A request that failed (4xx, 5xx)
//!   made no job: its key is given back, and a retry runs afresh.
//! - **An answer too long to keep** (more than `MAX_KEPT_ANSWER_BYTES`: a
//!   `Prefer: wait` answer with a large first page, streamed from the
//!   result) is not kept (issue 45: a 50 MB page sat in the store for a
//!   day). Its handler marks it `ReplayFromResult`; the key keeps that mark
//!   (the query's id and the page's shape, with the status and headers),
//!   and a retry gets the answer rendered again from the query's stored
//!   result: the same status, headers and body while the result is kept
//!   (results are immutable, page tokens deterministic), the 202 with the
//!   query's id once it is not. Either way no second query runs. Every
//!   other answer of these endpoints is a few hundred bytes.
//! - **In progress**: a retry while the first request is still being
//!   answered waits up to `IN_PROGRESS_WAIT` for its answer, then gets 409.
//!   The first request's work runs to its end even when its client goes away
//!   (a dropped connection, the gateway timeout), so its answer is recorded;
//!   only a replica dying between making a job and recording its answer
//!   leaves a key unanswered, and a retry takes such a claim over when it
//!   runs out (twice `server.request_timeout_s`).
//!
//! Handlers wrap their body: `key.request(&caller, operation, &body)` then
//! `.run(&state, work)`. What "the same request" digests to is
//! `request_body.rs`; answers kept as a mark, `replay.rs`.

use std::{future::Future, panic::AssertUnwindSafe, time::Duration};

use axum::{
    body::Body,
    extract::FromRequestParts,
    http::{HeaderName, header, request::Parts},
    response::Response,
};
use futures::FutureExt as _;
use tracing::Instrument as _;
use utoipa::openapi::{
    Required,
    path::{Parameter, ParameterBuilder, ParameterIn},
    schema::{ObjectBuilder, Type},
};

mod replay;
mod request_body;

pub use replay::{MAX_KEPT_ANSWER_BYTES, ReplayFromResult};
use replay::{REPLAY_FROM_RESULT, replay};
pub use request_body::{RequestBody, canonical_json, request_hash};

use super::{AppState, error::ApiError};
use crate::{
    auth::LakeCaller,
    observability::metrics::{self, IdempotentOutcome},
    store::{
        Store,
        idempotency::{KeyScope, KeyedRequest, NewClaim, StoredAnswer},
        new_id,
    },
};

/// The request header, as the OpenAPI document spells it.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";
/// The request header.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// The answer's header, as the OpenAPI document spells it.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";
/// Set (`true`) on an answer that is a replay of the first one.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// The longest key, without its quotes.
pub const MAX_KEY_CHARS: usize = 255;
/// How long a key holds its first answer, from its first request.
pub const KEY_LIFETIME: chrono::Duration = chrono::Duration::hours(24);
/// How long a retry waits for a first request still in progress.
pub const IN_PROGRESS_WAIT: Duration = Duration::from_secs(2);
/// How often the waiting retry looks at the store.
const IN_PROGRESS_POLL: Duration = Duration::from_millis(20);
const KEY_PATTERN: &str = "^([A-Za-z0-9._:~+/=-]{1,255}|\"[A-Za-z0-9._:~+/=-]{1,255}\")$";

pub const BAD_KEY: &str = "InvalidParameterError: Idempotency-Key must be 1 to 255 characters, \
    each a letter, a digit or one of - _ . : ~ + / =, optionally in double quotes, and sent once.";
const OTHER_BODY: &str = "This Idempotency-Key was already used in the last 24 hours with \
    another request body; a new request needs a new key.";
const OTHER_ACCESS: &str = "This Idempotency-Key was already used in the last 24 hours with \
    other access (roles or service clients); a new request needs a new key.";
const IN_PROGRESS: &str = "The first request with this Idempotency-Key is still in progress; \
    retry later to get its answer.";

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"-_.:~+/=".contains(&c)
}

/// The key a header value names, or `None` when it breaks the rules.
pub fn parse_key(value: &[u8]) -> Option<&str> {
    let key = match value {
        [b'"', inner @ .., b'"'] => inner,
        bare => bare,
    };
    let valid = (1..=MAX_KEY_CHARS).contains(&key.len()) && key.iter().copied().all(is_key_char);
    valid.then(|| std::str::from_utf8(key).expect("ASCII"))
}

/// The request's `Idempotency-Key`, if it sent one (400 when it is not a key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let mut values = parts.headers.get_all(&IDEMPOTENCY_KEY).iter();
        let Some(value) = values.next() else {
            return Ok(Self(None));
        };
        match (parse_key(value.as_bytes()), values.next()) {
            (Some(key), None) => Ok(Self(Some(key.to_string()))),
            _ => Err(ApiError::BadRequest(BAD_KEY.into())),
        }
    }
}

impl utoipa::IntoParams for IdempotencyKey {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let schema = ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_KEY_CHARS + 2))
            .pattern(Some(KEY_PATTERN));
        vec![
            ParameterBuilder::new()
                .name(IDEMPOTENCY_KEY_HEADER)
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "Opt-in: a retry with the same key, the same body and the same caller \
                     (token subject, on this org's or zone's API) within 24 hours gets the first \
                     successful answer again (same status and body, header \
                     `Idempotent-Replayed: true`) and starts nothing new. The same key with another \
                     body is 409, as is a retry while the first request is still in progress. \
                     A request that failed keeps nothing: its retry runs again. A `Prefer: wait` \
                     answer longer than 64 KiB is not kept whole: its retry gets it rendered \
                     again from the query's result (or the 202 with the queryId, once that \
                     result is gone). \
                     1 to 255 of `A-Z a-z 0-9 - _ . : ~ + / =`, optionally in double quotes.",
                ))
                .schema(Some(schema))
                .build(),
        ]
    }
}

/// The operations that take a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    SubmitQuery,
    CreateLoad,
    CommitLoad { load_id: String },
}

impl Operation {
    /// The operation as a metric label (a closed set: no ids).
    fn label(&self) -> &'static str {
        match self {
            Operation::SubmitQuery => "submit_query",
            Operation::CreateLoad => "create_load",
            Operation::CommitLoad { .. } => "commit_load",
        }
    }

    fn describe(&self) -> String {
        match self {
            Operation::SubmitQuery => "POST /v2/query".into(),
            Operation::CreateLoad => "POST /v2/load".into(),
            Operation::CommitLoad { load_id } => format!("POST /v2/load/{load_id}/commit"),
        }
    }
}
impl IdempotencyKey {
    /// This request as its key names it (nothing is computed without a key).
    pub fn request(
        self,
        caller: &LakeCaller,
        operation: Operation,
        body: &(impl RequestBody + ?Sized),
    ) -> IdempotentRequest {
        let keyed = self.0.map(|key| {
            let label = operation.label();
            let operation = operation.describe();
            Keyed {
                label,
                caller: caller.clone(),
                scope: KeyScope {
                    org: caller.org.clone(),
                    zone: caller.zone.clone(),
                    owner_sub: caller.sub.clone(),
                    key,
                },
                request: KeyedRequest {
                    request_hash: request_hash(&operation, &body.canonical()),
                    operation,
                    access_fingerprint: caller.grant.fingerprint(),
                },
            }
        });
        IdempotentRequest(keyed)
    }
}

/// A request with (or without) its key, ready to run its work once.
#[derive(Debug)]
pub struct IdempotentRequest(Option<Keyed>);

#[derive(Debug)]
struct Keyed {
    /// The operation, for metrics.
    label: &'static str,
    /// Who asks: a replay rendered again reads the query as them.
    caller: LakeCaller,
    scope: KeyScope,
    request: KeyedRequest,
}

fn store_failed(e: crate::store::Error) -> ApiError {
    ApiError::failed("idempotency key", e)
}

impl IdempotentRequest {
    /// Without a key, `work` as it is. With one: the first answer when the
    /// key has one for this request, 409 when it is another request's or
    /// still in progress after `IN_PROGRESS_WAIT`, else `work` run to its end
    /// (apart from this request, so a client going away cannot stop it
    /// between making a job and recording the answer) and its answer kept.
    pub async fn run<W>(self, state: &AppState, work: W) -> Result<Response, ApiError>
    where
        W: Future<Output = Result<Response, ApiError>> + Send + 'static,
    {
        let Some(keyed) = self.0 else {
            return work.await;
        };
        let label = keyed.label;
        let answered = keyed.answer_or_claim(state).await;
        metrics::idempotent_request(
            label,
            match &answered {
                Ok(Claimed::Claimed { .. }) => IdempotentOutcome::First,
                Ok(Claimed::Replayed(_)) => IdempotentOutcome::Replayed,
                Err(ApiError::Conflict(_)) => IdempotentOutcome::Conflict,
                Err(_) => IdempotentOutcome::Error,
            },
        );
        let (keyed, claim) = match answered? {
            Claimed::Claimed { keyed, claim } => (keyed, claim),
            Claimed::Replayed(answer) => return Ok(answer),
        };
        let store = state.store.clone();
        let first = async move {
            let outcome = AssertUnwindSafe(work).catch_unwind().await;
            keyed.settle(&store, &claim, outcome).await
        };
        tokio::spawn(first.in_current_span())
            .await
            .map_err(|e| ApiError::failed("idempotent request", e))?
    }
}

/// What a key holds for a request about to run.
enum Claimed {
    /// Nothing yet: the request's work runs under this claim.
    Claimed { keyed: Keyed, claim: String },
    /// The first request's answer, to send again.
    Replayed(Response),
}

impl Keyed {
    /// Claims the key for this request, or finds the first answer to replay;
    /// 409 when the key is another request's, or still in progress after
    /// `IN_PROGRESS_WAIT`.
    async fn answer_or_claim(self, state: &AppState) -> Result<Claimed, ApiError> {
        let claim = new_id();
        let claim_for = Duration::from_secs(2 * state.config.server.request_timeout_s);
        let waiting_until = tokio::time::Instant::now() + IN_PROGRESS_WAIT;
        loop {
            let now = state.clock.now();
            let new = NewClaim {
                scope: &self.scope,
                request: &self.request,
                claim: &claim,
                now: now.timestamp_micros(),
                expires_at: (now + KEY_LIFETIME).timestamp_micros(),
                pending_until: (now + claim_for).timestamp_micros(),
            };
            if state
                .store
                .claim_idempotency_key(&new)
                .await
                .map_err(store_failed)?
            {
                break;
            }
            // Held: by this request's first try, another request, or a
            // first request that failed and gave it back since (then claim
            // it again at once).
            if let Some(held) = state
                .store
                .idempotency_key(&self.scope)
                .await
                .map_err(store_failed)?
            {
                if held.request.operation != self.request.operation {
                    return Err(ApiError::Conflict(format!(
                        "This Idempotency-Key was already used in the last 24 hours for {}; \
                         a new request needs a new key.",
                        held.request.operation
                    )));
                }
                if held.request.request_hash != self.request.request_hash {
                    return Err(ApiError::Conflict(OTHER_BODY.into()));
                }
                if held.request.access_fingerprint != self.request.access_fingerprint {
                    return Err(ApiError::Conflict(OTHER_ACCESS.into()));
                }
                if let Some(answer) = held.answer {
                    tracing::debug!(operation = %self.request.operation, "idempotent replay");
                    return replay(state, &self.caller, answer)
                        .await
                        .map(Claimed::Replayed);
                }
                if tokio::time::Instant::now() >= waiting_until {
                    return Err(ApiError::Conflict(IN_PROGRESS.into()));
                }
                tokio::time::sleep(IN_PROGRESS_POLL).await;
            } else if tokio::time::Instant::now() >= waiting_until {
                return Err(ApiError::Conflict(IN_PROGRESS.into()));
            }
        }
        Ok(Claimed::Claimed { keyed: self, claim })
    }

    /// Keeps a successful answer, gives the key back after a failure.
    async fn settle(
        &self,
        store: &Store,
        claim: &str,
        outcome: std::thread::Result<Result<Response, ApiError>>,
    ) -> Result<Response, ApiError> {
        let response = match outcome {
            Ok(Ok(response)) if response.status().is_success() => response,
            Ok(failed) => {
                self.release(store, claim).await;
                return failed;
            }
            Err(_) => {
                self.release(store, claim).await;
                return Err(ApiError::broken("the request's handler panicked"));
            }
        };
        let (parts, body) = response.into_parts();
        let mut headers: Vec<(String, String)> = parts
            .headers
            .iter()
            .filter(|(name, _)| *name != header::CONTENT_LENGTH)
            .filter_map(|(name, value)| {
                Some((name.as_str().to_string(), value.to_str().ok()?.to_string()))
            })
            .collect();
        let (kept_body, body) = match parts.extensions.get::<ReplayFromResult>() {
            // Too long to keep (and maybe still being read from the
            // result): the mark instead, the body sent as it is.
            Some(mark) => {
                headers.push((REPLAY_FROM_RESULT.to_string(), "1".to_string()));
                (mark.to_bytes(), body)
            }
            // The other answers are a few hundred bytes, whole in memory; a
            // failure here leaves the key claimed, so no retry makes a
            // second job before the claim runs out.
            None => {
                let bytes = axum::body::to_bytes(body, usize::MAX)
                    .await
                    .map_err(|e| ApiError::failed("idempotent answer body", e))?;
                (bytes.to_vec(), Body::from(bytes))
            }
        };
        let answer = StoredAnswer {
            status: parts.status.as_u16(),
            headers,
            body: kept_body,
        };
        match store
            .answer_idempotency_key(&self.scope, claim, &answer)
            .await
        {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                operation = %self.request.operation,
                "an idempotent request's claim ran out before it answered; its answer is not kept"
            ),
            Err(e) => tracing::error!(
                error = %e,
                operation = %self.request.operation,
                "an idempotent request's answer could not be kept"
            ),
        }
        Ok(Response::from_parts(parts, body))
    }

    async fn release(&self, store: &Store, claim: &str) {
        if let Err(e) = store.release_idempotency_key(&self.scope, claim).await {
            // The claim runs out by itself; retries wait until then.
            tracing::warn!(error = %e, "an idempotency key could not be given back");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_bare_or_quoted_within_the_rules() {
        assert_eq!(parse_key(b"abc-123_x.y:z~+/="), Some("abc-123_x.y:z~+/="));
        assert_eq!(parse_key(b"\"abc\""), Some("abc"));
        let longest = "k".repeat(MAX_KEY_CHARS);
        assert_eq!(parse_key(longest.as_bytes()), Some(longest.as_str()));
        for bad in [
            "".as_bytes(),
            b"\"\"",
            b"\"",
            b"\"abc",
            b"a b",
            b"a,b",
            b"caf\xc3\xa9",
            b"a\"b",
            "k".repeat(MAX_KEY_CHARS + 1).as_bytes(),
        ] {
            assert_eq!(parse_key(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
