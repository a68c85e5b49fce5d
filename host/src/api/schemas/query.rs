//! The query API's wire shapes: POST /query, the Query resource, result
//! pages (text and native cells), whole-result bodies and links.

use serde::Serialize;
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        RefOr, Schema,
        schema::{ObjectBuilder, SchemaType, Type},
    },
};

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
