//! The browser-style upload of a descriptor's `presigned_url`: an HTTP POST of
//! a multipart form to `<endpoint>/<bucket>` carrying the descriptor's fields
//! and then the file (S3's "POST Object" with a signature-version-2 policy).
//!
//! Checked before a byte of the file is stored, in this order: the form's
//! shape, the policy's signature (with the secret of its access key), the
//! policy's expiry (on the injected clock), every policy condition, that
//! every form field is covered by a condition, and the session token's grant
//! (`LoadService::check_upload`: this bucket and key, unexpired, a load that
//! takes files). The file then streams into the staging area, bounded by the
//! policy's content-length-range and `uploads.max_file_bytes`. Errors are
//! S3's XML with S3's status codes (`refusal.rs`).
//!
//! The policy language itself (decoding the document, checking its
//! conditions) is `post_policy.rs`; this module owns the form, the checks'
//! order and the upload.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    body::Body,
    extract::{Multipart, Path, State, multipart::Field},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use object_store::ObjectStore;

// Re-exported: the fuzz harness (`fuzzing.rs`) reaches the policy parser here.
pub(crate) use super::post_policy::{check_conditions, parse_policy};
use super::{
    refusal::{LOAD_CLOSED, S3Refusal, denied, error, internal, upload_refused, xml_escape},
    staged_object::{StreamError, stream_to_object},
};
use crate::load::{
    LoadService,
    grant::{UploadAttempt, form_signature_matches},
    staging_path,
};

/// What the form handler needs.
#[derive(Clone)]
pub struct FormState {
    pub loads: Arc<LoadService>,
    pub store: Arc<dyn ObjectStore>,
}

/// The largest value of a text field, and the most text fields, a form may have.
const MAX_FIELD_BYTES: usize = 64 * 1024;
const MAX_FIELDS: usize = 50;

/// Reads a text field, refusing one longer than `MAX_FIELD_BYTES`.
async fn field_text(mut field: Field<'_>) -> Result<String, S3Refusal> {
    let mut bytes = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            "MalformedPOSTRequest",
            e.to_string(),
        )
    })? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_FIELD_BYTES {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "MaxPostPreDataLengthExceeded",
                "Your POST request fields preceding the upload file were too large.",
            ));
        }
    }
    String::from_utf8(bytes).map_err(|_| {
        error(
            StatusCode::BAD_REQUEST,
            "MalformedPOSTRequest",
            "A form field is not UTF-8.",
        )
    })
}

fn required<'a>(fields: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str, S3Refusal> {
    fields.get(name).map(String::as_str).ok_or_else(|| {
        error(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            format!("Bucket POST must contain a field named '{name}'."),
        )
    })
}

/// POST `/<bucket>`: one file, as the descriptor's form allows.
pub async fn post_object(
    State(state): State<FormState>,
    Path(bucket): Path<String>,
    mut form: Multipart,
) -> Result<Response, S3Refusal> {
    let malformed = |e: axum::extract::multipart::MultipartError| {
        error(
            StatusCode::BAD_REQUEST,
            "MalformedPOSTRequest",
            e.body_text(),
        )
    };
    let mut fields = BTreeMap::new();
    let file = loop {
        let Some(field) = form.next_field().await.map_err(malformed)? else {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "InvalidArgument",
                "POST requires exactly one file upload per request.",
            ));
        };
        let name = field.name().unwrap_or_default().to_ascii_lowercase();
        if name == "file" {
            break field;
        }
        if fields.len() >= MAX_FIELDS {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "MalformedPOSTRequest",
                "The form has too many fields.",
            ));
        }
        let value = field_text(field).await?;
        fields.insert(name, value);
    };

    if fields.contains_key("x-amz-signature") || fields.contains_key("x-amz-algorithm") {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "This endpoint takes the descriptor's form (AWSAccessKeyId, Policy, Signature).",
        ));
    }
    let access_key = required(&fields, "awsaccesskeyid")?;
    let policy_text = required(&fields, "policy")?;
    let signature = required(&fields, "signature")?;
    let key = required(&fields, "key")?;
    let secret = state.loads.grants().secret_for(access_key);
    if !form_signature_matches(&secret, policy_text, signature) {
        return Err(denied(
            "The request signature we calculated does not match the signature you provided.",
        )
        .with_code("SignatureDoesNotMatch"));
    }
    let policy = parse_policy(policy_text)?;
    let now = state.loads.now_seconds();
    if policy.expiration.timestamp() <= now {
        return Err(denied("Invalid according to Policy: Policy expired."));
    }
    let (min, max) = check_conditions(&policy, &fields, &bucket)?;

    let token = fields.get("x-amz-security-token").ok_or_else(|| {
        denied("These credentials need their session token (x-amz-security-token).")
    })?;
    let grant = state
        .loads
        .check_upload(UploadAttempt {
            session_token: token,
            access_key_id: access_key,
            bucket: &bucket,
            object_key: key,
        })
        .await
        .map_err(upload_refused)?;

    let limit = max.min(state.loads.config().max_file_bytes);
    let path = staging_path(&grant.object_key);
    // Sizes outside the range, or a load that stopped taking files while the
    // bytes arrived, abort the new object: the staged file stays.
    let takes_files = state.loads.accepts_upload(&grant);
    let size = stream_to_object(&state.store, &path, file, min..=limit, takes_files)
        .await
        .map_err(|e| match e {
            StreamError::LoadNotOpen => denied(LOAD_CLOSED),
            StreamError::TooLarge => error(
                StatusCode::BAD_REQUEST,
                "EntityTooLarge",
                "Your proposed upload exceeds the maximum allowed size.",
            ),
            StreamError::TooSmall => error(
                StatusCode::BAD_REQUEST,
                "EntityTooSmall",
                "Your proposed upload is smaller than the minimum allowed size.",
            ),
            StreamError::Body(why) => {
                error(StatusCode::BAD_REQUEST, "IncompleteBody", why.to_string())
            }
            failed @ (StreamError::Store(_) | StreamError::Load(_)) => {
                internal("writing a form upload", &failed)
            }
        })?;
    let recorded = state
        .loads
        .record_upload(&grant, size)
        .await
        .map_err(|e| internal("recording a form upload", &e))?;
    if !recorded {
        return Err(denied(LOAD_CLOSED));
    }
    Ok(success(&fields, &bucket, key))
}

/// S3's answer to a POST: 204 by default, or `success_action_status` 200/201
/// (201 with the PostResponse document).
fn success(fields: &BTreeMap<String, String>, bucket: &str, key: &str) -> Response {
    match fields.get("success_action_status").map(String::as_str) {
        Some("200") => StatusCode::OK.into_response(),
        Some("201") => {
            let body = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<PostResponse><Bucket>{}</Bucket><Key>{}</Key></PostResponse>",
                xml_escape(bucket),
                xml_escape(key)
            );
            let mut response = (StatusCode::CREATED, Body::from(body)).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/xml"),
            );
            response
        }
        _ => StatusCode::NO_CONTENT.into_response(),
    }
}
