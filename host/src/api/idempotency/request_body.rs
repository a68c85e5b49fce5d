//! What "the same request" means for an Idempotency-Key: the operation and
//! the body as canonical JSON (object keys sorted, no white space; a body
//! that is not JSON, byte for byte), digested together. It must never let
//! two bodies a JSON reader tells apart digest alike.

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::api::json_body::JsonBody;

/// A request body as the digest sees it.
pub trait RequestBody {
    /// Canonical JSON (`json:` first), else the bytes as sent (`raw:`).
    fn canonical(&self) -> Vec<u8>;
}

impl RequestBody for JsonBody {
    fn canonical(&self) -> Vec<u8> {
        let mut text = String::from("json:");
        if let Some(value) = &self.0 {
            write_canonical(value, &mut text);
        }
        text.into_bytes()
    }
}

impl RequestBody for [u8] {
    fn canonical(&self) -> Vec<u8> {
        match JsonBody::parse(self) {
            Ok(body) => body.canonical(),
            Err(_) => [b"raw:".as_slice(), self].concat(),
        }
    }
}

/// JSON with object keys sorted and no white space. Depth is bounded by
/// serde_json's parser (128), which built the value.
pub fn canonical_json(value: &Value) -> String {
    let mut text = String::new();
    write_canonical(value, &mut text);
    text
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (name, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(name.as_str()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The digest of an operation and its body: what "the same request" means.
pub fn request_hash(operation: &str, canonical_body: &[u8]) -> String {
    let mut digest = Sha256::new();
    digest.update(operation.as_bytes());
    digest.update(b"\n");
    digest.update(canonical_body);
    hex::encode(digest.finalize())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn canonical_json_ignores_key_order_and_white_space() {
        let a: Value =
            serde_json::from_str(r#"{"b": [1, {"y": 2, "x": "é"}], "a": null}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#);
        assert_ne!(
            canonical_json(&json!([1, 2])),
            canonical_json(&json!([2, 1]))
        );
    }

    #[test]
    fn bodies_that_are_not_json_compare_as_bytes() {
        assert_eq!(
            b" {\"a\": 1}".canonical(),
            JsonBody(Some(json!({"a": 1}))).canonical()
        );
        assert_eq!(b"  ".canonical(), JsonBody(None).canonical());
        assert_ne!(b"{not json".canonical(), b"{not json ".canonical());
        assert_ne!(b"null".canonical(), JsonBody(None).canonical());
    }
}
