//! The entry points the fuzzers drive with mutated bytes: each parser that
//! reads bytes from outside, called as the server calls it. None may panic,
//! whatever the input; each returns whether the input was accepted, for the
//! fuzzers' statistics. [`TARGETS`] names them, for both fuzzers: the
//! mutational one of the test suite (`tests/tests/integration/fuzz.rs`, on
//! every CI run) and the coverage-guided libFuzzer targets of `fuzz/`.
//!
//! Only in builds with the `fuzzing` feature (the test crate and `fuzz/`
//! turn it on); the shipped binary holds none of it.

use std::collections::BTreeMap;

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Utc};

use crate::{
    auth::{
        claims::{AccessClaims, parse_service_client_claim},
        validator::{split_compact, unverified_iss},
    },
    config::Config,
    engine::{expression_limits, statement::classify},
    lake::{
        presigned::{PresignError, ResultLinks},
        signing::LinkSigner,
    },
    load::{
        grant::GrantSigner,
        parquet_envelope::{envelope_problem, footer_range, layout_problem},
        parquet_schema_depth::schema_depth_problem,
    },
    pipeline::{PipelineKind, manifest::Manifest},
    query::{
        page_tokens::PageTokens,
        parameters::{ParameterError, Placeholders, inline, quoted},
    },
    s3::form::{check_conditions, parse_policy},
};

/// Every fuzz target: its name (also its seed folder under
/// `tests/corpus/fuzz/`) and its entry point over raw bytes. Text parsers
/// get the bytes as UTF-8 with invalid sequences replaced, as the server's
/// extractors hand them over.
pub const TARGETS: &[(&str, Parse)] = &[
    ("token", |b| token(&text(b))),
    ("service_client_claim", |b| service_client_claim(&text(b))),
    ("form_policy", |b| form_policy(&text(b))),
    ("presigned_query", |b| presigned_query(&text(b))),
    ("parquet", parquet),
    ("manifest", |b| manifest(&text(b))),
    ("config", |b| config(&text(b))),
    ("sql", |b| sql(&text(b))),
    ("upload_grant", |b| upload_grant(&text(b))),
    ("page_token", |b| page_token(&text(b))),
    ("parameters", |b| parameters(&text(b))),
    #[cfg(feature = "flight-sql")]
    ("flight_ticket", flight_ticket),
    #[cfg(feature = "pg-wire")]
    ("pg_frame", pg_frame),
];

/// A target's entry point: the bytes parsed, whether they were accepted.
pub type Parse = fn(&[u8]) -> bool;

/// The entry point of the target named `name`.
pub fn target(name: &str) -> Option<Parse> {
    TARGETS
        .iter()
        .find(|(target, _)| *target == name)
        .map(|(_, parse)| *parse)
}

fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

/// A bearer token up to the signature check: its compact form, header, the
/// issuer read before verification, and every claim accessor on its payload.
pub fn token(token: &str) -> bool {
    let Ok(payload) = split_compact(token) else {
        return false;
    };
    let header = jsonwebtoken::decode_header(token);
    let _ = unverified_iss(payload);
    let claims = URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Map<_, _>>(&bytes).ok());
    if let Some(claims) = claims {
        let claims = AccessClaims::new(claims);
        let _ = (claims.sub(), claims.jti(), claims.scopes());
        let _ = claims.service_clients();
        let _ = claims.roles_for("svc_api");
        let _ = claims.access("svc_api");
    }
    header.is_ok()
}

/// The `service_client_id` claim's text (`"[12 13]"`).
pub fn service_client_claim(text: &str) -> bool {
    parse_service_client_claim(text).is_ok()
}

/// An S3 form POST's policy document (base64 JSON) and its conditions
/// against a form's fields; whether the document parsed.
pub fn form_policy(encoded: &str) -> bool {
    let Ok(policy) = parse_policy(encoded) else {
        return false;
    };
    let fields = BTreeMap::from([
        (
            "key".to_string(),
            "staging/demo/l1/part_1.parquet".to_string(),
        ),
        (
            "Content-Type".to_string(),
            "application/octet-stream".to_string(),
        ),
    ]);
    let _ = check_conditions(&policy, &fields, "lakehost-uploads");
    true
}

/// A presigned result link's query string (SigV4 query authentication);
/// whether it was well formed (its signature can only be wrong).
pub fn presigned_query(query: &str) -> bool {
    let links = ResultLinks::new(
        &LinkSigner::new(b"fuzzing key, fixed"),
        url::Url::parse("http://127.0.0.1:9000").expect("literal URL"),
        "lakehost-uploads".into(),
        900,
    );
    let now = DateTime::<Utc>::from_timestamp(1_800_000_000, 0).expect("literal time");
    let path = "/lakehost-uploads/_results/demo/-/u/f/q-1.csv";
    !matches!(
        links.verify("GET", "127.0.0.1:9000", path, query, now),
        Err(PresignError::Malformed(_))
    )
}

/// An uploaded file's envelope, then its footer through the parquet crate's
/// reader when the envelope passed (as the load steps read it).
pub fn parquet(bytes: &[u8]) -> bool {
    let size = bytes.len() as u64;
    let head = bytes.get(..4).unwrap_or_default();
    let tail = bytes
        .get(bytes.len().saturating_sub(8)..)
        .unwrap_or_default();
    if envelope_problem(size, head, tail).is_some() {
        return false;
    }
    let footer = footer_range(size, tail);
    let footer_bytes = &bytes[footer.start as usize..footer.end as usize];
    if schema_depth_problem(footer_bytes).is_some()
        || layout_problem(footer_bytes, footer.start).is_some()
    {
        return false;
    }
    datafusion::parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&bytes::Bytes::copy_from_slice(bytes))
        .is_ok()
}

/// A pipeline manifest of either kind.
pub fn manifest(text: &str) -> bool {
    let load = Manifest::parse(
        PipelineKind::Load,
        text,
        "fuzz.toml",
        std::path::Path::new("."),
    );
    let daily = Manifest::parse(
        PipelineKind::Daily,
        text,
        "fuzz.toml",
        std::path::Path::new("."),
    );
    load.is_ok() || daily.is_ok()
}

/// The server's configuration document.
pub fn config(text: &str) -> bool {
    Config::from_toml(text).is_ok()
}

/// Caller SQL as a query's POST classifies it (statement kind, refusals, the
/// expression limits).
pub fn sql(text: &str) -> bool {
    expression_limits::check_text(text).is_ok() && classify(text).is_ok()
}

/// An upload session token (`X-Amz-Security-Token` of the S3 endpoint), as
/// the endpoint checks it; whether it carried a grant.
pub fn upload_grant(session_token: &str) -> bool {
    let grants = GrantSigner::new(LinkSigner::new(b"fuzzing key, fixed"));
    grants
        .verify(session_token, "ASIAFUZZINGFUZZING", 1_800_000_000)
        .is_ok()
}

/// A result page's `next_token`, for a query of a fixed id; whether it was
/// one this key issued.
pub fn page_token(token: &str) -> bool {
    let tokens = PageTokens::new(LinkSigner::new(b"fuzzing key, fixed"));
    tokens.cursor("fuzzing-query", token).is_ok()
}

/// Bound values inlined into a statement (the Postgres extended protocol,
/// Flight SQL prepared statements): the input is the statement, then each
/// value after a NUL byte, each bound as a text literal, in both placeholder
/// styles. Whether either inlined it.
pub fn parameters(input: &str) -> bool {
    let mut parts = input.split('\0');
    let sql = parts.next().unwrap_or_default();
    let values: Vec<&str> = parts.collect();
    [
        Placeholders::Numbered,
        Placeholders::NumberedOrQuestionMarks,
    ]
    .into_iter()
    .any(|style| {
        inline::<ParameterError>(sql, style, values.len(), |i| Ok(quoted(values[i]))).is_ok()
    })
}

#[cfg(feature = "flight-sql")]
/// A Flight SQL `DoGet` ticket's bytes, as lakehost reads a statement's
/// ticket; whether it named a query.
pub fn flight_ticket(ticket: &[u8]) -> bool {
    crate::flight::ticket_query_id(ticket).is_some()
}

/// Bytes a Postgres client sends (the first byte picks the phase: startup,
/// password, ready), read frame by frame as the listener reads them, each
/// frame the checks accept then decoded by pgwire; whether one decoded.
#[cfg(feature = "pg-wire")]
pub fn pg_frame(bytes: &[u8]) -> bool {
    crate::pg::frames::fuzz_frames(bytes)
}
