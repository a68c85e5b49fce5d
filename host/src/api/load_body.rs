//! The bodies of the load endpoints as the spec words them: POST /load (its
//! checks in the spec's order and their 400 texts), the file_key of POST
//! /load/{id}/file, and the check_sum of POST /load/{id}/commit. The domain
//! receives the typed request.

use serde_json::{Map, Value};

use super::error::ApiError;
use crate::{
    engine::layout::{SERVICE_CLIENT_COLUMN, is_plain_name, is_table_name},
    load::{APPEND_ONLY, LoadRequest},
};

/// The spec's 400 for a file_key that breaks the rule of POST /load/{id}/file.
pub const BAD_FILE_KEY: &str = "InvalidParameterError: file_key - Value should contain only \
                                lowercase letters, digits and underscores (at most 128).";

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest(message.into())
}

fn missing(name: &str) -> ApiError {
    invalid(format!(
        "MissingParameterError: \"{name}\" parameter missing from request."
    ))
}

/// Checks a POST /load body in the spec's order: missing fields, then
/// load_type, then table_name, then the optional fields.
pub fn load_request(body: &Map<String, Value>) -> Result<LoadRequest, ApiError> {
    let text = |name: &str| match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(invalid(format!(
            "InvalidParameterError: {name} - Value should be a string."
        ))),
    };
    let load_type = text("load_type")?;
    let table_name = text("table_name")?;
    let load_type = load_type.ok_or_else(|| missing("load_type"))?;
    let table_name = table_name.ok_or_else(|| missing("table_name"))?;
    if load_type != APPEND_ONLY {
        return Err(invalid(
            "InvalidParameterError: invalid load_type parameter",
        ));
    }
    if !is_table_name(table_name) {
        return Err(invalid(
            "InvalidParameterError: table_name - Value should be in lowercase and contain \
             only lowercase letters and underscores.",
        ));
    }
    let load_as_service_client_id = text("load_as_service_client_id")?
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from);
    let partitions = match body.get("partitions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => partition_columns(items)?,
        Some(_) => {
            return Err(invalid(
                "InvalidParameterError: partitions - Value should be a list of column names.",
            ));
        }
    };
    Ok(LoadRequest {
        table_name: table_name.to_string(),
        load_as_service_client_id,
        partitions,
    })
}

/// The extra partition columns: column names, each once, not the two every
/// lake table is partitioned by anyway.
fn partition_columns(items: &[Value]) -> Result<Vec<String>, ApiError> {
    let refused = |why: String| invalid(format!("InvalidParameterError: partitions - {why}"));
    let mut columns: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Some(name) = item.as_str() else {
            return Err(refused("Value should be a list of column names.".into()));
        };
        if !is_plain_name(name) {
            return Err(refused(format!(
                "\"{name}\" should contain only lowercase letters, digits and underscores."
            )));
        }
        if name == SERVICE_CLIENT_COLUMN {
            return Err(refused(
                "service_client_id is always a partition; do not list it.".into(),
            ));
        }
        if columns.iter().any(|c| c == name) {
            return Err(refused(format!("\"{name}\" is listed twice.")));
        }
        columns.push(name.to_string());
    }
    Ok(columns)
}

/// The optional file_key of POST /load/{id}/file (its rule is the domain's).
pub fn file_key(body: Option<Map<String, Value>>) -> Result<Option<String>, ApiError> {
    match body.as_ref().and_then(|b| b.get("file_key")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(key)) => Ok(Some(key.clone())),
        Some(_) => Err(invalid(BAD_FILE_KEY)),
    }
}

/// The check_sum of POST /load/{id}/commit: an object with at least one
/// entry whose values are strings, integers or floats. Returns the entries
/// as (expression, expected value as JSON text), in the object's order.
pub fn check_sums(body: Option<&Value>) -> Result<Vec<(String, String)>, ApiError> {
    let missing = || {
        invalid("MissingParameter: missing check_sum parameter. At least one check_sum is required")
    };
    let malformed = || invalid("Invalid checksum data provided.");
    let check_sum = match body
        .and_then(Value::as_object)
        .and_then(|b| b.get("check_sum"))
    {
        None | Some(Value::Null) => return Err(missing()),
        Some(Value::Object(entries)) => entries,
        Some(_) => return Err(malformed()),
    };
    if check_sum.is_empty() {
        return Err(missing());
    }
    check_sum
        .iter()
        .map(|(expression, expected)| match expected {
            Value::String(_) | Value::Number(_) if !expression.trim().is_empty() => {
                Ok((expression.clone(), expected.to_string()))
            }
            _ => Err(malformed()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(body: Value) -> String {
        let body = body.as_object().unwrap().clone();
        match load_request(&body) {
            Err(ApiError::BadRequest(m)) => m,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn requests_are_checked_in_the_specs_order() {
        let ok = load_request(
            json!({
                "load_type": "APPEND_ONLY", "table_name": "trips_2024",
                "load_as_service_client_id": "12", "partitions": ["day"]
            })
            .as_object()
            .unwrap(),
        )
        .unwrap();
        assert_eq!(ok.load_as_service_client_id.as_deref(), Some("12"));
        assert_eq!(ok.partitions, ["day"]);
        assert_eq!(
            message(json!({"table_name": "t"})),
            "MissingParameterError: \"load_type\" parameter missing from request."
        );
        assert_eq!(
            message(json!({"load_type": "APPEND"})),
            "MissingParameterError: \"table_name\" parameter missing from request."
        );
        assert_eq!(
            message(json!({"load_type": "OVERWRITE", "table_name": "t"})),
            "InvalidParameterError: invalid load_type parameter"
        );
        for bad in ["Trips", "_trips", "trips_", "tr-ips", "", "trips.x"] {
            assert!(
                message(json!({"load_type": "APPEND_ONLY", "table_name": bad}))
                    .starts_with("InvalidParameterError: table_name - "),
                "{bad}"
            );
        }
        for partitions in [
            json!("day"),
            json!([1]),
            json!(["Day"]),
            json!(["day", "day"]),
            json!(["service_client_id"]),
        ] {
            assert!(
                message(json!({
                    "load_type": "APPEND_ONLY", "table_name": "t", "partitions": partitions
                }))
                .starts_with("InvalidParameterError: partitions - ")
            );
        }
        assert!(
            message(json!({
                "load_type": "APPEND_ONLY", "table_name": "t", "load_as_service_client_id": 12
            }))
            .starts_with("InvalidParameterError: load_as_service_client_id - ")
        );
    }

    #[test]
    fn check_sums_need_one_entry_of_strings_or_numbers() {
        let ok = check_sums(Some(
            &json!({"check_sum": {"count(*)": 3, "sum(x)": "1.5"}}),
        ))
        .unwrap();
        assert_eq!(
            ok,
            [
                ("count(*)".to_string(), "3".to_string()),
                ("sum(x)".to_string(), "\"1.5\"".to_string())
            ]
        );
        for body in [None, Some(json!({})), Some(json!({"check_sum": {}}))] {
            assert!(
                matches!(check_sums(body.as_ref()), Err(ApiError::BadRequest(m)) if m.starts_with("MissingParameter:")),
                "{body:?}"
            );
        }
        for body in [
            json!({"check_sum": [1]}),
            json!({"check_sum": {"count(*)": true}}),
            json!({"check_sum": {" ": 1}}),
        ] {
            assert!(
                matches!(check_sums(Some(&body)), Err(ApiError::BadRequest(m)) if m == "Invalid checksum data provided."),
                "{body}"
            );
        }
    }
}
