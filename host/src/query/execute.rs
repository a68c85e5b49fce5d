//! From SQL to a result: `prepare` checks a classified statement against the
//! caller's roles and plans it (so permission and SQL errors surface at
//! submission, and again when a worker runs the job); `execute` runs the plan,
//! streaming rows to the result CSV or, for CREATE TABLE AS and INSERT, to
//! staged lake files that the job commits with its final state.
//!
//! Every write goes through our catalog: DataFusion never creates, drops or
//! alters anything itself.

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{Int64Array, RecordBatch},
        datatypes::{DataType, Field, Schema, SchemaRef},
    },
    common::DataFusionError,
    logical_expr::{DdlStatement, DmlStatement, LogicalPlan, WriteOp},
    physical_plan::{ExecutionPlan, execute_stream},
    prelude::SessionContext,
};
use futures::StreamExt as _;

use super::{
    AccessDenied, Denial, QueryError,
    provider::SERVICE_CLIENT_COLUMN,
    result::{CsvResultWriter, ResultColumn, columns_of},
    statement::{Action, AlterChange, Classified, TableName},
    table_writer::{TableWriteError, TableWriter, delete_paths},
};
use crate::{
    auth::{Access, ServiceClientScope},
    lake::{self, Lake},
    store::{
        Store,
        catalog::{LakeDatabase, LakeTable},
        new_id,
        queries::CatalogWrite,
    },
};

/// What a statement will do once run; built by `prepare`.
pub enum Prepared {
    Read {
        plan: Arc<dyn ExecutionPlan>,
    },
    /// CREATE TABLE IF NOT EXISTS of a table that exists.
    Nothing,
    CreateTable {
        table: LakeTable,
    },
    CreateTableAs {
        database: LakeDatabase,
        table: LakeTable,
        file_schema: SchemaRef,
        plan: Arc<dyn ExecutionPlan>,
    },
    Insert {
        database: LakeDatabase,
        table: LakeTable,
        file_schema: SchemaRef,
        plan: Arc<dyn ExecutionPlan>,
    },
    Drop {
        tables: Vec<(String, String)>,
    },
    Alter {
        table_id: String,
        new_name: Option<String>,
        new_schema_json: Option<String>,
    },
}

/// Where a statement runs.
pub struct Target<'a> {
    pub store: &'a Store,
    pub org: &'a str,
    pub zone: Option<&'a str>,
    pub default_database: &'a str,
    pub access: &'a Access,
}

/// A DataFusion error as the caller sees it: a permission refusal found in
/// the scan, or the engine's own message.
pub fn engine_error(error: DataFusionError) -> QueryError {
    if let Some(denied) = AccessDenied::find(&error) {
        return QueryError::Denied(match denied {
            AccessDenied::Database { .. } => Denial::Execute,
            AccessDenied::ServiceClient { .. } => Denial::Data,
        });
    }
    QueryError::Invalid(error.strip_backtrace())
}

/// Column names a lake table may have: the spec's rule for uploaded files,
/// plus `$` for `svc$load_id`.
fn check_column_names(schema: &Schema) -> Result<(), QueryError> {
    for field in schema.fields() {
        let name = field.name();
        let allowed = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'$');
        if !allowed {
            return Err(QueryError::Invalid(format!(
                "column name '{name}' is not allowed in a lake table: use lowercase letters, \
                 digits and underscores (alias the expression)"
            )));
        }
    }
    Ok(())
}

/// The spec's rule for table names: lowercase letters, digits and underscores,
/// not starting or ending with an underscore.
pub(crate) fn check_table_name(name: &str) -> Result<(), QueryError> {
    let allowed = !name.is_empty()
        && !name.starts_with('_')
        && !name.ends_with('_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if allowed {
        Ok(())
    } else {
        Err(QueryError::Invalid(format!(
            "table name '{name}' is not allowed: use lowercase letters, digits and underscores, \
             not starting or ending with an underscore"
        )))
    }
}

/// Splits a new table's columns into the columns stored in files and the
/// `service_client_id` partition every lake row needs.
pub(crate) fn new_table_layout(schema: &Schema) -> Result<SchemaRef, QueryError> {
    // Stored with plain string types; reads use view types again.
    let schema = &super::provider::without_view_types(schema);
    check_column_names(schema)?;
    let service_client = schema.field_with_name(SERVICE_CLIENT_COLUMN).map_err(|_| {
        QueryError::Invalid(
            "a lake table needs a service_client_id column: every lake row belongs to a service client"
                .into(),
        )
    })?;
    if !service_client.data_type().is_integer() {
        return Err(QueryError::Invalid(format!(
            "service_client_id must be an integer column, not {}",
            service_client.data_type()
        )));
    }
    let file_fields: Vec<Field> = schema
        .fields()
        .iter()
        .filter(|f| f.name() != SERVICE_CLIENT_COLUMN)
        .map(|f| f.as_ref().clone())
        .collect();
    Ok(Arc::new(Schema::new(file_fields)))
}

impl Target<'_> {
    async fn database(&self, name: &TableName) -> Result<LakeDatabase, QueryError> {
        let database = name.database.as_deref().unwrap_or(self.default_database);
        self.store
            .database(self.org, self.zone, database)
            .await?
            .ok_or_else(|| QueryError::Invalid(format!("Database '{database}' does not exist")))
    }

    async fn table(
        &self,
        database: &LakeDatabase,
        name: &str,
    ) -> Result<Option<LakeTable>, QueryError> {
        Ok(self.store.table(&database.id, name).await?)
    }

    /// DROP and ALTER change a whole table: the caller must be able to read
    /// every row of it (an OwnServiceClientAnalyst cannot drop a sandbox
    /// table holding another client's rows), else the spec's data refusal.
    async fn check_reads_whole(
        &self,
        database: &LakeDatabase,
        table: &LakeTable,
    ) -> Result<(), QueryError> {
        let scope = self.access.read_scope(database.kind);
        if scope == ServiceClientScope::All {
            return Ok(());
        }
        let files = self.store.files(&table.id).await?;
        let readable = files.iter().all(|file| {
            file.file
                .service_client_id
                .and_then(|id| u32::try_from(id).ok())
                .is_some_and(|id| scope.allows(id))
        });
        match readable {
            true => Ok(()),
            false => Err(QueryError::Denied(Denial::Data)),
        }
    }
}

/// Checks `classified` against the caller's roles and plans it in `context`.
pub async fn prepare(
    context: &SessionContext,
    target: &Target<'_>,
    sql: &str,
    classified: &Classified,
    now: i64,
) -> Result<Prepared, QueryError> {
    let access = target.access;
    match &classified.action {
        Action::Read => {
            let plan = context
                .state()
                .create_logical_plan(sql)
                .await
                .map_err(engine_error)?;
            if let LogicalPlan::Explain(explain) = &plan {
                // EXPLAIN turns physical-planning errors into rows: plan the
                // inner statement first so a refused read stays refused.
                context
                    .state()
                    .create_physical_plan(&explain.plan)
                    .await
                    .map_err(engine_error)?;
            }
            let plan = context
                .state()
                .create_physical_plan(&plan)
                .await
                .map_err(engine_error)?;
            Ok(Prepared::Read { plan })
        }
        Action::CreateTable {
            table,
            as_select,
            if_not_exists,
        } => {
            let database = target.database(table).await?;
            if !access.can_create_table(database.kind) {
                return Err(QueryError::Denied(Denial::CreateTable));
            }
            check_table_name(&table.table)?;
            let existing = target.table(&database, &table.table).await?;
            let plan = context
                .state()
                .create_logical_plan(sql)
                .await
                .map_err(engine_error)?;
            let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) = plan else {
                return Err(QueryError::Internal(
                    "CREATE TABLE did not plan as a table creation".into(),
                ));
            };
            let qualified = format!("{}.{}", database.name, table.table);
            if let Some(existing) = existing {
                if *as_select {
                    let files = target.store.files(&existing.id).await?;
                    return Err(QueryError::Conflict(if files.is_empty() {
                        format!("Table '{qualified}' already exists")
                    } else {
                        format!(
                            "Target location of table '{qualified}' already holds data \
                             ({} files); drop the table first",
                            files.len()
                        )
                    }));
                }
                if *if_not_exists {
                    return Ok(Prepared::Nothing);
                }
                return Err(QueryError::Invalid(format!(
                    "Table '{qualified}' already exists"
                )));
            }
            let schema = create.input.schema().as_arrow().clone();
            let file_schema = new_table_layout(&schema)?;
            let new_table = LakeTable {
                id: new_id(),
                database_id: database.id.clone(),
                name: table.table.clone(),
                schema_json: lake::schema_to_json(&file_schema),
                partition_columns: vec![SERVICE_CLIENT_COLUMN.to_string()],
                created_at: now,
            };
            if !*as_select {
                return Ok(Prepared::CreateTable { table: new_table });
            }
            let plan = context
                .state()
                .create_physical_plan(&create.input)
                .await
                .map_err(engine_error)?;
            Ok(Prepared::CreateTableAs {
                database,
                table: new_table,
                file_schema,
                plan,
            })
        }
        Action::Insert { table } => {
            let database = target.database(table).await?;
            if !access.can_write_data(database.kind) {
                return Err(QueryError::Denied(Denial::Statement));
            }
            let Some(existing) = target.table(&database, &table.table).await? else {
                return Err(QueryError::Invalid(format!(
                    "Table '{}.{}' does not exist",
                    database.name, table.table
                )));
            };
            let plan = context
                .state()
                .create_logical_plan(sql)
                .await
                .map_err(engine_error)?;
            let LogicalPlan::Dml(DmlStatement {
                op: WriteOp::Insert(_),
                input,
                ..
            }) = plan
            else {
                return Err(QueryError::Internal(
                    "INSERT did not plan as an insert".into(),
                ));
            };
            let plan = context
                .state()
                .create_physical_plan(&input)
                .await
                .map_err(engine_error)?;
            let file_schema = lake::schema_from_json(&existing.schema_json)
                .map_err(|e| QueryError::Internal(e.to_string()))?;
            Ok(Prepared::Insert {
                database,
                table: existing,
                file_schema,
                plan,
            })
        }
        Action::DropTables { tables, if_exists } => {
            let mut dropped = Vec::new();
            for table in tables {
                let database = target.database(table).await?;
                if !access.can_drop_or_alter(database.kind) {
                    return Err(QueryError::Denied(Denial::Statement));
                }
                let Some(existing) = target.table(&database, &table.table).await? else {
                    if *if_exists {
                        continue;
                    }
                    return Err(QueryError::Invalid(format!(
                        "Table '{}.{}' does not exist",
                        database.name, table.table
                    )));
                };
                target.check_reads_whole(&database, &existing).await?;
                dropped.push((database.id.clone(), table.table.clone()));
            }
            Ok(Prepared::Drop { tables: dropped })
        }
        Action::AlterTable { table, change } => {
            let database = target.database(table).await?;
            if !access.can_drop_or_alter(database.kind) {
                return Err(QueryError::Denied(Denial::Statement));
            }
            let Some(existing) = target.table(&database, &table.table).await? else {
                return Err(QueryError::Invalid(format!(
                    "Table '{}.{}' does not exist",
                    database.name, table.table
                )));
            };
            target.check_reads_whole(&database, &existing).await?;
            match change {
                AlterChange::RenameTo(new) => {
                    if new.database.as_ref().is_some_and(|d| *d != database.name) {
                        return Err(QueryError::Invalid(
                            "ALTER TABLE ... RENAME TO cannot move a table to another database"
                                .into(),
                        ));
                    }
                    check_table_name(&new.table)?;
                    if target.table(&database, &new.table).await?.is_some() {
                        return Err(QueryError::Invalid(format!(
                            "Table '{}.{}' already exists",
                            database.name, new.table
                        )));
                    }
                    Ok(Prepared::Alter {
                        table_id: existing.id,
                        new_name: Some(new.table.clone()),
                        new_schema_json: None,
                    })
                }
                AlterChange::AddColumn(definition) => {
                    let added = column_from_definition(context, definition).await?;
                    let schema = lake::schema_from_json(&existing.schema_json)
                        .map_err(|e| QueryError::Internal(e.to_string()))?;
                    let taken = schema.field_with_name(added.name()).is_ok()
                        || existing.partition_columns.contains(added.name());
                    if taken {
                        return Err(QueryError::Invalid(format!(
                            "column '{}' already exists",
                            added.name()
                        )));
                    }
                    // Files written before the change read the new column as NULL.
                    let added = added.with_nullable(true);
                    let mut fields: Vec<Field> =
                        schema.fields().iter().map(|f| f.as_ref().clone()).collect();
                    fields.push(added);
                    let new_schema = Schema::new(fields);
                    check_column_names(&new_schema)?;
                    Ok(Prepared::Alter {
                        table_id: existing.id,
                        new_name: None,
                        new_schema_json: Some(lake::schema_to_json(&new_schema)),
                    })
                }
                AlterChange::Unsupported(_) => Err(QueryError::Invalid(
                    "ALTER TABLE supports RENAME TO <table> and ADD COLUMN <column> <type>".into(),
                )),
            }
        }
    }
}

/// The Arrow field of a SQL column definition, typed by DataFusion's planner.
async fn column_from_definition(
    context: &SessionContext,
    definition: &str,
) -> Result<Field, QueryError> {
    let plan = context
        .state()
        .create_logical_plan(&format!("CREATE TABLE column_probe ({definition})"))
        .await
        .map_err(engine_error)?;
    match plan {
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) => {
            let schema = create.input.schema().as_arrow().clone();
            schema
                .fields()
                .first()
                .map(|f| f.as_ref().clone())
                .ok_or_else(|| QueryError::Invalid("ADD COLUMN needs a column".into()))
        }
        _ => Err(QueryError::Internal(
            "column definition did not plan".into(),
        )),
    }
}

/// What running a statement produced.
pub struct Execution {
    pub columns: Vec<ResultColumn>,
    pub rows: u64,
    pub bytes: u64,
    /// The whole result CSV when it is small (the writer kept a copy).
    pub small_result: Option<bytes::Bytes>,
    pub write: CatalogWrite,
    /// Lake files written for `write`: deleted again unless it is committed.
    pub staged: Vec<String>,
}

/// Runs a prepared statement; its result goes to `result_path` as CSV.
pub async fn execute(
    context: &SessionContext,
    prepared: Prepared,
    lake: &Lake,
    access: &Access,
    query_id: &str,
    result_path: &str,
) -> Result<Execution, QueryError> {
    let store = lake.object_store();
    match prepared {
        Prepared::Read { plan } => {
            let schema = plan.schema();
            let mut writer = CsvResultWriter::create(store, result_path, &schema)
                .await
                .map_err(|e| QueryError::Internal(format!("result file: {e}")))?;
            let mut stream = execute_stream(plan, context.task_ctx()).map_err(run_error)?;
            while let Some(batch) = stream.next().await {
                let written = match batch {
                    Ok(batch) => writer
                        .write(&batch)
                        .await
                        .map_err(|e| QueryError::Internal(format!("result file: {e}"))),
                    Err(e) => Err(run_error(e)),
                };
                if let Err(e) = written {
                    writer.abort().await;
                    return Err(e);
                }
            }
            let written = writer
                .finish()
                .await
                .map_err(|e| QueryError::Internal(format!("result file: {e}")))?;
            Ok(Execution {
                columns: columns_of(&schema),
                rows: written.rows,
                bytes: written.bytes,
                small_result: written.small,
                write: CatalogWrite::None,
                staged: Vec::new(),
            })
        }
        Prepared::Nothing => empty_result(lake, result_path, CatalogWrite::None).await,
        Prepared::CreateTable { table } => {
            empty_result(lake, result_path, CatalogWrite::CreateTable { table }).await
        }
        Prepared::Drop { tables } => {
            empty_result(lake, result_path, CatalogWrite::DropTables { tables }).await
        }
        Prepared::Alter {
            table_id,
            new_name,
            new_schema_json,
        } => {
            let write = CatalogWrite::AlterTable {
                table_id,
                new_name,
                new_schema_json,
            };
            empty_result(lake, result_path, write).await
        }
        Prepared::CreateTableAs {
            database,
            table,
            file_schema,
            plan,
        } => {
            let writer = TableWriter::new(
                store,
                &database.name,
                &table.name,
                file_schema,
                table.partition_columns.clone(),
                query_id,
                access.read_scope(database.kind),
            );
            let (files, rows) = write_rows(context, plan, writer).await?;
            let staged = files.iter().map(|f| f.path.clone()).collect();
            let write = CatalogWrite::CreateTableWithFiles { table, files };
            count_result(lake, result_path, rows, write, staged).await
        }
        Prepared::Insert {
            database,
            table,
            file_schema,
            plan,
        } => {
            let writer = TableWriter::new(
                store,
                &database.name,
                &table.name,
                file_schema,
                table.partition_columns.clone(),
                query_id,
                access.read_scope(database.kind),
            );
            let (files, rows) = write_rows(context, plan, writer).await?;
            let staged = files.iter().map(|f| f.path.clone()).collect();
            let write = CatalogWrite::Append {
                table_id: table.id,
                files,
            };
            count_result(lake, result_path, rows, write, staged).await
        }
    }
}

/// A failure while running: permission refusals keep their friendly message,
/// memory exhaustion says so, anything else is the engine's message.
fn run_error(error: DataFusionError) -> QueryError {
    match engine_error(error) {
        QueryError::Invalid(message) => QueryError::Failed(message),
        other => other,
    }
}

fn write_error(error: TableWriteError) -> QueryError {
    match error {
        TableWriteError::Denied(_) | TableWriteError::MissingServiceClient => {
            QueryError::Denied(Denial::Data)
        }
        other => QueryError::Failed(other.to_string()),
    }
}

pub(crate) async fn write_rows(
    context: &SessionContext,
    plan: Arc<dyn ExecutionPlan>,
    mut writer: TableWriter,
) -> Result<(Vec<crate::store::catalog::NewDataFile>, u64), QueryError> {
    let mut rows = 0u64;
    let mut stream = match execute_stream(plan, context.task_ctx()) {
        Ok(stream) => stream,
        Err(e) => {
            writer.abort().await;
            return Err(run_error(e));
        }
    };
    while let Some(batch) = stream.next().await {
        let written = match batch {
            Ok(batch) => {
                rows += batch.num_rows() as u64;
                writer.write(&batch).await.map_err(write_error)
            }
            Err(e) => Err(run_error(e)),
        };
        if let Err(e) = written {
            writer.abort().await;
            return Err(e);
        }
    }
    let files = writer.finish().await.map_err(write_error)?;
    Ok((files, rows))
}

/// The result of a statement that returns no rows: an empty CSV.
async fn empty_result(
    lake: &Lake,
    result_path: &str,
    write: CatalogWrite,
) -> Result<Execution, QueryError> {
    let schema = Schema::empty();
    let writer = CsvResultWriter::create(lake.object_store(), result_path, &schema)
        .await
        .map_err(|e| QueryError::Internal(format!("result file: {e}")))?;
    let written = writer
        .finish()
        .await
        .map_err(|e| QueryError::Internal(format!("result file: {e}")))?;
    Ok(Execution {
        columns: Vec::new(),
        rows: written.rows,
        bytes: written.bytes,
        small_result: written.small,
        write,
        staged: Vec::new(),
    })
}

/// The result of a write: one row, the number of rows written.
async fn count_result(
    lake: &Lake,
    result_path: &str,
    rows: u64,
    write: CatalogWrite,
    staged: Vec<String>,
) -> Result<Execution, QueryError> {
    let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new(
        "rows",
        DataType::Int64,
        false,
    )]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(vec![rows as i64]))],
    )
    .map_err(|e| QueryError::Internal(e.to_string()))?;
    let outcome = async {
        let mut writer = CsvResultWriter::create(lake.object_store(), result_path, &schema).await?;
        writer.write(&batch).await?;
        writer.finish().await
    }
    .await;
    match outcome {
        Ok(written) => Ok(Execution {
            columns: columns_of(&schema),
            rows: written.rows,
            bytes: written.bytes,
            small_result: written.small,
            write,
            staged,
        }),
        Err(e) => {
            delete_paths(lake.object_store().as_ref(), &staged).await;
            Err(QueryError::Internal(format!("result file: {e}")))
        }
    }
}
