//! `pg_catalog.pg_settings` from lakehost's settings (`pg::settings`, the
//! list `SHOW` answers from), in place of datafusion-pg-catalog's, which
//! holds `standard_conforming_strings` only: pgjdbc reads `max_index_keys`
//! before it lists keys, DBeaver reads settings by name on connect.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::{
    arrow::{
        array::{ArrayRef, BooleanArray, Int32Array, StringArray},
        datatypes::{DataType, Field, Schema},
        record_batch::RecordBatch,
    },
    catalog::{CatalogProvider, MemTable, SchemaProvider, TableProvider},
    common::internal_err,
    error::DataFusionError,
};

use crate::pg::settings::SETTINGS;

/// Puts lakehost's `pg_settings` in `catalog`'s `pg_catalog` schema (made by
/// `setup_pg_catalog` before).
pub fn overlay(catalog: &dyn CatalogProvider) -> Result<(), DataFusionError> {
    let Some(inner) = catalog.schema("pg_catalog") else {
        return internal_err!("no pg_catalog schema to put pg_settings in");
    };
    let settings = Arc::new(settings_table()?);
    catalog.register_schema("pg_catalog", Arc::new(WithSettings { inner, settings }))?;
    Ok(())
}

/// The settings as Postgres 15's `pg_settings` view has them: read-only
/// (`context` internal), each at its default.
fn settings_table() -> Result<MemTable, DataFusionError> {
    let text = |name: &str| Field::new(name, DataType::Utf8, true);
    let schema = Arc::new(Schema::new(vec![
        text("name"),
        text("setting"),
        text("unit"),
        text("category"),
        text("short_desc"),
        text("extra_desc"),
        text("context"),
        text("vartype"),
        text("source"),
        text("min_val"),
        text("max_val"),
        text("enumvals"),
        text("boot_val"),
        text("reset_val"),
        text("sourcefile"),
        Field::new("sourceline", DataType::Int32, true),
        Field::new("pending_restart", DataType::Boolean, true),
    ]));
    let rows = SETTINGS.len();
    let column = |value: &dyn Fn(usize) -> Option<&'static str>| -> ArrayRef {
        Arc::new((0..rows).map(value).collect::<StringArray>())
    };
    let none = |_: usize| -> Option<&'static str> { None };
    let columns: Vec<ArrayRef> = vec![
        column(&|i| Some(SETTINGS[i].name)),
        column(&|i| Some(SETTINGS[i].value)),
        column(&none),
        column(&none),
        column(&|i| Some(SETTINGS[i].description)),
        column(&none),
        column(&|_| Some("internal")),
        column(&|i| Some(SETTINGS[i].vartype)),
        column(&|_| Some("default")),
        column(&none),
        column(&none),
        column(&none),
        column(&|i| Some(SETTINGS[i].value)),
        column(&|i| Some(SETTINGS[i].value)),
        column(&none),
        Arc::new(Int32Array::new_null(rows)),
        Arc::new(BooleanArray::from(vec![false; rows])),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    MemTable::try_new(schema, vec![vec![batch]])
}

/// datafusion-pg-catalog's `pg_catalog` schema with lakehost's
/// `pg_settings`.
#[derive(Debug)]
struct WithSettings {
    inner: Arc<dyn SchemaProvider>,
    settings: Arc<dyn TableProvider>,
}

#[async_trait]
impl SchemaProvider for WithSettings {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        if name.eq_ignore_ascii_case("pg_settings") {
            return Ok(Some(self.settings.clone()));
        }
        self.inner.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}
