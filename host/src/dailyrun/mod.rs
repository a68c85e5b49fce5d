//! The daily run (spec "Daily run flag", "GET/POST /dailyRun/dailyRun_enabled").
//! So far: the per-org flag that switches the scheduled nightly start on and
//! off. Executions, the scheduler and the run's pipeline are still to come.
//! Knows no HTTP.

use serde_json::Value;

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
}
