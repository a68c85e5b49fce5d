//! The `Prefer` request header (RFC 7240) of `POST /query`: the opt-in
//! preferences lakehost honours there, `wait=N` (hold the request up to N
//! seconds for the query to end), `reuse=N` (answer with a result of the
//! same query and data at most N seconds old) and `result-format=arrow` or
//! `parquet` (write the result in that format while the query runs, the CSV
//! when first asked for; `csv` is the default). Unknown preferences are
//! ignored, as the RFC asks; a known one with a bad value is a 400, since a
//! silently ignored typo would cost the caller a round trip or a rerun.
//! `Preference-Applied` names the ones honoured.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header::HeaderName};

use super::error::ApiError;
use crate::{
    config::MAX_REUSE_AGE_S, query::service::SubmitPreferences, store::queries::ResultFirst,
};

/// The longest wait: under the API gateway's 30-second request limit.
pub const MAX_WAIT_S: u64 = 25;

pub const PREFER: HeaderName = HeaderName::from_static("prefer");
pub const PREFERENCE_APPLIED: HeaderName = HeaderName::from_static("preference-applied");

/// The preferences of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Preferences {
    /// `wait=N`: how long the POST may wait for the query's end.
    pub wait: Option<Duration>,
    /// `reuse=N`: the oldest result, in seconds, the caller accepts.
    pub reuse_max_age_s: Option<u64>,
    /// `result-format=csv|arrow|parquet`: the file the query writes while
    /// it runs.
    pub result_first: Option<ResultFirst>,
}

impl Preferences {
    /// Reads every `Prefer` header of the request.
    pub fn from_headers(headers: &HeaderMap) -> Result<Self, ApiError> {
        let mut preferences = Preferences::default();
        for value in headers.get_all(PREFER) {
            let text = value.to_str().map_err(|_| {
                ApiError::BadRequest(
                    "InvalidParameterError: the Prefer header is not visible ASCII.".into(),
                )
            })?;
            for preference in text.split(',') {
                // Parameters after `;` belong to the preference; none is used.
                let token = preference.split(';').next().unwrap_or_default().trim();
                let (name, value) = match token.split_once('=') {
                    Some((name, value)) => (name.trim(), Some(value.trim().trim_matches('"'))),
                    None => (token, None),
                };
                if name.eq_ignore_ascii_case("wait") {
                    let seconds = seconds(value, "wait", MAX_WAIT_S)?;
                    preferences.wait = Some(Duration::from_secs(seconds));
                } else if name.eq_ignore_ascii_case("reuse") {
                    preferences.reuse_max_age_s = Some(seconds(value, "reuse", MAX_REUSE_AGE_S)?);
                } else if name.eq_ignore_ascii_case("result-format") {
                    preferences.result_first = Some(result_format(value)?);
                }
            }
        }
        Ok(preferences)
    }

    /// What the query service is asked.
    pub fn submit(&self) -> SubmitPreferences {
        SubmitPreferences {
            reuse_max_age_s: self.reuse_max_age_s,
            result_first: self.result_first.unwrap_or_default(),
        }
    }

    /// The `Preference-Applied` value naming what this request honoured;
    /// `result-format` only when the result is written as it asked
    /// (`written`: not where typed results are not kept, nor for Parquet
    /// of columns it cannot hold, nor for a reused result written otherwise).
    pub fn applied(&self, written: ResultFirst) -> Option<HeaderValue> {
        let mut applied = Vec::new();
        if let Some(wait) = self.wait {
            applied.push(format!("wait={}", wait.as_secs()));
        }
        if let Some(reuse) = self.reuse_max_age_s {
            applied.push(format!("reuse={reuse}"));
        }
        if let Some(first) = self.result_first.filter(|asked| *asked == written) {
            applied.push(format!("result-format={}", first.as_str()));
        }
        if applied.is_empty() {
            return None;
        }
        HeaderValue::from_str(&applied.join(", ")).ok()
    }
}

fn seconds(value: Option<&str>, name: &str, max: u64) -> Result<u64, ApiError> {
    value
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&s| s <= max)
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "InvalidParameterError: Prefer {name} must be a whole number of seconds from 0 to {max}."
            ))
        })
}

fn result_format(value: Option<&str>) -> Result<ResultFirst, ApiError> {
    match value {
        Some(v) if v.eq_ignore_ascii_case("arrow") => Ok(ResultFirst::Arrow),
        Some(v) if v.eq_ignore_ascii_case("parquet") => Ok(ResultFirst::Parquet),
        Some(v) if v.eq_ignore_ascii_case("csv") => Ok(ResultFirst::Csv),
        _ => Err(ApiError::BadRequest(
            "InvalidParameterError: Prefer result-format must be csv, arrow or parquet.".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(values: &[&str]) -> Result<Preferences, ApiError> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(PREFER, HeaderValue::from_str(value).unwrap());
        }
        Preferences::from_headers(&headers)
    }

    #[test]
    fn reads_wait_and_reuse_from_one_or_several_headers() {
        let both = parse(&["wait=5, reuse=300"]).unwrap();
        assert_eq!(both.wait, Some(Duration::from_secs(5)));
        assert_eq!(both.reuse_max_age_s, Some(300));
        let split = parse(&["respond-async", "WAIT=\"25\"; x=1", "reuse=0"]).unwrap();
        assert_eq!(split.wait, Some(Duration::from_secs(25)));
        assert_eq!(split.reuse_max_age_s, Some(0));
        assert_eq!(
            split.applied(ResultFirst::Csv).unwrap().to_str().unwrap(),
            "wait=25, reuse=0"
        );
    }

    #[test]
    fn reads_the_result_format_and_applies_it_only_when_written_so() {
        let arrow = parse(&["result-format=Arrow, wait=1"]).unwrap();
        assert_eq!(arrow.result_first, Some(ResultFirst::Arrow));
        assert_eq!(arrow.submit().result_first, ResultFirst::Arrow);
        let applied = |written| {
            arrow
                .applied(written)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(applied(ResultFirst::Arrow), "wait=1, result-format=arrow");
        assert_eq!(applied(ResultFirst::Csv), "wait=1");
        let csv = parse(&["result-format=\"csv\""]).unwrap();
        assert_eq!(csv.submit().result_first, ResultFirst::Csv);
        assert_eq!(parse(&[]).unwrap().submit().result_first, ResultFirst::Csv);
        let parquet = parse(&["result-format=parquet"]).unwrap();
        assert_eq!(parquet.submit().result_first, ResultFirst::Parquet);
        for bad in ["result-format=orc", "result-format", "result-format=json"] {
            let Err(ApiError::BadRequest(message)) = parse(&[bad]) else {
                panic!("{bad} accepted");
            };
            assert!(
                message.contains("must be csv, arrow or parquet"),
                "{message}"
            );
        }
    }

    #[test]
    fn nothing_asked_is_nothing_applied() {
        let none = parse(&["return=minimal"]).unwrap();
        assert_eq!(none, Preferences::default());
        assert!(none.applied(ResultFirst::Csv).is_none());
    }

    #[test]
    fn bad_values_are_refused_with_the_range() {
        for bad in [
            "wait=26",
            "wait=-1",
            "wait=1.5",
            "wait",
            "wait=",
            "reuse=86401",
            "reuse=x",
        ] {
            let Err(ApiError::BadRequest(message)) = parse(&[bad]) else {
                panic!("{bad} accepted");
            };
            assert!(message.contains("whole number of seconds"), "{message}");
        }
    }
}
