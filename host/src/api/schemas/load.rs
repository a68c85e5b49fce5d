//! The load API's wire shapes: POST /load, the Load resource, file
//! registration and its upload descriptor, and the commit with its check
//! sums.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::{
    PartialSchema, ToSchema,
    openapi::schema::{Array, ArrayBuilder, Object, ObjectBuilder, SchemaType, Type},
};

use crate::engine::layout::MAX_NAME_CHARS;

// The name rules of `engine::layout` (`is_table_name`, `is_plain_name`),
// written as patterns: lowercase letters, digits and underscores, at most
// 128 characters; a table name does not start or end with an underscore.
const _: () = assert!(MAX_NAME_CHARS == 128, "the name patterns below say 128");

/// Any text with a character that is not white space.
const NOT_BLANK_PATTERN: &str = "\\S";

/// POST /load.
#[derive(ToSchema)]
pub struct LoadRequest {
    load_type: LoadType,
    #[schema(pattern = "^[a-z0-9]([a-z0-9_]{0,126}[a-z0-9])?$")]
    table_name: String,
    /// Load every row as this service client (AllServiceClientAnalyst and
    /// ZoneAdmin only); blank means none.
    load_as_service_client_id: Option<String>,
    /// Extra partition columns, each once; `service_client_id` is always one.
    #[schema(schema_with = partition_list)]
    partitions: Option<Vec<PartitionColumn>>,
}

/// The one load type.
#[derive(ToSchema)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum LoadType {
    APPEND_ONLY,
}

/// A partition column: a column name, not `service_client_id`.
#[derive(ToSchema)]
#[schema(pattern = "^(?!service_client_id$)[a-z0-9_]{1,128}$")]
pub struct PartitionColumn(String);

/// 202 of POST /load.
#[derive(Serialize, ToSchema)]
pub struct LoadAccepted {
    #[serde(rename = "loadId")]
    pub load_id: String,
}

/// A load's state.
#[derive(ToSchema)]
#[allow(clippy::upper_case_acronyms)]
pub enum LoadStatusName {
    OPEN,
    PROCESSING,
    SUCCESS,
    FAIL,
}

/// One `ErrorMessages` item: a sentence, or (CheckSumError with
/// `pipeline.error_messages = "spec"`) the spec's object.
#[derive(ToSchema)]
#[serde(untagged)]
pub enum ErrorMessage {
    Text(String),
    Detail(BTreeMap<String, String>),
}

/// The Load resource (spec "Resources: Load").
#[derive(ToSchema)]
#[schema(as = Load)]
pub struct LoadResource {
    #[serde(rename = "loadId")]
    load_id: String,
    #[serde(rename = "LoadStatus")]
    load_status: LoadStatusName,
    load_type: LoadType,
    table_name: String,
    load_as_service_client_id: Option<String>,
    partitions: Vec<String>,
    /// On FAIL: the spec's ErrorType.
    #[serde(rename = "ErrorType")]
    error_type: Option<String>,
    /// On FAIL: strings, or objects for CheckSumError (see the description).
    #[serde(rename = "ErrorMessages")]
    error_messages: Option<Vec<ErrorMessage>>,
    /// On FAIL: every item as an object (ErrorType, ErrorMessage, CheckResult).
    #[serde(rename = "ErrorDetails")]
    error_details: Option<Vec<BTreeMap<String, String>>>,
}

/// POST /load/{load_id}/file (the body itself is optional).
#[derive(ToSchema)]
pub struct FileRequest {
    /// Names the file; the same key again replaces it. Default: a new name.
    #[schema(pattern = "^[a-z0-9_]{1,128}$")]
    file_key: Option<String>,
}

/// The form fields of a browser-style POST upload.
#[derive(ToSchema)]
pub struct PresignedPostFields {
    key: String,
    #[serde(rename = "AWSAccessKeyId")]
    aws_access_key_id: String,
    #[serde(rename = "x-amz-security-token")]
    security_token: String,
    #[serde(rename = "Policy")]
    policy: String,
    #[serde(rename = "Signature")]
    signature: String,
}

#[derive(ToSchema)]
pub struct PresignedPost {
    url: String,
    fields: PresignedPostFields,
}

/// Temporary S3 credentials for the one object key.
#[derive(ToSchema)]
#[serde(rename_all = "PascalCase")]
pub struct StsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
    /// RFC 3339, UTC.
    expiration: String,
}

/// The upload descriptor (spec "Upload descriptor").
#[derive(ToSchema)]
pub struct UploadDescriptor {
    presigned_url: PresignedPost,
    sts_credentials: StsCredentials,
    path: String,
    bucket: String,
}

/// An expected check_sum value: a number, or a string (compared as a number
/// when the aggregate is numeric).
#[derive(ToSchema)]
#[serde(untagged)]
pub enum CheckSumValue {
    Number(f64),
    Text(String),
}

/// POST /load/{load_id}/commit.
#[derive(ToSchema)]
pub struct CommitRequest {
    /// At least one entry: an SQL aggregate over the uploaded rows (the
    /// key, not blank) and the value it must give.
    #[schema(schema_with = check_sum_entries)]
    check_sum: BTreeMap<String, CheckSumValue>,
}

/// `partitions`: a list of distinct partition columns, or null.
fn partition_list() -> Array {
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .items(PartitionColumn::schema())
        .unique_items(true)
        .build()
}

/// `check_sum`: at least one entry, each key not blank.
fn check_sum_entries() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .min_properties(Some(1))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(NOT_BLANK_PATTERN))
                .build(),
        ))
        .additional_properties(Some(CheckSumValue::schema()))
        .build()
}
