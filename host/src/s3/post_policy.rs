//! S3's POST policy language, as the descriptor's form carries it: decoding a
//! base64 policy document (its expiration and conditions) and checking its
//! conditions against a form's fields, including S3's rule that every field
//! but a few must be covered by a condition.
//!
//! It only reads the policy and the fields; the signature, the expiry against
//! the clock and the upload itself are `form.rs`'s.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use base64::{Engine as _, engine::general_purpose::STANDARD};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::refusal::{S3Refusal, denied, error};

/// A policy condition (S3's POST policy language).
#[derive(Debug, PartialEq, Eq)]
enum Condition {
    Equals(String, String),
    StartsWith(String, String),
    LengthRange(u64, u64),
}

pub(crate) struct Policy {
    pub(super) expiration: DateTime<Utc>,
    conditions: Vec<Condition>,
}

fn invalid_policy(why: &str) -> S3Refusal {
    error(
        StatusCode::BAD_REQUEST,
        "InvalidPolicyDocument",
        format!("Invalid Policy: {why}"),
    )
}

pub(crate) fn parse_policy(encoded: &str) -> Result<Policy, S3Refusal> {
    let bytes = STANDARD
        .decode(encoded.trim())
        .map_err(|_| invalid_policy("not base64"))?;
    let document: Value = serde_json::from_slice(&bytes).map_err(|_| invalid_policy("not JSON"))?;
    let expiration = document
        .get("expiration")
        .and_then(Value::as_str)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .ok_or_else(|| invalid_policy("expiration missing or not ISO 8601"))?
        .with_timezone(&Utc);
    let field_name = |v: &Value| {
        v.as_str()
            .and_then(|n| n.strip_prefix('$'))
            .map(str::to_ascii_lowercase)
            .ok_or_else(|| invalid_policy("a condition names no $field"))
    };
    let number = |v: &Value| {
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(|| invalid_policy("content-length-range needs two numbers"))
    };
    let mut conditions = Vec::new();
    for item in document
        .get("conditions")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid_policy("conditions missing"))?
    {
        match item {
            Value::Object(map) if map.len() == 1 => {
                let (name, value) = map.iter().next().expect("one entry");
                let value = value
                    .as_str()
                    .ok_or_else(|| invalid_policy("a condition value is not a string"))?;
                conditions.push(Condition::Equals(name.to_ascii_lowercase(), value.into()));
            }
            Value::Array(parts) if parts.len() == 3 => {
                let op = parts[0].as_str().unwrap_or_default().to_ascii_lowercase();
                match op.as_str() {
                    "eq" | "starts-with" => {
                        let name = field_name(&parts[1])?;
                        let value = parts[2]
                            .as_str()
                            .ok_or_else(|| invalid_policy("a condition value is not a string"))?
                            .to_string();
                        conditions.push(if op == "eq" {
                            Condition::Equals(name, value)
                        } else {
                            Condition::StartsWith(name, value)
                        });
                    }
                    "content-length-range" => conditions.push(Condition::LengthRange(
                        number(&parts[1])?,
                        number(&parts[2])?,
                    )),
                    _ => return Err(invalid_policy("unknown condition")),
                }
            }
            _ => {
                return Err(invalid_policy(
                    "a condition is neither an object nor a triple",
                ));
            }
        }
    }
    Ok(Policy {
        expiration,
        conditions,
    })
}

/// Fields every form may carry without a condition (S3's rule).
fn exempt_from_conditions(name: &str) -> bool {
    matches!(name, "awsaccesskeyid" | "signature" | "policy" | "file")
        || name.starts_with("x-ignore-")
}

/// Checks the policy's conditions against the form (`bucket` from the URL).
pub(crate) fn check_conditions(
    policy: &Policy,
    fields: &BTreeMap<String, String>,
    bucket: &str,
) -> Result<(u64, u64), S3Refusal> {
    let value_of = |name: &str| -> Option<&str> {
        if name == "bucket" {
            Some(bucket)
        } else {
            fields.get(name).map(String::as_str)
        }
    };
    let mut range = (0, u64::MAX);
    for condition in &policy.conditions {
        let failed = |what: &str| {
            denied(format!(
                "Invalid according to Policy: Policy Condition failed: {what}"
            ))
        };
        match condition {
            Condition::Equals(name, expected) => {
                if value_of(name) != Some(expected.as_str()) {
                    return Err(failed(&format!("[\"eq\", \"${name}\", \"{expected}\"]")));
                }
            }
            Condition::StartsWith(name, prefix) => {
                if !value_of(name)
                    .unwrap_or_default()
                    .starts_with(prefix.as_str())
                {
                    return Err(failed(&format!(
                        "[\"starts-with\", \"${name}\", \"{prefix}\"]"
                    )));
                }
            }
            Condition::LengthRange(min, max) => range = (*min, *max),
        }
    }
    for name in fields.keys() {
        let covered = policy.conditions.iter().any(|c| match c {
            Condition::Equals(n, _) | Condition::StartsWith(n, _) => n == name,
            Condition::LengthRange(..) => false,
        });
        if !covered && !exempt_from_conditions(name) {
            return Err(denied(format!(
                "Invalid according to Policy: Extra input fields: {name}"
            )));
        }
    }
    Ok(range)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn encode(policy: Value) -> String {
        STANDARD.encode(policy.to_string())
    }

    fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn policies_parse_both_condition_forms() {
        let policy = parse_policy(&encode(json!({
            "expiration": "2030-01-01T00:00:00.000Z",
            "conditions": [
                {"bucket": "b"},
                ["eq", "$Key", "k"],
                ["starts-with", "$Content-Type", "application/"],
                ["content-length-range", 1, "1000"],
            ]
        })))
        .unwrap();
        assert_eq!(
            policy.conditions,
            [
                Condition::Equals("bucket".into(), "b".into()),
                Condition::Equals("key".into(), "k".into()),
                Condition::StartsWith("content-type".into(), "application/".into()),
                Condition::LengthRange(1, 1000),
            ]
        );
        for bad in [
            json!({"conditions": []}),
            json!({"expiration": "tomorrow", "conditions": []}),
            json!({"expiration": "2030-01-01T00:00:00Z", "conditions": [["eq", "key", "k"]]}),
            json!({"expiration": "2030-01-01T00:00:00Z", "conditions": [["between", "$key", "k"]]}),
        ] {
            assert!(parse_policy(&encode(bad)).is_err());
        }
        assert!(parse_policy("%%%").is_err());
    }

    #[test]
    fn every_field_needs_a_condition_and_every_condition_must_hold() {
        let policy = parse_policy(&encode(json!({
            "expiration": "2030-01-01T00:00:00Z",
            "conditions": [{"bucket": "b"}, {"key": "k"}, ["content-length-range", 1, 10]]
        })))
        .unwrap();
        let ok = fields(&[
            ("key", "k"),
            ("policy", "p"),
            ("signature", "s"),
            ("awsaccesskeyid", "a"),
        ]);
        assert_eq!(check_conditions(&policy, &ok, "b").unwrap(), (1, 10));
        assert!(check_conditions(&policy, &ok, "other").is_err(), "bucket");
        let wrong_key = fields(&[("key", "k2")]);
        assert!(check_conditions(&policy, &wrong_key, "b").is_err());
        let extra = fields(&[("key", "k"), ("content-type", "text/plain")]);
        let err = check_conditions(&policy, &extra, "b").unwrap_err();
        assert!(err.message.contains("Extra input fields: content-type"));
        let ignored = fields(&[("key", "k"), ("x-ignore-me", "1")]);
        assert!(check_conditions(&policy, &ignored, "b").is_ok());
    }
}
