//! The lake catalog (DESIGN.md "Data model"): databases per org and zone, tables
//! with their schema and partition columns, and the committed data files with
//! partition values and row counts. Readers see only files listed here; a set of
//! files becomes visible in one transaction.

use std::collections::BTreeMap;

use sqlx::Row as _;

use super::{
    Error, Result, Store,
    database_kind::{DatabaseKind, kind_name, parse_kind},
    new_id,
};

pub mod snapshot;
pub mod views;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeDatabase {
    pub id: String,
    pub org: String,
    /// `None` for the org's own databases.
    pub zone: Option<String>,
    pub name: String,
    pub kind: DatabaseKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeTable {
    pub id: String,
    pub database_id: String,
    pub name: String,
    /// The table's Arrow schema as JSON (written and read by the lake layer).
    pub schema_json: String,
    pub partition_columns: Vec<String>,
    /// Every column's name as `CREATE TABLE [AS]` ordered them (read by
    /// `engine::layout::table_schema`; the files are the same either way);
    /// `None` (older tables, loads, imports): file then partition columns.
    pub column_order: Option<Vec<String>>,
    pub created_at: i64,
}

/// A data file to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDataFile {
    pub path: String,
    pub service_client_id: Option<i64>,
    pub partition_values: BTreeMap<String, String>,
    pub row_count: i64,
    pub size_bytes: i64,
    pub load_id: Option<String>,
}

/// A committed data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFile {
    pub id: String,
    pub table_id: String,
    pub file: NewDataFile,
    pub committed_at: i64,
}

/// The databases every org (zone `None`) or zone has: `<org>_lake_v2` or
/// `<zone>_lake` (the default), and the insights, data-input and sandbox family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandardDatabases {
    /// The default database of queries and loads.
    pub lake: String,
    pub insights: String,
    pub data_input: String,
    pub sandbox: String,
}

impl StandardDatabases {
    /// Each database with its kind, the lake first.
    pub fn all(&self) -> [(&str, DatabaseKind); 4] {
        [
            (&self.lake, DatabaseKind::Lake),
            (&self.insights, DatabaseKind::Insights),
            (&self.data_input, DatabaseKind::DataInput),
            (&self.sandbox, DatabaseKind::Sandbox),
        ]
    }
}

/// The standard databases' names of an org or zone. Hyphens of DNS names
/// become underscores so names are plain SQL identifiers.
pub fn standard_databases(org: &str, zone: Option<&str>) -> StandardDatabases {
    let (stem, lake) = match zone {
        None => {
            let stem = org.replace('-', "_");
            let lake = format!("{stem}_lake_v2");
            (stem, lake)
        }
        Some(zone) => {
            let stem = zone.replace('-', "_");
            let lake = format!("{stem}_lake");
            (stem, lake)
        }
    };
    StandardDatabases {
        lake,
        insights: format!("{stem}_insights"),
        data_input: format!("{stem}_data_input"),
        sandbox: format!("{stem}_sandbox"),
    }
}

fn database_from_row(row: &sqlx::any::AnyRow) -> Result<LakeDatabase> {
    let zone: String = row.try_get("zone")?;
    Ok(LakeDatabase {
        id: row.try_get("id")?,
        org: row.try_get("org")?,
        zone: (!zone.is_empty()).then_some(zone),
        name: row.try_get("name")?,
        kind: parse_kind(&row.try_get::<String, _>("kind")?)?,
    })
}

/// The table of a row whose id and name columns have the names given.
fn table_from_row(row: &sqlx::any::AnyRow, (id, name): (&str, &str)) -> Result<LakeTable> {
    let partitions: String = row.try_get("partition_columns_json")?;
    let order: Option<String> = row.try_get("column_order_json")?;
    Ok(LakeTable {
        id: row.try_get(id)?,
        database_id: row.try_get("database_id")?,
        name: row.try_get(name)?,
        schema_json: row.try_get("schema_json")?,
        partition_columns: parse_names(&partitions, "partition columns")?,
        column_order: (order.as_deref().map(|o| parse_names(o, "column order"))).transpose()?,
        created_at: row.try_get("created_at")?,
    })
}

/// A JSON list of column names (`what` names it in the error).
fn parse_names(json: &str, what: &'static str) -> Result<Vec<String>> {
    serde_json::from_str(json).map_err(|e| Error::unreadable(what, e))
}

fn file_from_row(row: &sqlx::any::AnyRow) -> Result<DataFile> {
    let values: String = row.try_get("partition_values_json")?;
    Ok(DataFile {
        id: row.try_get("id")?,
        table_id: row.try_get("table_id")?,
        file: NewDataFile {
            path: row.try_get("path")?,
            service_client_id: row.try_get("service_client_id")?,
            partition_values: serde_json::from_str(&values)
                .map_err(|e| Error::unreadable("partition values", e))?,
            row_count: row.try_get("row_count")?,
            size_bytes: row.try_get("size_bytes")?,
            load_id: row.try_get("load_id")?,
        },
        committed_at: row.try_get("committed_at")?,
    })
}

impl Store {
    /// Creates the standard databases of an org or zone when missing; returns them.
    pub async fn ensure_standard_databases(
        &self,
        org: &str,
        zone: Option<&str>,
    ) -> Result<Vec<LakeDatabase>> {
        for (name, kind) in standard_databases(org, zone).all() {
            sqlx::query(
                "INSERT INTO lake_databases (id, org, zone, name, kind) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (org, zone, name) DO NOTHING",
            )
            .bind(new_id())
            .bind(org)
            .bind(zone.unwrap_or(""))
            .bind(name)
            .bind(kind_name(kind))
            .execute(self.pool())
            .await?;
        }
        self.databases(org, zone).await
    }

    pub async fn databases(&self, org: &str, zone: Option<&str>) -> Result<Vec<LakeDatabase>> {
        let rows = sqlx::query(
            "SELECT id, org, zone, name, kind FROM lake_databases \
             WHERE org = $1 AND zone = $2 ORDER BY name",
        )
        .bind(org)
        .bind(zone.unwrap_or(""))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(database_from_row).collect()
    }

    pub async fn database(
        &self,
        org: &str,
        zone: Option<&str>,
        name: &str,
    ) -> Result<Option<LakeDatabase>> {
        let row = sqlx::query(
            "SELECT id, org, zone, name, kind FROM lake_databases \
             WHERE org = $1 AND zone = $2 AND name = $3",
        )
        .bind(org)
        .bind(zone.unwrap_or(""))
        .bind(name)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(database_from_row).transpose()
    }

    pub async fn create_table(
        &self,
        database_id: &str,
        name: &str,
        schema_json: &str,
        partition_columns: &[String],
        now: i64,
    ) -> Result<LakeTable> {
        let table = LakeTable {
            id: new_id(),
            database_id: database_id.to_string(),
            name: name.to_string(),
            schema_json: schema_json.to_string(),
            partition_columns: partition_columns.to_vec(),
            column_order: None,
            created_at: now,
        };
        let mut connection = self.pool().acquire().await?;
        insert_table(&mut connection, &table).await?;
        Ok(table)
    }

    pub async fn table(&self, database_id: &str, name: &str) -> Result<Option<LakeTable>> {
        let row = sqlx::query(
            "SELECT id, database_id, name, schema_json, partition_columns_json, \
             column_order_json, created_at FROM lake_tables WHERE database_id = $1 AND name = $2",
        )
        .bind(database_id)
        .bind(name)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref()
            .map(|row| table_from_row(row, ("id", "name")))
            .transpose()
    }

    pub async fn tables(&self, database_id: &str) -> Result<Vec<LakeTable>> {
        let rows = sqlx::query(
            "SELECT id, database_id, name, schema_json, partition_columns_json, \
             column_order_json, created_at FROM lake_tables WHERE database_id = $1 ORDER BY name",
        )
        .bind(database_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| table_from_row(row, ("id", "name")))
            .collect()
    }

    /// Drops a table and its file list in one transaction; its files become
    /// retired (deleted by the sweeper later). Returns how many were retired.
    pub async fn drop_table(&self, database_id: &str, name: &str, now: i64) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let retired = delete_table(&mut tx, database_id, name, now).await?;
        tx.commit().await?;
        Ok(retired)
    }

    /// Paths of files retired before `retired_before`, oldest first, at most `limit`.
    pub async fn retired_files_due(&self, retired_before: i64, limit: i64) -> Result<Vec<String>> {
        sqlx::query(
            "SELECT path FROM retired_files WHERE retired_at < $1 \
             ORDER BY retired_at, path LIMIT $2",
        )
        .bind(retired_before)
        .bind(limit)
        .fetch_all(self.pool())
        .await?
        .iter()
        .map(|r| r.try_get("path").map_err(Error::from))
        .collect()
    }

    /// Forgets retired files once they are gone from the object store.
    pub async fn forget_retired_files(&self, paths: &[String]) -> Result<()> {
        let mut tx = self.begin_write().await?;
        for path in paths {
            sqlx::query("DELETE FROM retired_files WHERE path = $1")
                .bind(path)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Makes all `files` visible at once, or none (one transaction).
    pub async fn commit_files(
        &self,
        table_id: &str,
        files: &[NewDataFile],
        now: i64,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        insert_files(&mut tx, table_id, files, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The committed files of a table, in commit order.
    pub async fn files(&self, table_id: &str) -> Result<Vec<DataFile>> {
        let rows = sqlx::query(
            "SELECT id, table_id, path, service_client_id, partition_values_json, row_count, \
             size_bytes, load_id, committed_at FROM lake_files WHERE table_id = $1 \
             ORDER BY committed_at, path",
        )
        .bind(table_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(file_from_row).collect()
    }
}

// Statements shared by the store's own methods and by transactions that change
// the catalog together with a job's final state (see `queries::CatalogWrite`).

pub(super) async fn insert_table(
    connection: &mut sqlx::AnyConnection,
    table: &LakeTable,
) -> Result<()> {
    if let Some(view) = views::LakeView::from_catalog_entry(table)? {
        return views::put_view(connection, &view).await;
    }
    let inserted = sqlx::query(
        "INSERT INTO lake_tables (id, database_id, name, schema_json, partition_columns_json, \
         column_order_json, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (database_id, name) DO NOTHING",
    )
    .bind(&table.id)
    .bind(&table.database_id)
    .bind(&table.name)
    .bind(&table.schema_json)
    .bind(serde_json::to_string(&table.partition_columns).expect("strings serialise"))
    .bind(
        table
            .column_order
            .as_ref()
            .map(|order| serde_json::to_string(order).expect("strings serialise")),
    )
    .bind(table.created_at)
    .execute(&mut *connection)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(Error::AlreadyExists {
            what: format!("table {}", table.name),
        });
    }
    Ok(())
}

pub(super) async fn insert_files(
    connection: &mut sqlx::AnyConnection,
    table_id: &str,
    files: &[NewDataFile],
    now: i64,
) -> Result<()> {
    for file in files {
        sqlx::query(
            "INSERT INTO lake_files (id, table_id, path, service_client_id, partition_values_json, \
             row_count, size_bytes, load_id, committed_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(new_id())
        .bind(table_id)
        .bind(&file.path)
        .bind(file.service_client_id)
        .bind(serde_json::to_string(&file.partition_values).expect("strings serialise"))
        .bind(file.row_count)
        .bind(file.size_bytes)
        .bind(file.load_id.as_deref())
        .bind(now)
        .execute(&mut *connection)
        .await?;
        // New files have fresh ids in their paths, so this finds nothing; it
        // keeps "a listed file is never swept" true on its own.
        sqlx::query("DELETE FROM retired_files WHERE path = $1")
            .bind(&file.path)
            .execute(&mut *connection)
            .await?;
    }
    Ok(())
}

/// Deletes a table and its file list, retiring the files as of `now` (the
/// sweeper deletes them once queries planned on the old list are over);
/// returns how many files were retired. With no table `name`, deletes the
/// view of that name (none retired).
pub(super) async fn delete_table(
    connection: &mut sqlx::AnyConnection,
    database_id: &str,
    name: &str,
    now: i64,
) -> Result<u64> {
    let row = sqlx::query("SELECT id FROM lake_tables WHERE database_id = $1 AND name = $2")
        .bind(database_id)
        .bind(name)
        .fetch_optional(&mut *connection)
        .await?;
    let Some(row) = row else {
        // DROP VIEW: views share their database's names with its tables.
        if views::delete_view(connection, database_id, name).await? {
            return Ok(0);
        }
        return Err(Error::NotFound {
            what: format!("table {name}"),
        });
    };
    let table_id: String = row.try_get("id")?;
    let retired = sqlx::query(
        "INSERT INTO retired_files (path, retired_at) \
         SELECT path, CAST($2 AS BIGINT) FROM lake_files WHERE table_id = $1 \
         ON CONFLICT (path) DO NOTHING",
    )
    .bind(&table_id)
    .bind(now)
    .execute(&mut *connection)
    .await?
    .rows_affected();
    sqlx::query("DELETE FROM lake_files WHERE table_id = $1")
        .bind(&table_id)
        .execute(&mut *connection)
        .await?;
    sqlx::query("DELETE FROM lake_tables WHERE id = $1")
        .bind(&table_id)
        .execute(&mut *connection)
        .await?;
    Ok(retired)
}

/// Renames a table and/or replaces its schema; renames a view (a view's
/// columns follow its SELECT, so a view has no schema to replace).
pub(super) async fn alter_table(
    connection: &mut sqlx::AnyConnection,
    table_id: &str,
    new_name: Option<&str>,
    new_schema_json: Option<&str>,
) -> Result<()> {
    if views::is_view_id(table_id) {
        if let Some(name) = new_name {
            views::rename_view(connection, table_id, name).await?;
        }
        return Ok(());
    }
    if let Some(name) = new_name {
        sqlx::query("UPDATE lake_tables SET name = $1 WHERE id = $2")
            .bind(name)
            .bind(table_id)
            .execute(&mut *connection)
            .await?;
    }
    if let Some(schema) = new_schema_json {
        sqlx::query("UPDATE lake_tables SET schema_json = $1 WHERE id = $2")
            .bind(schema)
            .bind(table_id)
            .execute(&mut *connection)
            .await?;
    }
    Ok(())
}
