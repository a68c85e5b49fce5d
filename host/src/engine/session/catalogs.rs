//! The catalogs a session resolves: `lakehost`, also under the name of the
//! database its client connected to (`api_database`: the org, or
//! `zone.org`), since Postgres tools write three-part names with it
//! (dbt's `"demo"."demo_sandbox"."model"`, Superset's physical datasets).
//! Listings (`information_schema`) show `lakehost` once; any other catalog
//! name fails planning with a message that says which names to use.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::{
    catalog::{CatalogProvider, CatalogProviderList, SchemaProvider, TableProvider},
    common::DataFusionError,
};

use super::CATALOG;

/// The name of the database a client of the Org API of `org` (or of its
/// zone `zone`) connects to, as the Postgres listener names it: `demo`, or
/// `lab.demo` for zone `lab`. Three-part names may use it as their catalog.
pub fn api_database(org: &str, zone: Option<&str>) -> String {
    match zone {
        Some(zone) => format!("{zone}.{org}"),
        None => org.to_string(),
    }
}

/// Why a three-part name's catalog is refused.
pub fn foreign_catalog_message(catalog: &str, own: &str) -> String {
    format!(
        "catalog '{catalog}' is not this connection's database: name tables as table, \
         database.table, {CATALOG}.database.table or {own}.database.table"
    )
}

/// The session's catalog list: one catalog, under two names.
#[derive(Debug)]
pub(super) struct SessionCatalogs {
    lakehost: Arc<dyn CatalogProvider>,
    /// `api_database` of the session's org and zone.
    own: String,
}

impl SessionCatalogs {
    pub(super) fn new(lakehost: Arc<dyn CatalogProvider>, own: String) -> Self {
        Self { lakehost, own }
    }
}

impl CatalogProviderList for SessionCatalogs {
    /// The list is fixed when the session is made: statements never add
    /// catalogs (`engine::statement` refuses CREATE DATABASE and its like),
    /// so a catalog registered later is not kept.
    fn register_catalog(
        &self,
        _name: String,
        _catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        None
    }

    fn catalog_names(&self) -> Vec<String> {
        vec![CATALOG.to_string()]
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        if name == CATALOG || name == self.own {
            return Some(self.lakehost.clone());
        }
        Some(Arc::new(ForeignCatalog {
            message: foreign_catalog_message(name, &self.own),
        }))
    }
}

/// Any other catalog name: each of its tables fails to resolve with the
/// message (DataFusion's own would be "table not found").
#[derive(Debug)]
struct ForeignCatalog {
    message: String,
}

impl CatalogProvider for ForeignCatalog {
    fn schema_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn schema(&self, _name: &str) -> Option<Arc<dyn SchemaProvider>> {
        Some(Arc::new(ForeignSchema {
            message: self.message.clone(),
        }))
    }
}

#[derive(Debug)]
struct ForeignSchema {
    message: String,
}

#[async_trait]
impl SchemaProvider for ForeignSchema {
    fn table_names(&self) -> Vec<String> {
        Vec::new()
    }

    async fn table(&self, _name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        Err(DataFusionError::Plan(self.message.clone()))
    }

    fn table_exist(&self, _name: &str) -> bool {
        false
    }
}
