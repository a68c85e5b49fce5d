//! Step 3 of the default load pipeline (spec "Checksums are computed and
//! compared with the expected values"). Each check_sum key is an aggregate
//! expression over all uploaded rows; the host's staged-sql capability runs
//! `SELECT <key> FROM staged` and refuses anything that is not a plain
//! aggregate over the staged rows. Comparison: integers exactly, floats
//! within a relative tolerance of 1e-9 (absolute 1e-9 near zero), strings
//! exactly. An expected value sent as a string (the Comotion CLI sends every
//! value so) that parses as a number is compared as that number when the
//! aggregate is numeric (its `arrow_typeof`, computed in the same query);
//! otherwise as a string. Any mismatch fails the load with CheckSumError; each
//! item names the aggregate, the expected and the actual value, with
//! CheckResult FAIL.
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

/// Whether the actual text (of an aggregate of `actual_type`, as
/// `arrow_typeof` names it) answers the expected JSON value.
fn matches(expected: &Value, actual: Option<&str>, actual_type: &str) -> bool {
    match (expected, actual) {
        (Value::Null, None) => true,
        (_, None) | (Value::Null, Some(_)) => false,
        (Value::String(text), Some(actual)) => {
            let number = text.trim().parse::<f64>().ok().filter(|f| f.is_finite());
            match number {
                Some(float) if is_numeric(actual_type) => {
                    numbers_match(text.trim().parse::<i64>().ok(), float, actual)
                }
                _ => text == actual,
            }
        }
        (Value::Number(n), Some(actual)) => match n.as_f64() {
            Some(float) => numbers_match(n.as_i64(), float, actual),
            None => false,
        },
        (Value::Bool(b), Some(actual)) => actual == if *b { "true" } else { "false" },
        _ => false,
    }
}

/// Integers exactly, anything else within the relative tolerance.
fn numbers_match(want_integer: Option<i64>, want: f64, actual: &str) -> bool {
    if let (Some(want), Ok(got)) = (want_integer, actual.parse::<i64>()) {
        return want == got;
    }
    match actual.parse::<f64>() {
        Ok(got) => {
            let scale = want.abs().max(got.abs()).max(1.0);
            (want - got).abs() <= TOLERANCE * scale
        }
        Err(_) => false,
    }
}

/// Arrow's integer, float and decimal types, as `arrow_typeof` prints them.
fn is_numeric(arrow_type: &str) -> bool {
    ["Int", "UInt", "Float", "Decimal"]
        .iter()
        .any(|prefix| arrow_type.starts_with(prefix))
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
            let answer = staged_sql::query(
                &format!("SELECT {expression}, arrow_typeof({expression}) FROM staged"),
                2,
            );
            let (actual, actual_type) = match answer {
                Ok(rows) => {
                    let mut cells = rows.into_iter().next().unwrap_or_default().into_iter();
                    let actual = cells.next().flatten();
                    (actual, cells.next().flatten().unwrap_or_default())
                }
                Err(CapabilityError::Failed(why)) => {
                    items.push(mismatch(format!(
                        "Checksum {expression} could not be computed: {why}"
                    )));
                    continue;
                }
                Err(CapabilityError::NotGranted(why)) => return Err(why),
            };
            if !matches(&expected, actual.as_deref(), &actual_type) {
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
        assert!(matches(&json!(100), Some("100"), "Int64"));
        assert!(!matches(&json!(100), Some("101"), "Int64"));
        assert!(matches(&json!(0.1), Some("0.10000000000000001"), "Float64"));
        assert!(matches(&json!(1234.5), Some("1234.5000000001"), "Float64"));
        assert!(!matches(&json!(1234.5), Some("1234.51"), "Float64"));
        assert!(matches(&json!("abc"), Some("abc"), "Utf8"));
        assert!(!matches(&json!("abc"), Some("abd"), "Utf8"));
        assert!(!matches(&json!(1), None, "Int64"));
        assert!(matches(&Value::Null, None, "Null"));
    }

    #[test]
    fn numbers_sent_as_strings_compare_as_numbers_when_the_aggregate_is_numeric() {
        assert!(matches(
            &json!("123.3"),
            Some("123.30000000000001"),
            "Float64"
        ));
        assert!(matches(&json!("53"), Some("53"), "Int64"));
        assert!(matches(&json!(" 53 "), Some("53"), "Int64"));
        assert!(!matches(&json!("54"), Some("53"), "Int64"));
        assert!(matches(&json!("12.50"), Some("12.5"), "Decimal128(10, 2)"));
        assert!(matches(&json!("7"), Some("7"), "UInt64"));
        assert!(matches(&json!("0204"), Some("204"), "Int64"));
        // A string aggregate compares as a string, digits or not.
        assert!(!matches(&json!("0123"), Some("123"), "Utf8"));
        assert!(matches(&json!("0123"), Some("0123"), "Utf8View"));
        // A string that is no number compares as a string.
        assert!(!matches(&json!("many"), Some("53"), "Int64"));
    }
}
