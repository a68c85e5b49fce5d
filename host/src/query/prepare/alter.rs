//! ALTER TABLE's steps: the permission and the table (as DROP has them),
//! then the change: a rename within the table's database, or a nullable
//! column typed by the engine's planner. ALTER TABLE of a view renames it
//! (`views::rename_view`).

use datafusion::{
    arrow::datatypes::{Field, Schema},
    logical_expr::{DdlStatement, LogicalPlan},
    prelude::SessionContext,
};

use super::{Denial, Prepared, QueryError, Target, plan_error, views};
use crate::{
    auth::Access,
    engine::{
        layout::{check_column_names, check_table_name},
        statement::{AlterChange, TableName},
    },
    lake,
    store::catalog::{LakeDatabase, LakeTable},
};

/// ALTER TABLE: the caller may alter in the database, the table exists and
/// the caller reads every row of it; then the change itself is checked (an
/// unsupported form is refused only after the permission).
pub(super) async fn prepare_alter_table(
    context: &SessionContext,
    target: &Target<'_>,
    table: &TableName,
    change: &AlterChange,
) -> Result<Prepared, QueryError> {
    let database = target
        .database_allowing(table, Access::can_drop_or_alter, Denial::Statement)
        .await?;
    if target.table(&database, &table.table).await?.is_none()
        && let Some(view) = target.store.view(&database.id, &table.table).await?
    {
        let new = match change {
            AlterChange::RenameTo(new) => Some(new),
            _ => None,
        };
        return views::rename_view(target, &database, view, new).await;
    }
    let existing = target.existing_table(&database, &table.table).await?;
    target.check_reads_whole(&database, &existing).await?;
    match change {
        AlterChange::RenameTo(new) => rename_table(target, &database, existing, new).await,
        AlterChange::AddColumn(definition) => add_column(context, existing, definition).await,
        AlterChange::Unsupported(_) => Err(QueryError::Invalid(
            "ALTER TABLE supports RENAME TO <table> and ADD COLUMN <column> <type>".into(),
        )),
    }
}

/// RENAME TO: within the same database, to an allowed name no table or
/// view has.
async fn rename_table(
    target: &Target<'_>,
    database: &LakeDatabase,
    existing: LakeTable,
    new: &TableName,
) -> Result<Prepared, QueryError> {
    if new.database.as_ref().is_some_and(|d| *d != database.name) {
        return Err(QueryError::Invalid(
            "ALTER TABLE ... RENAME TO cannot move a table to another database".into(),
        ));
    }
    check_table_name(&new.table)?;
    if views::name_taken(target, database, &new.table).await? {
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

/// ADD COLUMN: a new, allowed column name, added as nullable (files written
/// before the change read it as NULL) after the table's columns.
async fn add_column(
    context: &SessionContext,
    existing: LakeTable,
    definition: &str,
) -> Result<Prepared, QueryError> {
    let added = column_from_definition(context, definition).await?;
    let schema =
        lake::schema_from_json(&existing.schema_json).map_err(|e| QueryError::internal("", e))?;
    let taken = schema.field_with_name(added.name()).is_ok()
        || existing.partition_columns.contains(added.name());
    if taken {
        return Err(QueryError::Invalid(format!(
            "column '{}' already exists",
            added.name()
        )));
    }
    let added = added.with_nullable(true);
    check_column_names(&Schema::new(vec![added.clone()]))?;
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(added);
    let new_schema = Schema::new(fields);
    Ok(Prepared::Alter {
        table_id: existing.id,
        new_name: None,
        new_schema_json: Some(lake::schema_to_json(&new_schema)),
    })
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
        _ => Err(QueryError::unexpected("column definition did not plan")),
    }
}
