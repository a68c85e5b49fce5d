//! `lakehost import`: an operator's bulk import of parquet files into a lake
//! table, outside the load API (for seeding a lake, benchmarks and tests).
//!
//! Rows are split by their `service_client_id` column into the lake layout,
//! with one `svc$load_id` (a fresh import id) for the whole import, and become
//! visible in one catalog transaction. The table is created on the first
//! import (file columns as in the parquet files, partitioned by
//! `service_client_id` and `svc$load_id`); later imports must match its columns.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use datafusion::{
    arrow::datatypes::{Schema, SchemaRef},
    parquet::arrow::ParquetRecordBatchStreamBuilder,
};
use futures::TryStreamExt as _;
use serde::Serialize;

use crate::{
    auth::ServiceClientScope,
    lake::{self, Lake},
    query::{
        provider::SERVICE_CLIENT_COLUMN,
        table_writer::{LOAD_ID_COLUMN, TableWriter, delete_paths},
    },
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

/// The columns stored in data files: everything but `service_client_id`.
fn file_schema_of(schema: &Schema) -> anyhow::Result<SchemaRef> {
    let service_client = schema
        .field_with_name(SERVICE_CLIENT_COLUMN)
        .map_err(|_| anyhow::anyhow!("the files need a {SERVICE_CLIENT_COLUMN} column"))?;
    if !service_client.data_type().is_integer() {
        bail!(
            "{SERVICE_CLIENT_COLUMN} must be an integer column, not {}",
            service_client.data_type()
        );
    }
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .filter(|f| f.name() != SERVICE_CLIENT_COLUMN)
        .map(|f| f.as_ref().clone())
        .collect();
    Ok(std::sync::Arc::new(Schema::new(fields)))
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
    let mut writer: Option<(TableWriter, SchemaRef)> = None;
    let mut rows = 0u64;
    for path in &request.files {
        let file = tokio::fs::File::open(path)
            .await
            .with_context(|| format!("cannot open {}", path.display()))?;
        let stream = ParquetRecordBatchStreamBuilder::new(file)
            .await
            .with_context(|| format!("{} is not a parquet file", path.display()))?
            .build()?;
        let file_schema =
            file_schema_of(stream.schema()).with_context(|| format!("{}", path.display()))?;
        let (table_writer, expected) = match &mut writer {
            Some(w) => w,
            None => {
                let (schema, partitions) = match &existing {
                    Some(table) => (
                        lake::schema_from_json(&table.schema_json)?,
                        table.partition_columns.clone(),
                    ),
                    None => (
                        file_schema.clone(),
                        vec![
                            SERVICE_CLIENT_COLUMN.to_string(),
                            LOAD_ID_COLUMN.to_string(),
                        ],
                    ),
                };
                let table_writer = TableWriter::new(
                    lake.object_store(),
                    &database.name,
                    &request.table,
                    schema.clone(),
                    partitions,
                    &load_id,
                    ServiceClientScope::All,
                );
                writer.insert((table_writer, schema))
            }
        };
        let same_columns = expected.fields().len() == file_schema.fields().len()
            && expected
                .fields()
                .iter()
                .zip(file_schema.fields())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if !same_columns {
            bail!(
                "{} does not have the table's columns (expected {:?})",
                path.display(),
                expected
                    .fields()
                    .iter()
                    .map(|f| format!("{} {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>()
            );
        }
        let mut stream = stream;
        while let Some(batch) = stream.try_next().await? {
            rows += batch.num_rows() as u64;
            table_writer.write(&batch).await?;
        }
    }
    let (table_writer, schema) = writer.expect("at least one file");
    let files = table_writer.finish().await?;
    let staged: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    let (table, created_table) = match existing {
        Some(table) => (table, false),
        None => {
            let partitions = vec![
                SERVICE_CLIENT_COLUMN.to_string(),
                LOAD_ID_COLUMN.to_string(),
            ];
            let created = store
                .create_table(
                    &database.id,
                    &request.table,
                    &lake::schema_to_json(&schema),
                    &partitions,
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
