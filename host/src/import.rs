//! `lakehost import`: an operator's bulk import of parquet files into a lake
//! table, outside the load API (for seeding a lake, benchmarks and tests).
//!
//! Rows are split by their `service_client_id` column into the lake layout,
//! with one `svc$load_id` (a fresh import id) for the whole import, and become
//! visible in one catalog transaction. The table is created on the first
//! import, laid out as a load's table is (`engine::layout`); later imports
//! must match its columns.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use datafusion::{arrow::datatypes::Schema, parquet::arrow::ParquetRecordBatchStreamBuilder};
use futures::{StreamExt as _, TryStreamExt as _};
use serde::Serialize;

use crate::{
    auth::ServiceClientScope,
    engine::{
        EngineError,
        layout::TableLayout,
        table_writer::{TableWriteError, delete_paths},
        write::write_batches,
    },
    lake::{self, Lake},
    store::{Store, new_id},
};

pub struct ImportRequest {
    pub org: String,
    pub zone: Option<String>,
    pub database: String,
    pub table: String,
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImportSummary {
    pub database: String,
    pub table: String,
    pub load_id: String,
    pub rows: u64,
    pub files: usize,
    pub created_table: bool,
}

/// Same column names and types, in the same order.
fn same_columns(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
}

pub async fn import_parquet(
    store: &Store,
    lake: &Lake,
    request: &ImportRequest,
    now: i64,
) -> anyhow::Result<ImportSummary> {
    if request.files.is_empty() {
        bail!("no files to import");
    }
    let database = store
        .database(&request.org, request.zone.as_deref(), &request.database)
        .await?
        .with_context(|| {
            format!(
                "database {} does not exist for org {}{}",
                request.database,
                request.org,
                request
                    .zone
                    .as_deref()
                    .map(|z| format!(" zone {z}"))
                    .unwrap_or_default()
            )
        })?;
    let existing = store.table(&database.id, &request.table).await?;
    let load_id = new_id();
    // The table's layout: the existing table's, else one made from the
    // first file the way every new lake table's is.
    let mut layout = match &existing {
        Some(table) => Some(TableLayout::of(table)?),
        None => None,
    };
    // Every file is opened and its columns checked before any row is written.
    let mut streams = Vec::with_capacity(request.files.len());
    for path in &request.files {
        let file = tokio::fs::File::open(path)
            .await
            .with_context(|| format!("cannot open {}", path.display()))?;
        let stream = ParquetRecordBatchStreamBuilder::new(file)
            .await
            .with_context(|| format!("{} is not a parquet file", path.display()))?
            .build()?;
        let file_layout = TableLayout::for_loads(stream.schema(), &[])
            .with_context(|| format!("{}", path.display()))?;
        let expected = layout.get_or_insert(file_layout.clone());
        if !same_columns(&expected.file_schema, &file_layout.file_schema) {
            bail!(
                "{} does not have the table's columns (expected {:?})",
                path.display(),
                expected
                    .file_schema
                    .fields()
                    .iter()
                    .map(|f| format!("{} {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>()
            );
        }
        streams.push(stream.map_err(|e| EngineError::from(TableWriteError::from(e))));
    }
    let layout = layout.expect("at least one file");
    let writer = layout.writer(
        lake.object_store(),
        (&database.name, &request.table),
        &load_id,
        ServiceClientScope::All,
    );
    let written = write_batches(futures::stream::iter(streams).flatten(), writer).await?;
    let staged = written.paths();
    let (files, rows) = (written.files, written.rows);
    let (table, created_table) = match existing {
        Some(table) => (table, false),
        None => {
            let created = store
                .create_table(
                    &database.id,
                    &request.table,
                    &lake::schema_to_json(&layout.file_schema),
                    &layout.partition_columns,
                    now,
                )
                .await;
            match created {
                Ok(table) => (table, true),
                Err(e) => {
                    delete_paths(lake.object_store().as_ref(), &staged).await;
                    return Err(e.into());
                }
            }
        }
    };
    if let Err(e) = store.commit_files(&table.id, &files, now).await {
        delete_paths(lake.object_store().as_ref(), &staged).await;
        if created_table {
            let _ = store.drop_table(&database.id, &table.name, now).await;
        }
        return Err(e.into());
    }
    Ok(ImportSummary {
        database: database.name,
        table: table.name,
        load_id,
        rows,
        files: files.len(),
        created_table,
    })
}
