//! The DailyRun API's wire shapes: the flag's accepted spellings, the
//! `mode` and `limit` of execution_status, the spec's Execution object, its
//! dates and the opaque ARNs. The domain (`dailyrun/`) never sees them.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::{dailyrun::state_machine, store::dailyrun::DailyRun};

/// Opaque, stable in shape: `arn:lakehost:states:<org>:stateMachine:<machine>`.
pub fn state_machine_arn(org: &str) -> String {
    format!(
        "arn:lakehost:states:{org}:stateMachine:{}",
        state_machine(org)
    )
}

/// Opaque, stable in shape: `arn:lakehost:states:<org>:execution:<machine>:<name>`.
pub fn execution_arn(org: &str, name: &str) -> String {
    format!(
        "arn:lakehost:states:{org}:execution:{}:{name}",
        state_machine(org)
    )
}

/// ISO 8601 with microseconds and the UTC offset: `2026-11-22T02:00:00.000000+00:00`.
pub fn iso_date(micros: i64) -> String {
    DateTime::<Utc>::from_timestamp_micros(micros)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%S%.6f+00:00")
        .to_string()
}

/// The spec's Execution object, plus `error` and `cause` (null unless the run
/// ended other than SUCCEEDED): why it failed, timed out or was aborted.
pub fn execution_json(run: &DailyRun) -> Value {
    json!({
        "name": run.name,
        "status": run.status.as_str(),
        "startDate": iso_date(run.started_at),
        "stopDate": run.stopped_at.map(iso_date),
        "error": run.error,
        "cause": run.cause,
    })
}

/// What GET /dailyRun/execution_status answers (parameter `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusMode {
    List,
    Latest,
    LastSuccessful,
}

/// The spec's 400 message for a mode that is not one of the three.
pub const INVALID_MODE: &str =
    "mode is not valid, mode should be one of: list, latest, last_successful";

/// `mode`: absent means list; otherwise list, latest or last_successful in
/// any case.
pub fn status_mode(mode: Option<&str>) -> Option<StatusMode> {
    match mode.map(str::to_ascii_lowercase).as_deref() {
        None | Some("list") => Some(StatusMode::List),
        Some("latest") => Some(StatusMode::Latest),
        Some("last_successful") => Some(StatusMode::LastSuccessful),
        Some(_) => None,
    }
}

/// Executions mode=list returns without a `limit`, and the range it is clamped to.
pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 200;

/// `limit`: 50 when absent, clamped to 1..=200; `None` when not an integer.
pub fn status_limit(limit: Option<&str>) -> Option<u32> {
    let Some(text) = limit else {
        return Some(DEFAULT_LIMIT);
    };
    let value: i64 = text.trim().parse().ok()?;
    Some(value.clamp(1, i64::from(MAX_LIMIT)) as u32)
}

/// The flag value a POST body carries: `{"dailyRun": v}` where v is a boolean,
/// one of the strings true, false, yes, no (any case), or the number 1 or 0.
/// `None` for anything else, which the endpoint answers with 400.
pub fn requested_flag(body: &[u8]) -> Option<bool> {
    let body: Value = serde_json::from_slice(body).ok()?;
    match body.as_object()?.get("dailyRun")? {
        Value::Bool(flag) => Some(*flag),
        Value::String(text) => match text.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" => Some(true),
            "false" | "no" => Some(false),
            _ => None,
        },
        Value::Number(n) => match n.as_u64() {
            Some(1) => Some(true),
            Some(0) => Some(false),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accepted_spellings_of_the_flag() {
        for (body, expected) in [
            (r#"{"dailyRun": true}"#, Some(true)),
            (r#"{"dailyRun": false}"#, Some(false)),
            (r#"{"dailyRun": "yes"}"#, Some(true)),
            (r#"{"dailyRun": "No"}"#, Some(false)),
            (r#"{"dailyRun": "TRUE"}"#, Some(true)),
            (r#"{"dailyRun": 1}"#, Some(true)),
            (r#"{"dailyRun": 0}"#, Some(false)),
            (r#"{"dailyRun": 2}"#, None),
            (r#"{"dailyRun": 1.0}"#, None),
            (r#"{"dailyRun": "maybe"}"#, None),
            (r#"{"dailyRun": null}"#, None),
            (r#"{"daily_run": true}"#, None),
            ("[true]", None),
            ("", None),
            ("{", None),
        ] {
            assert_eq!(requested_flag(body.as_bytes()), expected, "{body}");
        }
    }

    #[test]
    fn modes_are_case_insensitive_and_limits_clamped() {
        assert_eq!(status_mode(None), Some(StatusMode::List));
        assert_eq!(status_mode(Some("LATEST")), Some(StatusMode::Latest));
        assert_eq!(
            status_mode(Some("Last_Successful")),
            Some(StatusMode::LastSuccessful)
        );
        assert_eq!(status_mode(Some("")), None);
        assert_eq!(status_mode(Some("all")), None);
        assert_eq!(status_limit(None), Some(50));
        assert_eq!(status_limit(Some("0")), Some(1));
        assert_eq!(status_limit(Some("-5")), Some(1));
        assert_eq!(status_limit(Some("7")), Some(7));
        assert_eq!(status_limit(Some("5000")), Some(200));
        assert_eq!(status_limit(Some("ten")), None);
    }

    #[test]
    fn dates_and_arns_have_the_spec_shapes() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-22T02:00:00.123456Z")
            .unwrap()
            .timestamp_micros();
        assert_eq!(iso_date(at), "2026-11-22T02:00:00.123456+00:00");
        assert_eq!(
            execution_arn("demo", "DailyScheduledETL_demo_x"),
            "arn:lakehost:states:demo:execution:DailyScheduledETL_demo:DailyScheduledETL_demo_x"
        );
        assert_eq!(
            state_machine_arn("demo"),
            "arn:lakehost:states:demo:stateMachine:DailyScheduledETL_demo"
        );
    }
}
