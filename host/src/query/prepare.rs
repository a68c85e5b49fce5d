//! From SQL to a plan: `prepare` checks a classified statement against the
//! caller's roles and plans it on the engine, so permission and SQL errors
//! surface at submission, and again when a worker runs the job. New tables
//! take their layout from `engine::layout`.
//!
//! Every write goes through our catalog: DataFusion never creates, drops or
//! alters anything itself.

use std::sync::Arc;

use datafusion::{
    arrow::datatypes::{Field, Schema},
    common::DataFusionError,
    logical_expr::{DdlStatement, DmlStatement, LogicalPlan, WriteOp},
    physical_plan::ExecutionPlan,
    prelude::SessionContext,
};

use super::{Denial, QueryError};
use crate::{
    auth::{Access, ServiceClientScope},
    engine::{
        EngineError,
        layout::{TableLayout, check_column_names, check_table_name},
        plan_read,
        snapshot::read_snapshot,
        statement::{Action, AlterChange, Classified, TableName},
    },
    lake,
    store::{
        Store,
        catalog::{LakeDatabase, LakeTable},
    },
};

/// What a statement will do once run; built by `prepare`.
pub enum Prepared {
    Read {
        plan: Arc<dyn ExecutionPlan>,
        /// What the result depends on in the lake (`engine::snapshot`);
        /// `None` when it may change without the lake changing.
        snapshot: Option<String>,
    },
    /// CREATE TABLE IF NOT EXISTS of a table that exists.
    Nothing,
    CreateTable {
        table: LakeTable,
    },
    CreateTableAs {
        database: LakeDatabase,
        table: LakeTable,
        layout: TableLayout,
        plan: Arc<dyn ExecutionPlan>,
    },
    Insert {
        database: LakeDatabase,
        table: LakeTable,
        layout: TableLayout,
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

/// A planning error as the caller sees it: a refusal found in a scan, or
/// the engine's own message.
fn plan_error(error: DataFusionError) -> QueryError {
    EngineError::plan(error).into()
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
            // One copy of the session's state for both plans (a copy
            // clones every function registry).
            let state = context.state();
            let plan = state.create_logical_plan(sql).await.map_err(plan_error)?;
            Ok(Prepared::Read {
                snapshot: read_snapshot(&plan),
                plan: plan_read(&state, &plan).await?,
            })
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
                .map_err(plan_error)?;
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
            let layout = TableLayout::for_rows(&schema)?;
            let new_table = layout.catalog_entry(&database.id, &table.table, now);
            if !*as_select {
                return Ok(Prepared::CreateTable { table: new_table });
            }
            let plan = context
                .state()
                .create_physical_plan(&create.input)
                .await
                .map_err(plan_error)?;
            Ok(Prepared::CreateTableAs {
                database,
                table: new_table,
                layout,
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
                .map_err(plan_error)?;
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
                .map_err(plan_error)?;
            let layout =
                TableLayout::of(&existing).map_err(|e| QueryError::Internal(e.to_string()))?;
            Ok(Prepared::Insert {
                database,
                table: existing,
                layout,
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
                    check_column_names(&Schema::new(vec![added.clone()]))?;
                    let mut fields: Vec<Field> =
                        schema.fields().iter().map(|f| f.as_ref().clone()).collect();
                    fields.push(added);
                    let new_schema = Schema::new(fields);
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
        .map_err(plan_error)?;
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
