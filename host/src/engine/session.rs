//! A DataFusion session for one caller on one org or zone: a catalog
//! `lakehost` whose schemas are the org's (or zone's) databases and whose tables
//! are `LakeTableProvider`s carrying the caller's read scope for that database.
//! Nothing else is reachable: no URL tables, no file system, no other org.
//!
//! Table names come from the replica's copy of the catalog when the session
//! starts (`store::catalog::snapshot`: one store read while nothing changed);
//! a table's file list only when a statement names the table, so `SELECT 1`
//! and queries on one table do not pay for the whole catalog. Listings show only the
//! tables of databases the caller may read.
//!
//! The catalog also answers to the name of the database the client
//! connected to (`catalogs`), and holds the databases' views (`view`).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::{
    catalog::{CatalogProvider, MemoryCatalogProvider, SchemaProvider, TableProvider},
    common::DataFusionError,
    execution::object_store::ObjectStoreUrl,
    execution::{
        SessionStateBuilder,
        cache::cache_manager::{CacheManagerConfig, FileMetadataCache},
        memory_pool::FairSpillPool,
        runtime_env::RuntimeEnvBuilder,
    },
    prelude::{SessionConfig, SessionContext},
};
use object_store::ObjectStore;

use super::{
    distributed::Coordinator, layout::StringColumns, plan_rules::lake_physical_rules,
    provider::LakeTableProvider,
};
use crate::{
    auth::{Access, ServiceClientScope},
    lake::{self, Lake, ReadCache},
    store::{self, Store, catalog::snapshot::CatalogSnapshot},
};

mod catalogs;
mod view;

use catalogs::SessionCatalogs;
pub use catalogs::{api_database, foreign_catalog_message};
use view::LakeViewProvider;

pub const CATALOG: &str = "lakehost";

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error(transparent)]
    Lake(#[from] lake::Error),
    #[error("datafusion: {0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    #[error("database {0} does not exist")]
    UnknownDatabase(String),
}

/// Whose session: the org, the zone (for the Zone API) and the caller's access
/// on that API's client.
pub struct SessionScope<'a> {
    pub org: &'a str,
    pub zone: Option<&'a str>,
    pub access: &'a Access,
    /// The database unqualified names resolve in.
    pub default_database: &'a str,
    /// Memory the session's queries may hold before sorts, joins and
    /// aggregations spill to disk (and then fail); `None` for no limit.
    pub memory_limit: Option<usize>,
    /// Parquet footers and page indexes already read, shared across sessions
    /// (data files never change in place: a new load is a new path).
    pub metadata_cache: Option<Arc<FileMetadataCache>>,
    /// How its statements read string and binary columns.
    pub strings: StringColumns,
    /// The lake's store with recent reads kept in memory, shared across
    /// sessions; `None` reads the lake's store directly.
    pub read_cache: Option<Arc<ReadCache>>,
    /// The cluster its reads may be distributed on (`[distributed]`):
    /// given for reads only, so writes always run here.
    pub cluster: Option<&'a dyn Coordinator>,
    /// `query.target_partitions`: 0 chooses (`partitions_for`).
    pub target_partitions: usize,
}

/// The partitions a session's plans are cut into: `configured`, else the
/// cores on a lake on disk and on S3 twice the cores, at least 8. A
/// partition's parquet scan asks for one row group's ranges and decodes them
/// before it asks for the next, so on S3 each partition waits on round
/// trips. On 2 cores and s3s-fs (TPC-H scale 1, bench/README.md), 4 and 8
/// partitions ran the benchmark's reads 1.5-1.8x and 1.6-2.3x faster than
/// 2, with the same CPU per query; real S3 answers more slowly still.
pub fn partitions_for(configured: usize, lake: &Lake) -> usize {
    if configured > 0 {
        return configured;
    }
    let cores = crate::runtime::cores();
    match lake.local_root() {
        Some(_) => cores,
        None => (cores * 2).max(8),
    }
}

pub async fn session_for(
    store: &Store,
    lake: &Lake,
    scope: &SessionScope<'_>,
) -> Result<SessionContext, SessionError> {
    // The replica's copy while the catalog has not changed: a small query
    // spends much of its time waiting on the store.
    let snapshot = store.catalog_snapshot(scope.org, scope.zone).await?;
    if !snapshot
        .databases
        .iter()
        .any(|d| d.name == scope.default_database)
    {
        return Err(SessionError::UnknownDatabase(
            scope.default_database.to_string(),
        ));
    }
    let catalog = MemoryCatalogProvider::new();
    for database in &snapshot.databases {
        let schema = LakeSchemaProvider {
            store: store.clone(),
            snapshot: snapshot.clone(),
            object_store_url: lake.object_store_url().clone(),
            database: database.name.clone(),
            database_id: database.id.clone(),
            read_scope: scope.access.read_scope(database.kind),
            strings: scope.strings,
        };
        catalog.register_schema(&database.name, Arc::new(schema))?;
    }
    let mut config = SessionConfig::new()
        .with_target_partitions(partitions_for(scope.target_partitions, lake))
        .with_default_catalog_and_schema(CATALOG, scope.default_database)
        .with_create_default_catalog_and_schema(false)
        .with_information_schema(true);
    if let Some(limit) = scope.memory_limit {
        // A sort keeps this much back for merging its spill files; it must fit
        // well inside a small limit (DataFusion's default is 10 MB).
        let options = config.options_mut();
        options.execution.sort_spill_reservation_bytes = options
            .execution
            .sort_spill_reservation_bytes
            .min(limit / 8);
    }
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(cache) = &scope.metadata_cache {
        runtime = runtime.with_cache_manager(
            CacheManagerConfig::default().with_file_metadata_cache(Some(cache.clone())),
        );
    }
    if let Some(limit) = scope.memory_limit {
        runtime = runtime.with_memory_pool(Arc::new(FairSpillPool::new(limit)));
    }
    let runtime = runtime.build_arc()?;
    let lake_store: Arc<dyn ObjectStore> = match &scope.read_cache {
        Some(cache) => cache.clone(),
        None => lake.object_store(),
    };
    runtime.register_object_store(lake.object_store_url().as_ref(), lake_store);
    let catalogs = SessionCatalogs::new(Arc::new(catalog), api_database(scope.org, scope.zone));
    let mut state = SessionStateBuilder::new()
        .with_config(config)
        .with_catalog_list(Arc::new(catalogs))
        .with_runtime_env(runtime)
        .with_default_features()
        .with_physical_optimizer_rules(lake_physical_rules());
    if let Some(cluster) = scope.cluster {
        state = cluster.coordinate(state)?;
    }
    let state = state.build();
    let context = SessionContext::new_with_state(state);
    super::bounded_functions::bound_functions(&context);
    context.add_analyzer_rule(Arc::new(super::literal_lists::LiteralLists));
    Ok(context)
}

/// One database of the session: table and view names known, providers
/// built on demand.
struct LakeSchemaProvider {
    store: Store,
    /// The catalog the session was made from: its tables and views, and
    /// their file lists.
    snapshot: Arc<CatalogSnapshot>,
    object_store_url: ObjectStoreUrl,
    database: String,
    database_id: String,
    read_scope: ServiceClientScope,
    strings: StringColumns,
}

impl std::fmt::Debug for LakeSchemaProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LakeSchemaProvider")
            .field("database", &self.database)
            .field(
                "entries",
                &self.snapshot.names_in(&self.database_id).count(),
            )
            .finish()
    }
}

#[async_trait]
impl SchemaProvider for LakeSchemaProvider {
    /// What catalog listings (`information_schema`, `SHOW TABLES`) show: none
    /// of a database the caller may not read at all. A statement naming one
    /// of its tables still resolves it, so it meets the spec's 403 in
    /// `scan()`, not "table not found".
    fn table_names(&self) -> Vec<String> {
        if self.read_scope == ServiceClientScope::Nothing {
            return Vec::new();
        }
        self.snapshot
            .names_in(&self.database_id)
            .map(str::to_string)
            .collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        let external = |e: Box<dyn std::error::Error + Send + Sync>| DataFusionError::External(e);
        if let Some(view) = self.snapshot.view(&self.database_id, name) {
            let schema =
                lake::schema_from_json(&view.schema_json).map_err(|e| external(Box::new(e)))?;
            let schema = self.strings.read_schema(&schema);
            let provider = LakeViewProvider::new(&self.database, view.clone(), &schema);
            return Ok(Some(Arc::new(provider)));
        }
        let Some(table) = self.snapshot.table(&self.database_id, name) else {
            return Ok(None);
        };
        let file_schema =
            lake::schema_from_json(&table.schema_json).map_err(|e| external(Box::new(e)))?;
        let files = self
            .snapshot
            .files(&self.store, &table.id)
            .await
            .map_err(|e| external(Box::new(e)))?;
        Ok(Some(Arc::new(LakeTableProvider::new(
            &self.database,
            table.clone(),
            file_schema,
            self.strings,
            files,
            self.read_scope.clone(),
            self.object_store_url.clone(),
        ))))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.snapshot.table(&self.database_id, name).is_some()
            || self.snapshot.view(&self.database_id, name).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_count_wins_else_the_cores_on_disk_and_more_on_s3() {
        let cores = crate::runtime::cores();
        let dir = tempfile::tempdir().unwrap();
        let on_disk = Lake::local(dir.path()).unwrap();
        let on_s3 = Lake::from_url("s3://a-bucket/lake").unwrap();
        assert_eq!(partitions_for(0, &on_disk), cores);
        assert_eq!(partitions_for(0, &on_s3), (2 * cores).max(8));
        assert_eq!(partitions_for(3, &on_disk), 3);
        assert_eq!(partitions_for(3, &on_s3), 3);
    }
}
