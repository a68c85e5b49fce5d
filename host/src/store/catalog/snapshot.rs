//! A replica's copy of each org's (or zone's) catalog: its databases, tables
//! and views, and the committed files of the tables its queries named.
//!
//! Every statement starts by reading the catalog, and a small query spent
//! most of its store time there (two reads, a third per table named). Now it
//! reads one row per database instead: each database's `catalog_version`,
//! which the store's own triggers bump in the same transaction as any change
//! to its tables, views or files (migration 0020). While every version is
//! the one a kept copy was read at, the copy is the catalog; else it is read
//! again. So a load committed on any replica is seen by the next statement
//! that starts after its commit, as before.
//!
//! Why a copy is never stale: the versions are read first, the catalog
//! after, so a copy is at least as new as its versions. A change committed
//! in between moves a version past the copy's, and the next statement reads
//! again. A table's files are read the first time a statement of the copy
//! names it: a list newer than the copy's versions is no older than the
//! catalog a statement started with.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use sqlx::Row as _;

use super::{
    DataFile, LakeDatabase, LakeTable, database_from_row, table_from_row, views::LakeView,
};
use crate::{
    locks::locked,
    store::{Result, Store},
};

/// How many orgs' and zones' copies a replica keeps; past this, all are
/// dropped and read again as statements come.
const SCOPES_KEPT: usize = 1024;

/// A table's file list is kept with its copy only up to this many files
/// (about 300 bytes each); a longer one is read by every statement.
const FILES_KEPT: usize = 100_000;

/// One org's (or zone's) catalog as of its databases' versions.
#[derive(Debug)]
pub struct CatalogSnapshot {
    /// Each database's id and `catalog_version`, by id.
    versions: Vec<(String, i64)>,
    pub databases: Vec<LakeDatabase>,
    /// Every table of those databases, by database and name.
    pub tables: Vec<LakeTable>,
    /// Every view of those databases, by database and name.
    pub views: Vec<LakeView>,
    /// Where each database's tables and views are in `tables` and `views`,
    /// by database id and name: made once per copy, so a statement's every
    /// name lookup is a hash, not a walk of the org's whole catalog.
    table_at: Positions,
    view_at: Positions,
    /// Tables' committed files, as first read under this copy.
    files: Mutex<HashMap<String, Arc<[DataFile]>>>,
}

/// Positions in a list of catalog entries, by database id, then name.
type Positions = HashMap<String, HashMap<String, usize>>;

/// The positions of `entries`, each named by `key` (its database id, name).
fn positions<T>(entries: &[T], key: impl Fn(&T) -> (&str, &str)) -> Positions {
    let mut at = Positions::new();
    for (i, entry) in entries.iter().enumerate() {
        let (database_id, name) = key(entry);
        at.entry(database_id.to_string())
            .or_default()
            .insert(name.to_string(), i);
    }
    at
}

impl CatalogSnapshot {
    /// Table `name` of database `database_id`.
    pub fn table(&self, database_id: &str, name: &str) -> Option<&LakeTable> {
        let at = self.table_at.get(database_id)?.get(name)?;
        self.tables.get(*at)
    }

    /// View `name` of database `database_id`.
    pub fn view(&self, database_id: &str, name: &str) -> Option<&LakeView> {
        let at = self.view_at.get(database_id)?.get(name)?;
        self.views.get(*at)
    }

    /// The names of database `database_id`'s tables, then its views.
    pub fn names_in<'a>(&'a self, database_id: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let tables = self
            .tables
            .iter()
            .filter(move |t| t.database_id == database_id);
        let views = self
            .views
            .iter()
            .filter(move |v| v.database_id == database_id);
        tables
            .map(|t| t.name.as_str())
            .chain(views.map(|v| v.name.as_str()))
    }

    /// The committed files of `table_id` (one of `tables`), in commit order.
    pub async fn files(&self, store: &Store, table_id: &str) -> Result<Arc<[DataFile]>> {
        if let Some(files) = locked(&self.files).get(table_id) {
            return Ok(files.clone());
        }
        let files: Arc<[DataFile]> = store.files(table_id).await?.into();
        if files.len() <= FILES_KEPT {
            locked(&self.files).insert(table_id.to_string(), files.clone());
        }
        Ok(files)
    }
}

/// The copies a replica keeps, by org and zone (`""` for the org's own).
#[derive(Default)]
pub(crate) struct Snapshots {
    by_scope: Mutex<HashMap<(String, String), Arc<CatalogSnapshot>>>,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots")
            .field("scopes", &locked(&self.by_scope).len())
            .finish()
    }
}

impl Store {
    /// The org's (or zone's) catalog as of now: the kept copy while no
    /// version of its databases moved, else read again (and kept).
    pub async fn catalog_snapshot(
        &self,
        org: &str,
        zone: Option<&str>,
    ) -> Result<Arc<CatalogSnapshot>> {
        let versions = self.catalog_versions(org, zone).await?;
        let key = (org.to_string(), zone.unwrap_or("").to_string());
        let kept = locked(&self.snapshots.by_scope).get(&key).cloned();
        if let Some(kept) = kept
            && kept.versions == versions
        {
            return Ok(kept);
        }
        let ((databases, tables), views) =
            tokio::try_join!(self.catalog_of(org, zone), self.views_of(org, zone))?;
        let snapshot = Arc::new(CatalogSnapshot {
            versions,
            databases,
            table_at: positions(&tables, |t| (&t.database_id, &t.name)),
            view_at: positions(&views, |v| (&v.database_id, &v.name)),
            tables,
            views,
            files: Mutex::default(),
        });
        let mut by_scope = locked(&self.snapshots.by_scope);
        if by_scope.len() >= SCOPES_KEPT && !by_scope.contains_key(&key) {
            by_scope.clear();
        }
        by_scope.insert(key, snapshot.clone());
        Ok(snapshot)
    }

    /// An org's (or zone's) databases and every table in them, in one read.
    pub async fn catalog_of(
        &self,
        org: &str,
        zone: Option<&str>,
    ) -> Result<(Vec<LakeDatabase>, Vec<LakeTable>)> {
        let rows = sqlx::query(
            "SELECT d.id, d.org, d.zone, d.name, d.kind, t.id AS table_id, t.database_id, \
             t.name AS table_name, t.schema_json, t.partition_columns_json, t.column_order_json, \
             t.created_at \
             FROM lake_databases d LEFT JOIN lake_tables t ON t.database_id = d.id \
             WHERE d.org = $1 AND d.zone = $2 ORDER BY d.name, t.name",
        )
        .bind(org)
        .bind(zone.unwrap_or(""))
        .fetch_all(self.pool())
        .await?;
        let mut databases: Vec<LakeDatabase> = Vec::new();
        let mut tables = Vec::new();
        for row in &rows {
            let database_id: String = row.try_get("id")?;
            if databases.last().is_none_or(|d| d.id != database_id) {
                databases.push(database_from_row(row)?);
            }
            if row.try_get::<Option<String>, _>("table_id")?.is_some() {
                tables.push(table_from_row(row, ("table_id", "table_name"))?);
            }
        }
        Ok((databases, tables))
    }

    /// Each of the org's (or zone's) databases with its catalog version.
    async fn catalog_versions(&self, org: &str, zone: Option<&str>) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT id, catalog_version FROM lake_databases WHERE org = $1 AND zone = $2 \
             ORDER BY id",
        )
        .bind(org)
        .bind(zone.unwrap_or(""))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("id")?, row.try_get("catalog_version")?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::catalog::NewDataFile;

    /// The copy, and a table's file list in it, come from memory while the
    /// versions hold: with the files' insert trigger gone, a file inserted
    /// is not seen; a version moved by hand is, and so is the file then.
    #[tokio::test]
    async fn a_copy_is_read_from_memory_until_a_version_moves() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_sqlite(&dir.path().join("store.db"))
            .await
            .unwrap();
        let lake = store.ensure_standard_databases("demo", None).await.unwrap()[0].clone();
        let table = store
            .create_table(&lake.id, "t", "{}", &[], 1)
            .await
            .unwrap();
        let copy = store.catalog_snapshot("demo", None).await.unwrap();
        assert!(copy.files(&store, &table.id).await.unwrap().is_empty());
        sqlx::query("DROP TRIGGER lake_files_inserted")
            .execute(store.pool())
            .await
            .unwrap();
        let file = NewDataFile {
            path: "lake/demo/t/part-0.parquet".into(),
            service_client_id: None,
            partition_values: Default::default(),
            row_count: 1,
            size_bytes: 10,
            load_id: None,
        };
        store.commit_files(&table.id, &[file], 2).await.unwrap();
        let again = store.catalog_snapshot("demo", None).await.unwrap();
        assert!(Arc::ptr_eq(&copy, &again));
        assert!(again.files(&store, &table.id).await.unwrap().is_empty());

        sqlx::query(
            "UPDATE lake_databases SET catalog_version = catalog_version + 1 WHERE id = $1",
        )
        .bind(&lake.id)
        .execute(store.pool())
        .await
        .unwrap();
        let moved = store.catalog_snapshot("demo", None).await.unwrap();
        assert!(!Arc::ptr_eq(&copy, &moved));
        assert_eq!(moved.files(&store, &table.id).await.unwrap().len(), 1);
    }

    /// A name is looked up in its own database: the same table name in two
    /// databases gives each its own table, a view is found as a view and
    /// not as a table, and a name of another database, or of none, is no
    /// entry.
    #[tokio::test]
    async fn names_are_looked_up_in_their_own_database() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_sqlite(&dir.path().join("store.db"))
            .await
            .unwrap();
        let databases = store.ensure_standard_databases("demo", None).await.unwrap();
        let (first, second) = (&databases[0], &databases[1]);
        let in_first = store
            .create_table(&first.id, "t", "{}", &[], 1)
            .await
            .unwrap();
        let in_second = store
            .create_table(&second.id, "t", "{}", &[], 1)
            .await
            .unwrap();
        store
            .create_table(&second.id, "only_second", "{}", &[], 1)
            .await
            .unwrap();
        store
            .put_view(&LakeView {
                id: "v1".into(),
                database_id: first.id.clone(),
                name: "v".into(),
                sql: "SELECT 1".into(),
                default_database: first.name.clone(),
                schema_json: "{}".into(),
                created_at: 1,
            })
            .await
            .unwrap();
        let copy = store.catalog_snapshot("demo", None).await.unwrap();
        assert_eq!(copy.table(&first.id, "t").unwrap().id, in_first.id);
        assert_eq!(copy.table(&second.id, "t").unwrap().id, in_second.id);
        assert!(copy.table(&first.id, "only_second").is_none());
        assert!(copy.table(&first.id, "v").is_none());
        assert_eq!(copy.view(&first.id, "v").unwrap().id, "v1");
        assert!(copy.view(&second.id, "v").is_none());
        assert!(copy.table("no such database", "t").is_none());
        let names: Vec<&str> = copy.names_in(&second.id).collect();
        assert_eq!(names, ["only_second", "t"]);
        assert_eq!(copy.names_in(&first.id).collect::<Vec<_>>(), ["t", "v"]);
    }
}
