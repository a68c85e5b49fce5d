//! `TableWriter`: rows written into a lake table (by CREATE TABLE AS and
//! INSERT, a load's insert step, an import, a daily refresh) become parquet
//! files in the lake layout, one file per partition value combination.
//!
//! The writer only stages files; they become visible when the writing job
//! commits them to the catalog with its end. Every row must carry a
//! `service_client_id` the writer may write; one that does not fails the
//! whole write (nothing is committed, staged files are deleted).
//! `svc$load_id`, where the table has it, is the writing load's, import's or
//! query's id.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use datafusion::{
    arrow::{
        array::{Array, AsArray as _, RecordBatch, UInt32Array},
        compute::{cast, take},
        datatypes::{DataType, Int64Type, SchemaRef},
    },
    parquet::arrow::AsyncArrowWriter,
};
use object_store::{ObjectStore, ObjectStoreExt as _, buffered::BufWriter, path::Path};

use super::layout::{LOAD_ID_COLUMN, SERVICE_CLIENT_COLUMN};
use crate::{auth::ServiceClientScope, store::catalog::NewDataFile};

/// Distinct partition value combinations one statement may write.
pub const MAX_PARTITIONS: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum TableWriteError {
    #[error("row of service client {0}, which the caller may not write")]
    Denied(i64),
    #[error("every row needs a non-null service_client_id")]
    MissingServiceClient,
    #[error("column {0} is missing from the rows written")]
    MissingColumn(String),
    #[error("more than {MAX_PARTITIONS} distinct partition values in one statement")]
    TooManyPartitions,
    #[error("arrow: {0}")]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    #[error("parquet: {0}")]
    Parquet(#[from] datafusion::parquet::errors::ParquetError),
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
}

struct OpenFile {
    path: String,
    writer: AsyncArrowWriter<BufWriter>,
    rows: i64,
    partition_values: BTreeMap<String, String>,
    service_client: Option<i64>,
}

pub struct TableWriter {
    store: Arc<dyn ObjectStore>,
    /// `<database>/<table>`.
    prefix: String,
    file_schema: SchemaRef,
    partition_columns: Vec<String>,
    load_id: String,
    /// What each file's name starts with: the load id, unless `named`.
    file_stem: String,
    write_scope: ServiceClientScope,
    open: HashMap<Vec<String>, OpenFile>,
}

/// One path segment per partition value, escaped so a value never adds a level.
fn path_segment(column: &str, value: &str) -> String {
    let escaped: String = url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
    format!("{column}={escaped}")
}

impl TableWriter {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        database: &str,
        table: &str,
        file_schema: SchemaRef,
        partition_columns: Vec<String>,
        load_id: &str,
        write_scope: ServiceClientScope,
    ) -> Self {
        Self {
            store,
            prefix: format!("{database}/{table}"),
            file_schema,
            partition_columns,
            load_id: load_id.to_string(),
            file_stem: load_id.to_string(),
            write_scope,
            open: HashMap::new(),
        }
    }

    /// Files named `<stem>-<n>.parquet` instead of after the load id: a
    /// commit's attempts write files of their own, so one that lost its lease
    /// and deletes what it wrote never deletes what the next attempt recorded.
    pub fn named(mut self, stem: impl Into<String>) -> Self {
        self.file_stem = stem.into();
        self
    }

    /// The value of every partition column for each row, as text.
    fn partition_values(&self, batch: &RecordBatch) -> Result<Vec<Vec<String>>, TableWriteError> {
        let rows = batch.num_rows();
        let mut columns: Vec<Vec<String>> = Vec::with_capacity(self.partition_columns.len());
        for name in &self.partition_columns {
            if name == LOAD_ID_COLUMN {
                columns.push(vec![self.load_id.clone(); rows]);
                continue;
            }
            let column = batch
                .column_by_name(name)
                .ok_or_else(|| TableWriteError::MissingColumn(name.clone()))?;
            if name == SERVICE_CLIENT_COLUMN {
                let ids = cast(column, &DataType::Int64)?;
                let ids = ids.as_primitive::<Int64Type>();
                let mut values = Vec::with_capacity(rows);
                for i in 0..rows {
                    if ids.is_null(i) {
                        return Err(TableWriteError::MissingServiceClient);
                    }
                    let id = ids.value(i);
                    // Rows of 0 are readable only by callers who read every
                    // service client (0 is never in an "own" list).
                    let allowed = u32::try_from(id).is_ok_and(|id| self.write_scope.allows(id));
                    if !allowed {
                        return Err(TableWriteError::Denied(id));
                    }
                    values.push(id.to_string());
                }
                columns.push(values);
            } else {
                let text = cast(column, &DataType::Utf8)?;
                let text = text.as_string::<i32>();
                columns.push(
                    (0..rows)
                        .map(|i| {
                            if text.is_null(i) {
                                String::new()
                            } else {
                                text.value(i).to_string()
                            }
                        })
                        .collect(),
                );
            }
        }
        Ok((0..rows)
            .map(|i| columns.iter().map(|c| c[i].clone()).collect())
            .collect())
    }

    /// The file columns of `batch`, by name, in the table's types.
    fn file_batch(&self, batch: &RecordBatch) -> Result<RecordBatch, TableWriteError> {
        let columns = self
            .file_schema
            .fields()
            .iter()
            .map(|field| {
                let column = batch
                    .column_by_name(field.name())
                    .ok_or_else(|| TableWriteError::MissingColumn(field.name().clone()))?;
                if column.data_type() == field.data_type() {
                    Ok(column.clone())
                } else {
                    Ok(cast(column, field.data_type())?)
                }
            })
            .collect::<Result<Vec<_>, TableWriteError>>()?;
        Ok(RecordBatch::try_new(self.file_schema.clone(), columns)?)
    }

    pub async fn write(&mut self, batch: &RecordBatch) -> Result<(), TableWriteError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let keys = self.partition_values(batch)?;
        let file_batch = self.file_batch(batch)?;
        let mut groups: HashMap<&Vec<String>, Vec<u32>> = HashMap::new();
        for (row, key) in keys.iter().enumerate() {
            groups.entry(key).or_default().push(row as u32);
        }
        for (key, rows) in groups {
            let part = if rows.len() == batch.num_rows() {
                file_batch.clone()
            } else {
                let indices = UInt32Array::from(rows);
                let columns = file_batch
                    .columns()
                    .iter()
                    .map(|c| take(c.as_ref(), &indices, None))
                    .collect::<Result<Vec<_>, _>>()?;
                RecordBatch::try_new(self.file_schema.clone(), columns)?
            };
            let file = self.file_for(key)?;
            file.rows += part.num_rows() as i64;
            file.writer.write(&part).await?;
        }
        Ok(())
    }

    fn file_for(&mut self, key: &[String]) -> Result<&mut OpenFile, TableWriteError> {
        if !self.open.contains_key(key) {
            if self.open.len() >= MAX_PARTITIONS {
                return Err(TableWriteError::TooManyPartitions);
            }
            let mut path = self.prefix.clone();
            let mut partition_values = BTreeMap::new();
            let mut service_client = None;
            for (column, value) in self.partition_columns.iter().zip(key) {
                path.push('/');
                path.push_str(&path_segment(column, value));
                partition_values.insert(column.clone(), value.clone());
                if column == SERVICE_CLIENT_COLUMN {
                    service_client = value.parse().ok();
                }
            }
            path.push_str(&format!("/{}-{}.parquet", self.file_stem, self.open.len()));
            let object = BufWriter::new(self.store.clone(), Path::from(path.as_str()));
            let writer = AsyncArrowWriter::try_new(object, self.file_schema.clone(), None)?;
            self.open.insert(
                key.to_vec(),
                OpenFile {
                    path,
                    writer,
                    rows: 0,
                    partition_values,
                    service_client,
                },
            );
        }
        Ok(self.open.get_mut(key).expect("just inserted"))
    }

    /// Closes every file; returns them for the catalog, in path order.
    pub async fn finish(self) -> Result<Vec<NewDataFile>, TableWriteError> {
        let mut files = Vec::with_capacity(self.open.len());
        let mut written = Vec::new();
        let mut failure = None;
        for (_, file) in self.open {
            if failure.is_some() {
                continue;
            }
            match file.writer.close().await {
                Ok(_) => {
                    written.push(file.path.clone());
                    match self.store.head(&Path::from(file.path.as_str())).await {
                        Ok(meta) => files.push(NewDataFile {
                            path: file.path,
                            service_client_id: file.service_client,
                            partition_values: file.partition_values,
                            row_count: file.rows,
                            size_bytes: meta.size as i64,
                            load_id: Some(self.load_id.clone()),
                        }),
                        Err(e) => failure = Some(TableWriteError::from(e)),
                    }
                }
                Err(e) => failure = Some(e.into()),
            }
        }
        if let Some(failure) = failure {
            delete_paths(self.store.as_ref(), &written).await;
            return Err(failure);
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }

    /// Drops the open files without making any of them a complete object.
    pub async fn abort(self) {
        for (_, file) in self.open {
            // An unfinished multipart upload is aborted when its writer drops.
            drop(file.writer);
        }
    }
}

/// Deletes staged or released files; a failure is logged (the catalog no
/// longer lists them, so they are unreachable garbage, not wrong data).
pub async fn delete_paths(store: &dyn ObjectStore, paths: &[String]) {
    for path in paths {
        if let Err(e) = store.delete(&Path::from(path.as_str())).await {
            tracing::warn!(%path, error = %e, "could not delete a data file");
        }
    }
}
