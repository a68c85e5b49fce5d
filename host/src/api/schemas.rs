//! The wire shapes of the APIs as OpenAPI schemas: every rule a handler
//! enforces on a request (required fields, enums, patterns, lengths, value
//! types) and the shape of every response body. The small response bodies
//! (`{queryId}`, `{loadId}`, `{message}`, `{location}`, `{dailyRun}`) are
//! these types, serialised. The request types and the larger responses are
//! schema-only (handlers read request bodies field by field so each problem
//! gets the spec's own 400 text), and the schemathesis run in the test suite holds both sides to the server's
//! answers (tests/tests/integration/contract.rs).
#![allow(dead_code)]

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        RefOr, Schema,
        schema::{Array, ArrayBuilder, Object, ObjectBuilder, SchemaType, Type},
    },
};

use crate::engine::layout::MAX_NAME_CHARS;

// The name rules of `engine::layout` (`is_table_name`, `is_plain_name`),
// written as patterns: lowercase letters, digits and underscores, at most
// 128 characters; a table name does not start or end with an underscore.
const _: () = assert!(MAX_NAME_CHARS == 128, "the name patterns below say 128");

/// Any text with a character that is not white space.
const NOT_BLANK_PATTERN: &str = "\\S";

/// The body of every error answer: the spec's `{message}` (500s add the
/// request code to it; the identity endpoint adds `error`).
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub message: String,
}

// ---- query ----

/// POST /query.
#[derive(ToSchema)]
pub struct QueryRequest {
    /// One SQL statement. Text the engine cannot plan is refused with 400
    /// and the engine's message.
    #[schema(
        format = "sql",
        pattern = "\\S",
        examples("SELECT 1", "SELECT count(*) FROM generate_series(1, 10)")
    )]
    query: String,
    /// The database unqualified table names resolve in: one of the org's
    /// (`<org>_lake_v2`, `<org>_insights`, `<org>_data_input`, `<org>_sandbox`)
    /// or the zone's (`<zone>_lake`, ...); default the lake database. Any other name is 400.
    /// Each host's document lists its org's or zone's names as the enum.
    database: Option<String>,
}

/// 202 of POST /query.
#[derive(Serialize, ToSchema)]
pub struct QueryAccepted {
    #[serde(rename = "queryId")]
    pub query_id: String,
}

/// A query's state.
#[derive(ToSchema)]
#[allow(clippy::upper_case_acronyms)]
pub enum QueryStateName {
    QUEUED,
    RUNNING,
    SUCCEEDED,
    FAILED,
    CANCELLED,
}

/// What a statement does.
#[derive(ToSchema)]
#[allow(clippy::upper_case_acronyms)]
pub enum StatementTypeName {
    DDL,
    DML,
    UTILITY,
}

/// The Query resource's `status`; times are `MM-DD-YYYY HH:MM:SS` UTC.
#[derive(ToSchema)]
#[schema(as = QueryStatus)]
pub struct QueryStatusSchema {
    state: QueryStateName,
    #[serde(rename = "submissionDateTime")]
    #[schema(pattern = "^\\d{2}-\\d{2}-\\d{4} \\d{2}:\\d{2}:\\d{2}$")]
    submission_date_time: String,
    /// Present once the query has ended.
    #[serde(rename = "completionDateTime")]
    #[schema(pattern = "^\\d{2}-\\d{2}-\\d{4} \\d{2}:\\d{2}:\\d{2}$")]
    completion_date_time: Option<String>,
    /// Why a FAILED query failed.
    #[serde(rename = "stateChangeReason")]
    state_change_reason: Option<String>,
}

/// The Query resource (spec "Resources: Query").
#[derive(ToSchema)]
#[schema(as = Query)]
pub struct QueryResource {
    query: String,
    #[serde(rename = "queryId")]
    query_id: String,
    #[serde(rename = "statementType")]
    statement_type: StatementTypeName,
    status: QueryStatusSchema,
    /// Only on a query answered by result reuse (`Prefer: reuse=N`, or the
    /// org's `query.reuse_max_age_s`): the query whose result it answers with.
    #[serde(rename = "reusedQueryId")]
    reused_query_id: Option<String>,
    /// Only on a read whose rows went to its client while it ran: `flight-sql`
    /// (Arrow Flight SQL) or `pg-wire` (the Postgres protocol). Its result
    /// was not kept, so `/result` and `/csv` answer 409.
    #[schema(example = "flight-sql")]
    via: Option<String>,
    /// Only on a read that ran on several lakehost processes (the
    /// `[distributed]` section, off by default): how many workers its stages
    /// were sent to.
    #[schema(example = 2)]
    workers: Option<i64>,
}

/// One cell: `VarCharValue` holds the value as text; NULL is `{}`.
#[derive(ToSchema)]
pub struct Cell {
    #[serde(rename = "VarCharValue")]
    var_char_value: Option<String>,
}

/// One row; the first page's first row holds the column names.
#[derive(ToSchema)]
pub struct Row {
    #[serde(rename = "Data")]
    data: Vec<Cell>,
}

/// Whether a column may hold NULL.
#[derive(ToSchema)]
#[allow(clippy::upper_case_acronyms, non_camel_case_types)]
pub enum Nullability {
    NULLABLE,
    NOT_NULL,
    UNKNOWN,
}

/// One column of the result (Athena's ColumnInfo).
#[derive(ToSchema)]
#[serde(rename_all = "PascalCase")]
pub struct ColumnInfo {
    catalog_name: String,
    schema_name: String,
    table_name: String,
    name: String,
    label: String,
    /// The column's SQL type (`varchar`, `bigint`, `double`, `decimal`, ...).
    #[serde(rename = "Type")]
    sql_type: String,
    precision: i64,
    scale: i64,
    nullable: Nullability,
    case_sensitive: bool,
}

#[derive(ToSchema)]
pub struct ResultSetMetadata {
    #[serde(rename = "ColumnInfo")]
    column_info: Vec<ColumnInfo>,
}

#[derive(ToSchema)]
pub struct ResultSet {
    #[serde(rename = "Rows")]
    rows: Vec<Row>,
    #[serde(rename = "ResultSetMetadata")]
    result_set_metadata: ResultSetMetadata,
}

/// A result page (spec "Query result page"): at most 1,000 rows.
#[derive(ToSchema)]
pub struct ResultPage {
    #[serde(rename = "resultSet")]
    result_set: ResultSet,
    /// Present when more rows follow: pass it as `next_token`.
    #[serde(rename = "nextToken")]
    next_token: Option<String>,
}

/// 200 of POST /query with `Prefer: wait=N` when the query ended within the
/// wait: the Query resource, and when it SUCCEEDED its first result page.
#[derive(ToSchema)]
pub struct QueryEnded {
    query: String,
    #[serde(rename = "queryId")]
    query_id: String,
    #[serde(rename = "statementType")]
    statement_type: StatementTypeName,
    status: QueryStatusSchema,
    /// Present when the query SUCCEEDED.
    #[serde(rename = "resultSet")]
    result_set: Option<ResultSet>,
    /// Present when more rows follow: pass it as `next_token` to GET /query/{query_id}/result.
    #[serde(rename = "nextToken")]
    next_token: Option<String>,
}

/// One cell of a native page (`Accept: application/json; types=native`): the
/// value typed by its column (integers and floats as numbers, booleans;
/// decimals, texts, dates, timestamps and NaN/Infinity/-Infinity as strings),
/// or null for NULL. On the first page's header row, the column name.
pub struct NativeCell;

impl PartialSchema for NativeCell {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([
                Type::String,
                Type::Number,
                Type::Boolean,
                Type::Null,
            ]))
            .into()
    }
}

impl ToSchema for NativeCell {}

/// One row of a native page; the first page's first row holds the column names.
#[derive(ToSchema)]
pub struct NativeRow {
    #[serde(rename = "Data")]
    data: Vec<NativeCell>,
}

#[derive(ToSchema)]
pub struct NativeResultSet {
    #[serde(rename = "Rows")]
    rows: Vec<NativeRow>,
    #[serde(rename = "ResultSetMetadata")]
    result_set_metadata: ResultSetMetadata,
}

/// A result page with typed values (`Accept: application/json; types=native`):
/// the spec's page with each cell a bare JSON value.
#[derive(ToSchema)]
pub struct NativeResultPage {
    #[serde(rename = "resultSet")]
    result_set: NativeResultSet,
    /// Present when more rows follow: pass it as `next_token`.
    #[serde(rename = "nextToken")]
    next_token: Option<String>,
}

/// A whole result file's bytes (CSV, Arrow IPC stream, Parquet).
pub struct BinaryBody;

impl PartialSchema for BinaryBody {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Binary,
            )))
            .into()
    }
}

impl ToSchema for BinaryBody {}

/// The `format` of GET /query/{query_id}/csv's link (not in the spec).
#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LinkFormat {
    Csv,
    Arrow,
    Parquet,
}

/// 302 of GET /query/{query_id}/csv: the link, also in `Location`.
#[derive(Serialize, ToSchema)]
pub struct CsvLocation {
    pub location: String,
}

// ---- load ----

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

/// 202 of POST /load/{load_id}/commit, and other `{message}` answers.
#[derive(Serialize, ToSchema)]
pub struct MessageBody {
    pub message: String,
}

// ---- daily run ----

/// The flag as GET answers it and POST echoes it.
#[derive(Serialize, ToSchema)]
pub struct DailyRunFlag {
    #[serde(rename = "dailyRun")]
    pub daily_run: bool,
}

/// The flag a POST may send: a boolean, `true`/`false`/`yes`/`no` in any
/// case, or 1 or 0.
#[derive(ToSchema)]
#[serde(untagged)]
pub enum FlagValue {
    Flag(bool),
    Word(FlagWord),
    Digit(FlagDigit),
}

#[derive(ToSchema)]
#[schema(pattern = "^\\s*([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]|[Yy][Ee][Ss]|[Nn][Oo])\\s*$")]
pub struct FlagWord(String);

/// The flag as a number: 1 or 0.
pub struct FlagDigit;

impl PartialSchema for FlagDigit {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .enum_values(Some([0, 1]))
            .into()
    }
}

impl ToSchema for FlagDigit {}

/// POST /dailyRun/dailyRun_enabled.
#[derive(ToSchema)]
pub struct DailyRunFlagRequest {
    #[serde(rename = "dailyRun")]
    daily_run: FlagValue,
}

/// A run's status.
#[derive(ToSchema)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum ExecutionStatus {
    RUNNING,
    SUCCEEDED,
    FAILED,
    TIMED_OUT,
    ABORTED,
}

/// The spec's Execution object; dates are ISO 8601 with microseconds and
/// `+00:00`.
#[derive(ToSchema)]
pub struct Execution {
    name: String,
    status: ExecutionStatus,
    #[serde(rename = "startDate")]
    start_date: String,
    #[serde(rename = "stopDate")]
    stop_date: Option<String>,
    /// Why a run ended other than SUCCEEDED.
    error: Option<String>,
    cause: Option<String>,
}

/// mode=list.
#[derive(ToSchema)]
pub struct ExecutionList {
    executions: Vec<Execution>,
}

/// The three shapes of execution_status: a list (mode=list), one execution
/// or null (latest; the response schema adds the null), one execution or
/// `{message}` (last_successful).
#[derive(ToSchema)]
#[serde(untagged)]
pub enum ExecutionStatusBody {
    List(ExecutionList),
    One(Execution),
    NoSuccess(MessageBody),
}

/// 200 of POST /dailyRun/start_execution.
#[derive(ToSchema)]
pub struct ExecutionStarted {
    message: String,
    started: bool,
    #[serde(rename = "executionArn")]
    execution_arn: String,
    #[serde(rename = "startDate")]
    start_date: String,
    #[serde(rename = "executionName")]
    execution_name: String,
    #[serde(rename = "stateMachineArn")]
    state_machine_arn: String,
}

/// The run already going.
#[derive(ToSchema)]
pub struct RunningExecution {
    name: String,
    status: ExecutionStatus,
    #[serde(rename = "startDate")]
    start_date: String,
}

/// 409 of POST /dailyRun/start_execution.
#[derive(ToSchema)]
pub struct ExecutionNotStarted {
    message: String,
    started: bool,
    #[serde(rename = "executionName")]
    execution_name: Option<String>,
    #[serde(rename = "runningExecution")]
    running_execution: RunningExecution,
    #[serde(rename = "stateMachineArn")]
    state_machine_arn: String,
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
