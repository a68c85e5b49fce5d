//! What a caller may list: the databases its roles can read
//! (`Access::can_read_database`, the rule `scan()` applies before refusing
//! with the spec's text), each with all its tables and views (a view as the
//! catalog entry that carries it, `LakeView::as_catalog_entry`), and a
//! table's or view's columns as queries see them. The wire front ends' listings (Flight SQL's GetTables,
//! the Postgres catalog queries of psql) show this and nothing else.

use datafusion::arrow::datatypes::Schema;

use super::QueryService;
use crate::{
    auth::LakeCaller,
    engine::layout::{table_schema, without_view_types},
    lake,
    query::QueryError,
    store::catalog::{LakeDatabase, LakeTable, views::LakeView},
};

/// The databases a caller may read, with their tables and views.
pub struct VisibleCatalog {
    pub databases: Vec<LakeDatabase>,
    pub tables: Vec<LakeTable>,
}

impl VisibleCatalog {
    /// The database `table` is in.
    pub fn database_of(&self, table: &LakeTable) -> Option<&LakeDatabase> {
        self.databases.iter().find(|d| d.id == table.database_id)
    }
}

impl QueryService {
    /// What `caller` may list in its org (or zone).
    pub async fn visible_catalog(&self, caller: &LakeCaller) -> Result<VisibleCatalog, QueryError> {
        let snapshot = self
            .store
            .catalog_snapshot(&caller.org, caller.zone.as_deref())
            .await?;
        let access = caller.grant.access();
        let databases: Vec<LakeDatabase> = snapshot
            .databases
            .iter()
            .filter(|d| access.can_read_database(d.kind))
            .cloned()
            .collect();
        let tables = snapshot
            .tables
            .iter()
            .cloned()
            .chain(snapshot.views.iter().map(LakeView::as_catalog_entry))
            .filter(|t| databases.iter().any(|d| d.id == t.database_id))
            .collect();
        Ok(VisibleCatalog { databases, tables })
    }
}

/// A table's (or view's) columns as queries see them, with the plain
/// string types results have.
pub fn columns_of(table: &LakeTable) -> Result<Schema, QueryError> {
    let unreadable = |e| QueryError::internal(format!("table {}", table.name), e);
    if let Some(view) = LakeView::from_catalog_entry(table).map_err(unreadable)? {
        let columns = lake::schema_from_json(&view.schema_json)
            .map_err(|e| QueryError::internal(format!("view {}", view.name), e))?;
        return Ok(without_view_types(&columns));
    }
    let files = lake::schema_from_json(&table.schema_json)
        .map_err(|e| QueryError::internal(format!("table {}", table.name), e))?;
    Ok(without_view_types(&table_schema(
        &files,
        &table.partition_columns,
        table.column_order.as_deref(),
    )))
}
