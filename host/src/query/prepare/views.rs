//! CREATE VIEW, DROP VIEW and the rename of a view (dbt renames views with
//! ALTER TABLE ... RENAME TO). Views are made and dropped where the caller
//! may create tables (`Access::can_create_table`, CREATE TABLE's rule); a
//! view's SELECT must plan for its creator, access decision included, and
//! is planned again as each reader when read (`engine::session`), so a view
//! never widens access. Views share their database's names with its tables.
//!
//! A view's change travels as a catalog entry (`LakeView::as_catalog_entry`)
//! in the `Prepared` forms tables use, and commits with its job.

use datafusion::{
    common::tree_node::TreeNodeRecursion, logical_expr::LogicalPlan, prelude::SessionContext,
};

use super::{Denial, Prepared, QueryError, Target, plan_error};
use crate::{
    auth::Access,
    engine::{
        layout::{check_table_name, without_view_types},
        plan_read,
        session::CATALOG,
        statement::TableName,
    },
    lake,
    store::catalog::{LakeDatabase, views::LakeView},
};

/// What CREATE VIEW asked for besides its name and SELECT.
#[derive(Debug, Clone, Copy)]
pub(super) struct ViewForm {
    pub or_replace: bool,
    pub if_not_exists: bool,
}

/// Whether `name` is taken in `database` by a table or a view.
pub(super) async fn name_taken(
    target: &Target<'_>,
    database: &LakeDatabase,
    name: &str,
) -> Result<bool, QueryError> {
    Ok(target.table(database, name).await?.is_some()
        || target.store.view(&database.id, name).await?.is_some())
}

/// CREATE [OR REPLACE] VIEW: the caller may create tables in the database,
/// the name is allowed and no table's, the SELECT plans for the caller (a
/// SELECT of rows the caller may not read is refused as the read would be)
/// and does not read the view itself.
pub(super) async fn prepare_create_view(
    context: &SessionContext,
    target: &Target<'_>,
    (view, query): (&TableName, &str),
    form: ViewForm,
    now: i64,
) -> Result<Prepared, QueryError> {
    let database = target
        .database_allowing(view, Access::can_create_table, Denial::CreateTable)
        .await?;
    check_table_name(&view.table)?;
    let qualified = format!("{}.{}", database.name, view.table);
    if target.table(&database, &view.table).await?.is_some() {
        return Err(QueryError::Invalid(format!(
            "Table '{qualified}' already exists (a view cannot replace a table: drop it first)"
        )));
    }
    let state = context.state();
    let plan = state.create_logical_plan(query).await.map_err(plan_error)?;
    plan_read(&state, &plan).await?;
    if reads_table(
        &plan,
        target.default_database,
        (&database.name, &view.table),
    ) {
        return Err(QueryError::Invalid(format!(
            "View '{qualified}' cannot read itself"
        )));
    }
    let existing = target.store.view(&database.id, &view.table).await?;
    let mut made = LakeView::new(
        &database.id,
        &view.table,
        (query, target.default_database),
        &lake::schema_to_json(&without_view_types(plan.schema().as_arrow())),
        now,
    );
    if let Some(existing) = existing {
        if form.if_not_exists {
            return Ok(Prepared::Nothing);
        }
        if !form.or_replace {
            return Err(QueryError::Invalid(format!(
                "View '{qualified}' already exists"
            )));
        }
        made.id = existing.id;
        made.created_at = existing.created_at;
    }
    Ok(Prepared::CreateTable {
        table: made.as_catalog_entry(),
    })
}

/// Whether `plan` scans `database.table` (names resolved as the session
/// resolves them).
fn reads_table(
    plan: &LogicalPlan,
    default_database: &str,
    (database, table): (&str, &str),
) -> bool {
    let mut found = false;
    let walked = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let resolved = scan.table_name.clone().resolve(CATALOG, default_database);
            if *resolved.schema == *database && *resolved.table == *table {
                found = true;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    walked.is_ok() && found
}

/// DROP VIEW, view by view: the caller may create tables in its database,
/// and the view exists (or IF EXISTS skips it). The first refusal refuses
/// the whole statement.
pub(super) async fn prepare_drop_views(
    target: &Target<'_>,
    views: &[TableName],
    if_exists: bool,
) -> Result<Prepared, QueryError> {
    let mut dropped = Vec::new();
    for view in views {
        let database = target
            .database_allowing(view, Access::can_create_table, Denial::Statement)
            .await?;
        if target
            .store
            .view(&database.id, &view.table)
            .await?
            .is_none()
        {
            if if_exists {
                continue;
            }
            return Err(QueryError::Invalid(format!(
                "View '{}.{}' does not exist",
                database.name, view.table
            )));
        }
        dropped.push((database.id.clone(), view.table.clone()));
    }
    Ok(Prepared::Drop { tables: dropped })
}

/// ALTER TABLE ... RENAME TO of a view: within its database, to an allowed
/// name no table or view has. Other changes are refused: a view's columns
/// follow its SELECT.
pub(super) async fn rename_view(
    target: &Target<'_>,
    database: &LakeDatabase,
    view: LakeView,
    new: Option<&TableName>,
) -> Result<Prepared, QueryError> {
    let Some(new) = new else {
        return Err(QueryError::Invalid(format!(
            "'{}.{}' is a view: ALTER only renames it (CREATE OR REPLACE VIEW changes its columns)",
            database.name, view.name
        )));
    };
    if new.database.as_ref().is_some_and(|d| *d != database.name) {
        return Err(QueryError::Invalid(
            "ALTER TABLE ... RENAME TO cannot move a view to another database".into(),
        ));
    }
    check_table_name(&new.table)?;
    if name_taken(target, database, &new.table).await? {
        return Err(QueryError::Invalid(format!(
            "Table '{}.{}' already exists",
            database.name, new.table
        )));
    }
    Ok(Prepared::Alter {
        table_id: view.id,
        new_name: Some(new.table.clone()),
        new_schema_json: None,
    })
}
