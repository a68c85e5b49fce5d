//! `lakehost import`: an operator's bulk import of parquet files into a lake
//! table, outside the load API (for seeding a lake, benchmarks and tests).
//!
//! Rows are split by their `service_client_id` column into the lake layout,
//! with one `svc$load_id` (a fresh import id) for the whole import, and become
//! visible in one catalog transaction. The table is created on the first
//! import, laid out as a load's table is (`engine::layout`); later imports
//! must match its columns.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use datafusion::{
    arrow::{array::RecordBatch, datatypes::Schema},
    parquet::arrow::ParquetRecordBatchStreamBuilder,
};
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use serde::Serialize;

use crate::{
    auth::ServiceClientScope,
    engine::{
        EngineError,
        layout::{TableLayout, without_view_types},
        table_writer::delete_paths,
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

/// Same column names and types, in the same order (view types read as the
/// plain types: tables made before the layout stripped them hold them).
fn same_columns(a: &Schema, b: &Schema) -> bool {
    let (a, b) = (without_view_types(a), without_view_types(b));
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
}

/// The batches of one file, once its columns are the table's; every error
/// names the file.
async fn open_checked(
    path: &Path,
    layout: &TableLayout,
) -> Result<impl Stream<Item = Result<RecordBatch, EngineError>>, EngineError> {
    let shown = path.display().to_string();
    let invalid = |why: String| EngineError::Invalid(format!("{shown}: {why}"));
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| invalid(format!("cannot open: {e}")))?;
    let stream = ParquetRecordBatchStreamBuilder::new(file)
        .await
        .map_err(|e| invalid(format!("not a parquet file: {e}")))?
        .build()
        .map_err(|e| invalid(e.to_string()))?;
    let file_layout =
        TableLayout::for_loads(stream.schema(), &[]).map_err(|e| invalid(e.to_string()))?;
    if !same_columns(&layout.file_schema, &file_layout.file_schema) {
        let expected: Vec<String> = layout
            .file_schema
            .fields()
            .iter()
            .map(|f| format!("{} {}", f.name(), f.data_type()))
            .collect();
        return Err(invalid(format!(
            "does not have the table's columns (expected {expected:?})"
        )));
    }
    Ok(stream.map_err(move |source| EngineError::Read {
        file: shown.clone(),
        source,
    }))
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
    let layout = match &existing {
        Some(table) => TableLayout::of(table)?,
        None => {
            let first = &request.files[0];
            let file = tokio::fs::File::open(first)
                .await
                .with_context(|| format!("cannot open {}", first.display()))?;
            let builder = ParquetRecordBatchStreamBuilder::new(file)
                .await
                .with_context(|| format!("{} is not a parquet file", first.display()))?;
            TableLayout::for_loads(builder.schema(), &[])
                .with_context(|| format!("{}", first.display()))?
        }
    };
    let writer = layout.writer(
        lake.object_store(),
        (&database.name, &request.table),
        &load_id,
        ServiceClientScope::All,
    );
    // One file open at a time, each checked against the table's columns
    // before its first row is written.
    let batches = futures::stream::iter(&request.files)
        .then(|path| open_checked(path, &layout))
        .try_flatten();
    let written = write_batches(batches, writer).await?;
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

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{DataType, Field};

    use super::*;

    fn schema(types: &[DataType]) -> Schema {
        Schema::new(
            types
                .iter()
                .enumerate()
                .map(|(i, t)| Field::new(format!("c{i}"), t.clone(), true))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn a_table_stored_with_view_types_takes_files_of_plain_types() {
        let stored = schema(&[DataType::Utf8View, DataType::Int64]);
        let file = schema(&[DataType::Utf8, DataType::Int64]);
        assert!(same_columns(&stored, &file));
        assert!(!same_columns(
            &stored,
            &schema(&[DataType::Utf8, DataType::Int32])
        ));
        assert!(!same_columns(&stored, &schema(&[DataType::Utf8])));
    }
}
