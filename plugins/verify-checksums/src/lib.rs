//! Step 3 of the default load pipeline (spec "Checksums are computed and
//! compared with the expected values"). Each check_sum key is an aggregate
//! expression over all uploaded rows; the host's staged-sql capability runs
//! `SELECT <key> FROM staged` and refuses anything that is not a plain
//! aggregate over the staged rows. Comparison: integers exactly, floats
//! within a relative tolerance of 1e-9 (absolute 1e-9 near zero), strings
//! exactly. Any mismatch fails the load with CheckSumError; each item names
//! the aggregate, the expected and the actual value, with CheckResult FAIL.
//!
//! Grants: staged-sql, log.

wit_bindgen::generate!({ path: "../../wit", world: "step" });

use lakehost::pipeline::{
    staged_sql,
    types::{CapabilityError, ErrorItem, Failure},
};
use serde_json::Value;

struct VerifyChecksums;

const TOLERANCE: f64 = 1e-9;

/// Whether the actual text answers the expected JSON value.
fn matches(expected: &Value, actual: Option<&str>) -> bool {
    match (expected, actual) {
        (Value::Null, None) => true,
        (_, None) | (Value::Null, Some(_)) => false,
        (Value::String(text), Some(actual)) => text == actual,
        (Value::Number(n), Some(actual)) => {
            if let (Some(want), Ok(got)) = (n.as_i64(), actual.parse::<i64>()) {
                return want == got;
            }
            match (n.as_f64(), actual.parse::<f64>()) {
                (Some(want), Ok(got)) => {
                    let scale = want.abs().max(got.abs()).max(1.0);
                    (want - got).abs() <= TOLERANCE * scale
                }
                _ => false,
            }
        }
        (Value::Bool(b), Some(actual)) => actual == if *b { "true" } else { "false" },
        _ => false,
    }
}

fn mismatch(message: String) -> ErrorItem {
    ErrorItem {
        error_type: "CHECKSUM_MISMATCH".into(),
        error_message: message,
        check_result: Some("FAIL".into()),
    }
}

impl Guest for VerifyChecksums {
    fn run(context: LoadContext, _config: String) -> Result<Outcome, String> {
        let mut items = Vec::new();
        for (expression, expected_json) in &context.check_sum {
            let expected: Value =
                serde_json::from_str(expected_json).map_err(|e| format!("check_sum value: {e}"))?;
            let shown = match &expected {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let answer = staged_sql::query(&format!("SELECT {expression} FROM staged"), 2);
            let actual = match answer {
                Ok(rows) => rows
                    .into_iter()
                    .next()
                    .and_then(|r| r.into_iter().next())
                    .flatten(),
                Err(CapabilityError::Failed(why)) => {
                    items.push(mismatch(format!(
                        "Checksum {expression} could not be computed: {why}"
                    )));
                    continue;
                }
                Err(CapabilityError::NotGranted(why)) => return Err(why),
            };
            if !matches(&expected, actual.as_deref()) {
                items.push(mismatch(format!(
                    "Checksum mismatch for {expression}: expected {shown}, actual {}",
                    actual.as_deref().unwrap_or("NULL")
                )));
            }
        }
        if items.is_empty() {
            Ok(Outcome::Pass)
        } else {
            Ok(Outcome::Fail(Failure {
                error_type: "CheckSumError".into(),
                items,
            }))
        }
    }
}

export!(VerifyChecksums);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_compare_by_kind() {
        assert!(matches(&json!(100), Some("100")));
        assert!(!matches(&json!(100), Some("101")));
        assert!(matches(&json!(0.1), Some("0.10000000000000001")));
        assert!(matches(&json!(1234.5), Some("1234.5000000001")));
        assert!(!matches(&json!(1234.5), Some("1234.51")));
        assert!(matches(&json!("abc"), Some("abc")));
        assert!(!matches(&json!("abc"), Some("abd")));
        assert!(!matches(&json!(1), None));
        assert!(matches(&Value::Null, None));
    }
}
