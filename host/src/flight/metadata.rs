//! Catalog metadata for Flight SQL clients (`GetCatalogs`, `GetDbSchemas`,
//! `GetTables`, `GetTableTypes`, `GetSqlInfo`, `GetXdbcTypeInfo`): what a
//! caller may list is
//! what it may read. A database is listed when the caller's roles can read
//! it (`Access::can_read_database`, the rule `scan()` applies before
//! refusing with the spec's text), and with it all its tables; the builders
//! of `arrow-flight` apply the client's name patterns.

use std::sync::{Arc, LazyLock};

use arrow_flight::sql::{
    CommandGetDbSchemas, CommandGetTables, CommandGetXdbcTypeInfo, Nullable, Searchable, SqlInfo,
    XdbcDataType, XdbcDatetimeSubcode,
    metadata::{
        GetCatalogsBuilder, SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData,
        XdbcTypeInfoDataBuilder,
    },
};
use datafusion::arrow::{
    array::RecordBatch,
    datatypes::{Field, Schema},
};
use tonic::Status;

use super::FlightState;
use crate::{
    auth::LakeCaller,
    engine::session::CATALOG,
    query::service::{VisibleCatalog, columns_of},
};

/// The one table type the lake has.
pub const TABLE_TYPE: &str = "TABLE";

/// What `GetSqlInfo` answers: the server and what it supports.
pub static SQL_INFO: LazyLock<SqlInfoData> = LazyLock::new(|| {
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "lakehost");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    info.append(SqlInfo::FlightSqlServerArrowVersion, "59");
    info.append(SqlInfo::FlightSqlServerReadOnly, false);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    info.append(SqlInfo::FlightSqlServerTransaction, 0i32);
    info.append(SqlInfo::FlightSqlServerCancel, true);
    info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    info.build().expect("the server's SQL info is well formed")
});

/// One SQL type of the engine, as `GetXdbcTypeInfo` describes it.
struct EngineType {
    name: &'static str,
    data_type: XdbcDataType,
    /// Digits (numbers), characters or bytes; `None` when unbounded.
    column_size: Option<i32>,
    /// How a literal of the type is written: its prefix and suffix.
    literal: Option<(&'static str, &'static str)>,
    /// Base of `column_size` for numbers (2 or 10).
    radix: Option<i32>,
    /// The datetime type `sql_data_type` names with its subcode.
    datetime: Option<XdbcDatetimeSubcode>,
}

/// The types statements can write and results hold: what DataFusion's SQL
/// planner accepts by these names (`CAST(x AS <name>)`).
const ENGINE_TYPES: [EngineType; 12] = {
    const fn number(
        name: &'static str,
        data_type: XdbcDataType,
        size: i32,
        radix: i32,
    ) -> EngineType {
        EngineType {
            name,
            data_type,
            column_size: Some(size),
            literal: None,
            radix: Some(radix),
            datetime: None,
        }
    }
    const fn quoted(
        name: &'static str,
        data_type: XdbcDataType,
        column_size: Option<i32>,
        prefix: &'static str,
        datetime: Option<XdbcDatetimeSubcode>,
    ) -> EngineType {
        EngineType {
            name,
            data_type,
            column_size,
            literal: Some((prefix, "'")),
            radix: None,
            datetime,
        }
    }
    [
        EngineType {
            name: "BOOLEAN",
            data_type: XdbcDataType::XdbcBit,
            column_size: Some(1),
            literal: None,
            radix: None,
            datetime: None,
        },
        number("TINYINT", XdbcDataType::XdbcTinyint, 3, 10),
        number("SMALLINT", XdbcDataType::XdbcSmallint, 5, 10),
        number("INTEGER", XdbcDataType::XdbcInteger, 10, 10),
        number("BIGINT", XdbcDataType::XdbcBigint, 19, 10),
        number("REAL", XdbcDataType::XdbcReal, 24, 2),
        number("DOUBLE", XdbcDataType::XdbcDouble, 53, 2),
        number("DECIMAL", XdbcDataType::XdbcDecimal, 38, 10),
        quoted("VARCHAR", XdbcDataType::XdbcVarchar, None, "'", None),
        quoted("BYTEA", XdbcDataType::XdbcVarbinary, None, "X'", None),
        quoted(
            "DATE",
            XdbcDataType::XdbcDate,
            Some(10),
            "DATE '",
            // Subcode 1: the protocol's DATE, an alias of YEAR (the one
            // name prost keeps).
            Some(XdbcDatetimeSubcode::XdbcSubcodeYear),
        ),
        quoted(
            "TIMESTAMP",
            XdbcDataType::XdbcTimestamp,
            Some(29),
            "TIMESTAMP '",
            Some(XdbcDatetimeSubcode::XdbcSubcodeTimestamp),
        ),
    ]
};

/// What `GetXdbcTypeInfo` answers: the engine's types.
pub static XDBC_TYPE_INFO: LazyLock<XdbcTypeInfoData> = LazyLock::new(|| {
    let mut builder = XdbcTypeInfoDataBuilder::new();
    for engine_type in &ENGINE_TYPES {
        let is_decimal = engine_type.data_type == XdbcDataType::XdbcDecimal;
        let is_text = engine_type.data_type == XdbcDataType::XdbcVarchar;
        builder.append(XdbcTypeInfo {
            type_name: engine_type.name.to_string(),
            data_type: engine_type.data_type,
            column_size: engine_type.column_size,
            literal_prefix: engine_type.literal.map(|(prefix, _)| prefix.to_string()),
            literal_suffix: engine_type.literal.map(|(_, suffix)| suffix.to_string()),
            create_params: is_decimal.then(|| vec!["precision".to_string(), "scale".to_string()]),
            nullable: Nullable::NullabilityNullable,
            case_sensitive: is_text,
            searchable: if is_text {
                Searchable::Full
            } else {
                Searchable::Basic
            },
            unsigned_attribute: engine_type.radix.map(|_| false),
            fixed_prec_scale: false,
            auto_increment: Some(false),
            local_type_name: Some(engine_type.name.to_string()),
            minimum_scale: is_decimal.then_some(0),
            maximum_scale: is_decimal.then_some(38),
            sql_data_type: if engine_type.datetime.is_some() {
                XdbcDataType::XdbcDatetime
            } else {
                engine_type.data_type
            },
            datetime_subcode: engine_type.datetime,
            num_prec_radix: engine_type.radix,
            interval_precision: None,
        });
    }
    builder
        .build()
        .expect("the engine's type info is well formed")
});

/// `GetXdbcTypeInfo`: the engine's types, or the one asked for.
pub fn xdbc_type_info(command: CommandGetXdbcTypeInfo) -> Result<RecordBatch, Status> {
    command
        .into_builder(&XDBC_TYPE_INFO)
        .build()
        .map_err(build_error)
}

/// The databases `caller` may read, with their tables.
async fn visible(state: &FlightState, caller: &LakeCaller) -> Result<VisibleCatalog, Status> {
    state
        .queries
        .visible_catalog(caller)
        .await
        .map_err(super::status::status_of)
}

fn build_error(e: impl std::error::Error + Send + Sync + 'static) -> Status {
    super::status::status_of(crate::query::QueryError::internal("", e))
}

/// `GetCatalogs`: the one catalog every session has.
pub fn catalogs() -> Result<RecordBatch, Status> {
    let mut builder = GetCatalogsBuilder::new();
    builder.append(CATALOG);
    builder.build().map_err(build_error)
}

/// `GetDbSchemas`: the databases the caller may read.
pub async fn db_schemas(
    state: &FlightState,
    caller: &LakeCaller,
    command: CommandGetDbSchemas,
) -> Result<RecordBatch, Status> {
    let visible = visible(state, caller).await?;
    let mut builder = command.into_builder();
    for database in &visible.databases {
        builder.append(CATALOG, &database.name);
    }
    builder.build().map_err(build_error)
}

/// `GetTables`: the tables of the databases the caller may read.
pub async fn tables(
    state: &FlightState,
    caller: &LakeCaller,
    command: CommandGetTables,
) -> Result<RecordBatch, Status> {
    let visible = visible(state, caller).await?;
    let mut builder = command.into_builder();
    for table in &visible.tables {
        let Some(database) = visible.database_of(table) else {
            continue;
        };
        let schema = if builder.include_schema() {
            columns_of(table).map_err(super::status::status_of)?
        } else {
            Schema::empty()
        };
        builder
            .append(CATALOG, &database.name, &table.name, TABLE_TYPE, &schema)
            .map_err(build_error)?;
    }
    builder.build().map_err(build_error)
}

/// `GetTableTypes`: one row, `TABLE`.
pub fn table_types() -> Result<RecordBatch, Status> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "table_type",
        datafusion::arrow::datatypes::DataType::Utf8,
        false,
    )]));
    RecordBatch::try_new(
        schema,
        vec![Arc::new(datafusion::arrow::array::StringArray::from(vec![
            TABLE_TYPE,
        ]))],
    )
    .map_err(build_error)
}
