//! SQL views of the lake catalog (`lake_views`, migration 0017): a named
//! SELECT of a database, with the database its unqualified names resolve in
//! and its columns when it was made. The store keeps the text only; the
//! engine plans it as each reader (`engine::session`), so a view never reads
//! more than its reader may.
//!
//! A view's change commits with its statement's job like a table's: it
//! travels in the job's `CatalogWrite` as a catalog entry whose id marks it
//! as a view (`LakeView::as_catalog_entry`), and `insert_table`,
//! `delete_table` and `alter_table` hand such entries here.

use serde::{Deserialize, Serialize};
use sqlx::Row as _;

use super::{Error, LakeTable, Result, Store, new_id};

/// What a view's catalog entry ids start with (table ids are plain hex).
const VIEW_ID_PREFIX: &str = "view-";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeView {
    pub id: String,
    pub database_id: String,
    pub name: String,
    /// The SELECT, as the parser printed it.
    pub sql: String,
    /// The database the SELECT's unqualified names resolve in.
    pub default_database: String,
    /// Its columns when it was made (`lake::schema_to_json`).
    pub schema_json: String,
    pub created_at: i64,
}

/// A view's definition inside the catalog entry that carries it.
#[derive(Serialize, Deserialize)]
struct Definition {
    sql: String,
    default_database: String,
    schema_json: String,
}

impl LakeView {
    /// A new view (a fresh id).
    pub fn new(
        database_id: &str,
        name: &str,
        (sql, default_database): (&str, &str),
        schema_json: &str,
        created_at: i64,
    ) -> Self {
        Self {
            id: format!("{VIEW_ID_PREFIX}{}", new_id()),
            database_id: database_id.to_string(),
            name: name.to_string(),
            sql: sql.to_string(),
            default_database: default_database.to_string(),
            schema_json: schema_json.to_string(),
            created_at,
        }
    }

    /// The view as the catalog entry a job's catalog write carries: created
    /// (or replaced) by `insert_table`, renamed by `alter_table`.
    pub fn as_catalog_entry(&self) -> LakeTable {
        let definition = Definition {
            sql: self.sql.clone(),
            default_database: self.default_database.clone(),
            schema_json: self.schema_json.clone(),
        };
        LakeTable {
            id: self.id.clone(),
            database_id: self.database_id.clone(),
            name: self.name.clone(),
            schema_json: serde_json::to_string(&definition).expect("strings serialise"),
            partition_columns: Vec::new(),
            column_order: None,
            created_at: self.created_at,
        }
    }

    /// The view a catalog entry carries, if it is one.
    pub fn from_catalog_entry(entry: &LakeTable) -> Result<Option<Self>> {
        if !is_view_id(&entry.id) {
            return Ok(None);
        }
        let definition: Definition = serde_json::from_str(&entry.schema_json)
            .map_err(|e| Error::unreadable("view definition", e))?;
        Ok(Some(Self {
            id: entry.id.clone(),
            database_id: entry.database_id.clone(),
            name: entry.name.clone(),
            sql: definition.sql,
            default_database: definition.default_database,
            schema_json: definition.schema_json,
            created_at: entry.created_at,
        }))
    }
}

/// Whether a catalog entry id is a view's.
pub fn is_view_id(id: &str) -> bool {
    id.starts_with(VIEW_ID_PREFIX)
}

const COLUMNS: &str = "v.id, v.database_id, v.name, v.sql_text, v.default_database, \
    v.schema_json, v.created_at";

fn view_from_row(row: &sqlx::any::AnyRow) -> Result<LakeView> {
    Ok(LakeView {
        id: row.try_get("id")?,
        database_id: row.try_get("database_id")?,
        name: row.try_get("name")?,
        sql: row.try_get("sql_text")?,
        default_database: row.try_get("default_database")?,
        schema_json: row.try_get("schema_json")?,
        created_at: row.try_get("created_at")?,
    })
}

impl Store {
    /// Every view of the org's (or zone's) databases, by database and name.
    pub async fn views_of(&self, org: &str, zone: Option<&str>) -> Result<Vec<LakeView>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM lake_views v JOIN lake_databases d ON d.id = v.database_id \
             WHERE d.org = $1 AND d.zone = $2 ORDER BY d.name, v.name"
        ))
        .bind(org)
        .bind(zone.unwrap_or(""))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(view_from_row).collect()
    }

    /// Creates (or replaces) `view` at once, outside any job: a seed.
    pub async fn put_view(&self, view: &LakeView) -> Result<()> {
        let mut connection = self.pool().acquire().await?;
        put_view(&mut connection, view).await
    }

    /// The view `name` of a database, if there is one.
    pub async fn view(&self, database_id: &str, name: &str) -> Result<Option<LakeView>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM lake_views v WHERE v.database_id = $1 AND v.name = $2"
        ))
        .bind(database_id)
        .bind(name)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(view_from_row).transpose()
    }
}

/// Creates `view`, or replaces the definition of the view of its name.
pub(super) async fn put_view(connection: &mut sqlx::AnyConnection, view: &LakeView) -> Result<()> {
    sqlx::query(
        "INSERT INTO lake_views (id, database_id, name, sql_text, default_database, schema_json, \
         created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (database_id, name) \
         DO UPDATE SET sql_text = excluded.sql_text, default_database = excluded.default_database, \
         schema_json = excluded.schema_json",
    )
    .bind(&view.id)
    .bind(&view.database_id)
    .bind(&view.name)
    .bind(&view.sql)
    .bind(&view.default_database)
    .bind(&view.schema_json)
    .bind(view.created_at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// Deletes the view `name` of a database; false when there is none.
pub(super) async fn delete_view(
    connection: &mut sqlx::AnyConnection,
    database_id: &str,
    name: &str,
) -> Result<bool> {
    let deleted = sqlx::query("DELETE FROM lake_views WHERE database_id = $1 AND name = $2")
        .bind(database_id)
        .bind(name)
        .execute(&mut *connection)
        .await?;
    Ok(deleted.rows_affected() > 0)
}

/// Renames the view `view_id`.
pub(super) async fn rename_view(
    connection: &mut sqlx::AnyConnection,
    view_id: &str,
    new_name: &str,
) -> Result<()> {
    sqlx::query("UPDATE lake_views SET name = $1 WHERE id = $2")
        .bind(new_name)
        .bind(view_id)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{alter_table, delete_table, insert_table};
    use super::*;

    /// A view's change travels as a catalog entry and lands in `lake_views`:
    /// created, replaced (same id), renamed and dropped as tables are,
    /// never as a table.
    #[tokio::test]
    async fn a_views_catalog_entry_creates_replaces_renames_and_drops_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_sqlite(&dir.path().join("store.db"))
            .await
            .unwrap();
        store.ensure_standard_databases("demo", None).await.unwrap();
        let sandbox = store
            .database("demo", None, "demo_sandbox")
            .await
            .unwrap()
            .unwrap();
        let schema = r#"{"fields":[]}"#;
        let view = LakeView::new(
            &sandbox.id,
            "v",
            ("SELECT 1 AS a", "demo_lake_v2"),
            schema,
            7,
        );
        let entry = view.as_catalog_entry();
        assert_eq!(
            LakeView::from_catalog_entry(&entry).unwrap(),
            Some(view.clone())
        );
        let mut connection = store.pool().acquire().await.unwrap();
        insert_table(&mut connection, &entry).await.unwrap();
        assert_eq!(
            store.view(&sandbox.id, "v").await.unwrap(),
            Some(view.clone())
        );
        assert_eq!(store.table(&sandbox.id, "v").await.unwrap(), None);

        let mut replaced = view.clone();
        replaced.sql = "SELECT 2 AS a".into();
        insert_table(&mut connection, &replaced.as_catalog_entry())
            .await
            .unwrap();
        let stored = store.view(&sandbox.id, "v").await.unwrap().unwrap();
        assert_eq!(
            (stored.id.as_str(), stored.sql.as_str()),
            (view.id.as_str(), "SELECT 2 AS a")
        );

        alter_table(&mut connection, &view.id, Some("w"), None)
            .await
            .unwrap();
        assert_eq!(store.view(&sandbox.id, "v").await.unwrap(), None);
        let listed = store.views_of("demo", None).await.unwrap();
        assert_eq!(
            listed.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["w"]
        );

        assert_eq!(
            delete_table(&mut connection, &sandbox.id, "w", 0)
                .await
                .unwrap(),
            0
        );
        assert!(store.views_of("demo", None).await.unwrap().is_empty());
        assert!(matches!(
            delete_table(&mut connection, &sandbox.id, "w", 0).await,
            Err(Error::NotFound { .. })
        ));
    }
}
