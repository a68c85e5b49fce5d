//! Catalog metadata for Flight SQL clients (`GetCatalogs`, `GetDbSchemas`,
//! `GetTables`, `GetTableTypes`, `GetSqlInfo`): what a caller may list is
//! what it may read. A database is listed when the caller's roles can read
//! it (`Access::can_read_database`, the rule `scan()` applies before
//! refusing with the spec's text), and with it all its tables; the builders
//! of `arrow-flight` apply the client's name patterns.

use std::sync::{Arc, LazyLock};

use arrow_flight::sql::{
    CommandGetDbSchemas, CommandGetTables, SqlInfo,
    metadata::{GetCatalogsBuilder, SqlInfoData, SqlInfoDataBuilder},
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

/// The databases `caller` may read, with their tables.
async fn visible(state: &FlightState, caller: &LakeCaller) -> Result<VisibleCatalog, Status> {
    state
        .queries
        .visible_catalog(caller)
        .await
        .map_err(super::status::status_of)
}

fn build_error(e: impl std::fmt::Display) -> Status {
    super::status::status_of(crate::query::QueryError::Internal(e.to_string()))
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
