//! From SQL to a plan: `prepare` checks a classified statement against the
//! caller's roles and plans it on the engine, so permission and SQL errors
//! surface at submission, and again when a worker runs the job. New tables
//! take their layout from `engine::layout`.
//!
//! Every write goes through our catalog: DataFusion never creates, drops or
//! alters anything itself. Statements that could reach files or settings
//! never get here: `engine::statement::classify` refuses them first.

use std::sync::Arc;

use datafusion::{
    common::DataFusionError,
    logical_expr::{CreateMemoryTable, DdlStatement, DmlStatement, LogicalPlan, WriteOp},
    physical_plan::ExecutionPlan,
    prelude::SessionContext,
};

use super::{Denial, QueryError};
use crate::{
    auth::{Access, ServiceClientScope},
    engine::{
        EngineError,
        layout::{TableLayout, check_table_name},
        plan_read,
        session::{CATALOG, api_database, foreign_catalog_message},
        snapshot::read_snapshot,
        statement::{Action, Classified, TableName},
    },
    store::{
        Store,
        catalog::{LakeDatabase, LakeTable},
        database_kind::DatabaseKind,
    },
};

mod alter;
mod views;

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

/// The answer to a write naming a table its database does not hold.
fn no_such_table(database: &LakeDatabase, table: &str) -> QueryError {
    QueryError::Invalid(format!("Table '{}.{table}' does not exist", database.name))
}

/// A capability of `auth::Access` over one kind of database.
type Capability = fn(&Access, DatabaseKind) -> bool;

impl Target<'_> {
    async fn database(&self, name: &TableName) -> Result<LakeDatabase, QueryError> {
        // A three-part name's catalog: `lakehost` or the connection's database.
        if let Some(catalog) = &name.catalog {
            let own = api_database(self.org, self.zone);
            if *catalog != CATALOG && *catalog != own {
                return Err(QueryError::Invalid(foreign_catalog_message(catalog, &own)));
            }
        }
        let database = name.database.as_deref().unwrap_or(self.default_database);
        self.store
            .database(self.org, self.zone, database)
            .await?
            .ok_or_else(|| QueryError::Invalid(format!("Database '{database}' does not exist")))
    }

    /// The database a write names, once the caller's roles allow `may` there
    /// (else `denial`): the permission is decided before the table is looked
    /// up, so a caller without the right learns nothing of its tables.
    async fn database_allowing(
        &self,
        name: &TableName,
        may: Capability,
        denial: Denial,
    ) -> Result<LakeDatabase, QueryError> {
        let database = self.database(name).await?;
        match may(self.access, database.kind) {
            true => Ok(database),
            false => Err(QueryError::Denied(denial)),
        }
    }

    async fn table(
        &self,
        database: &LakeDatabase,
        name: &str,
    ) -> Result<Option<LakeTable>, QueryError> {
        Ok(self.store.table(&database.id, name).await?)
    }

    /// The table a write changes, which must exist.
    async fn existing_table(
        &self,
        database: &LakeDatabase,
        name: &str,
    ) -> Result<LakeTable, QueryError> {
        self.table(database, name)
            .await?
            .ok_or_else(|| no_such_table(database, name))
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
    match &classified.action {
        Action::Read => plan_checked_read(context, sql).await,
        Action::CreateTable {
            table,
            as_select,
            if_not_exists,
        } => {
            let form = CreateForm {
                as_select: *as_select,
                if_not_exists: *if_not_exists,
            };
            prepare_create_table(context, target, sql, table, form, now).await
        }
        Action::Insert { table } => prepare_insert(context, target, sql, table).await,
        Action::DropTables { tables, if_exists } => {
            prepare_drop_tables(target, tables, *if_exists).await
        }
        Action::AlterTable { table, change } => {
            alter::prepare_alter_table(context, target, table, change).await
        }
        Action::CreateView {
            view,
            query,
            or_replace,
            if_not_exists,
        } => {
            let form = views::ViewForm {
                or_replace: *or_replace,
                if_not_exists: *if_not_exists,
            };
            views::prepare_create_view(context, target, (view, query), form, now).await
        }
        Action::DropViews { views, if_exists } => {
            views::prepare_drop_views(target, views, *if_exists).await
        }
    }
}

/// A read, planned down to its physical plan: the session's table providers
/// decide the caller's access while it is planned, so a refused read fails
/// here rather than when it runs.
async fn plan_checked_read(context: &SessionContext, sql: &str) -> Result<Prepared, QueryError> {
    // One copy of the session's state for both plans (a copy clones every
    // function registry).
    let state = context.state();
    let plan = state.create_logical_plan(sql).await.map_err(plan_error)?;
    Ok(Prepared::Read {
        snapshot: read_snapshot(&plan),
        plan: plan_read(&state, &plan).await?,
    })
}

/// The CREATE TABLE forms that change what an existing table means.
#[derive(Debug, Clone, Copy)]
struct CreateForm {
    as_select: bool,
    if_not_exists: bool,
}

/// CREATE TABLE [AS]: the caller may create tables in the database, the
/// name is allowed, the statement plans; then either the existing table
/// decides (`when_table_exists`) or a new catalog entry is made, with the
/// plan of its rows for CREATE TABLE AS.
async fn prepare_create_table(
    context: &SessionContext,
    target: &Target<'_>,
    sql: &str,
    table: &TableName,
    form: CreateForm,
    now: i64,
) -> Result<Prepared, QueryError> {
    let database = target
        .database_allowing(table, Access::can_create_table, Denial::CreateTable)
        .await?;
    check_table_name(&table.table)?;
    let existing = target.table(&database, &table.table).await?;
    // Planned before an existing table is answered: a statement that cannot
    // plan says so whether or not its table exists.
    let create = plan_table_creation(context, sql).await?;
    if let Some(existing) = existing {
        return when_table_exists(target, &database, &existing, &table.table, form).await;
    }
    if target
        .store
        .view(&database.id, &table.table)
        .await?
        .is_some()
    {
        return Err(QueryError::Invalid(format!(
            "View '{}.{}' already exists (drop it first)",
            database.name, table.table
        )));
    }
    let schema = create.input.schema().as_arrow().clone();
    let layout = TableLayout::for_rows(&schema)?;
    let new_table = layout.catalog_entry(&database.id, &table.table, now);
    if !form.as_select {
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

/// The logical plan of a CREATE TABLE statement (its rows' plan for AS, its
/// columns otherwise).
async fn plan_table_creation(
    context: &SessionContext,
    sql: &str,
) -> Result<CreateMemoryTable, QueryError> {
    let plan = context
        .state()
        .create_logical_plan(sql)
        .await
        .map_err(plan_error)?;
    match plan {
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) => Ok(create),
        _ => Err(QueryError::unexpected(
            "CREATE TABLE did not plan as a table creation",
        )),
    }
}

/// CREATE TABLE of a table that exists: CREATE TABLE AS is a conflict (that
/// names the files when the table holds data), IF NOT EXISTS does nothing,
/// and a plain CREATE TABLE is invalid.
async fn when_table_exists(
    target: &Target<'_>,
    database: &LakeDatabase,
    existing: &LakeTable,
    name: &str,
    form: CreateForm,
) -> Result<Prepared, QueryError> {
    let qualified = format!("{}.{name}", database.name);
    if form.as_select {
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
    if form.if_not_exists {
        return Ok(Prepared::Nothing);
    }
    Err(QueryError::Invalid(format!(
        "Table '{qualified}' already exists"
    )))
}

/// INSERT: the caller may write data in the database, the table exists, and
/// its rows plan; they are written in the table's own layout.
async fn prepare_insert(
    context: &SessionContext,
    target: &Target<'_>,
    sql: &str,
    table: &TableName,
) -> Result<Prepared, QueryError> {
    let database = target
        .database_allowing(table, Access::can_write_data, Denial::Statement)
        .await?;
    let existing = target.existing_table(&database, &table.table).await?;
    let plan = plan_inserted_rows(context, sql).await?;
    let layout = TableLayout::of(&existing).map_err(|e| QueryError::internal("", e))?;
    Ok(Prepared::Insert {
        database,
        table: existing,
        layout,
        plan,
    })
}

/// The physical plan of the rows an INSERT statement adds.
async fn plan_inserted_rows(
    context: &SessionContext,
    sql: &str,
) -> Result<Arc<dyn ExecutionPlan>, QueryError> {
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
        return Err(QueryError::unexpected("INSERT did not plan as an insert"));
    };
    context
        .state()
        .create_physical_plan(&input)
        .await
        .map_err(plan_error)
}

/// DROP TABLE, table by table in the statement's order: the caller may drop
/// in its database, the table exists (or IF EXISTS skips it) and the caller
/// reads every row of it. The first refusal refuses the whole statement.
async fn prepare_drop_tables(
    target: &Target<'_>,
    tables: &[TableName],
    if_exists: bool,
) -> Result<Prepared, QueryError> {
    let mut dropped = Vec::new();
    for table in tables {
        let database = target
            .database_allowing(table, Access::can_drop_or_alter, Denial::Statement)
            .await?;
        let Some(existing) = target.table(&database, &table.table).await? else {
            if if_exists {
                continue;
            }
            return Err(no_such_table(&database, &table.table));
        };
        target.check_reads_whole(&database, &existing).await?;
        dropped.push((database.id.clone(), table.table.clone()));
    }
    Ok(Prepared::Drop { tables: dropped })
}

#[cfg(test)]
mod tests;
