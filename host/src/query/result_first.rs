//! A result written in a typed format first (`Prefer: result-format=arrow`
//! or `parquet`): while the query runs, its Arrow IPC stream (on a task of
//! its own, `TypedCopyTask`) or its Parquet file (row groups on blocking
//! threads, `parquet_row_groups.rs`) is the result, and its CSV is made
//! text only while it is at most `SMALL_RESULT_BYTES`, so that a small
//! result's pages need no conversion. A bigger result's CSV is made from
//! the typed file when first asked for (`typed_conversions::ensure_csv`).
//!
//! The typed file is the result here: its failure fails the query. A
//! result without its CSV always has its typed file in the lake (the CSV
//! is made from it there).

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::{
    array::RecordBatch,
    datatypes::{Schema, SchemaRef},
};
use object_store::{ObjectStore, ObjectStoreExt as _, path::Path};

use super::{
    csv_text::encode_rows,
    parquet_row_groups::ParquetRowGroupWriter,
    result_arrow::{TypedCopy, TypedCopyTask},
    result_parquet::parquet_file,
    result_writer::{WrittenResult, push_header},
};
use crate::{
    config::{ArrowCompression, SMALL_RESULT_BYTES},
    engine::layout::{plain_batch, without_view_types},
    lake::{ResultFormat, result_file_path},
    store::queries::ResultInRow,
};

/// The format a result is written in first, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstFormat {
    Arrow(ArrowCompression),
    Parquet,
}

/// The typed file being written.
enum FirstFile {
    Arrow(TypedCopyTask),
    /// With the plain types it is written in (no view types: the same
    /// schema as a Parquet copy made from the Arrow copy).
    Parquet(Box<ParquetRowGroupWriter>, SchemaRef),
    /// The Arrow file's task failed (the write that found it said why).
    Failed,
}

/// Writes a result typed first: its typed file, and its CSV while small.
pub struct TypedFirstWriter {
    file: FirstFile,
    /// The CSV so far, while it is at most `SMALL_RESULT_BYTES`.
    small_csv: Option<Vec<u8>>,
    rows: u64,
    in_row_limit: usize,
    store: Arc<dyn ObjectStore>,
    csv_path: String,
}

impl TypedFirstWriter {
    /// Starts the typed file beside `csv_path` (a small Arrow file, at
    /// most `in_row_limit`, is handed back for the store's row).
    pub async fn create(
        store: Arc<dyn ObjectStore>,
        csv_path: &str,
        schema: &Schema,
        first: FirstFormat,
        in_row_limit: usize,
    ) -> std::io::Result<Self> {
        let file = match first {
            FirstFormat::Arrow(compression) => {
                let path = result_file_path(csv_path, ResultFormat::Arrow);
                let task =
                    TypedCopyTask::start(store.clone(), path, schema, compression, in_row_limit);
                FirstFile::Arrow(task)
            }
            FirstFormat::Parquet => {
                let plain = Arc::new(without_view_types(schema));
                let path = Path::from(result_file_path(csv_path, ResultFormat::Parquet));
                let writer = parquet_file(store.clone(), &path, plain.clone())
                    .map_err(std::io::Error::other)?;
                FirstFile::Parquet(Box::new(writer), plain)
            }
        };
        let mut header = Vec::new();
        push_header(&mut header, schema);
        Ok(Self {
            file,
            small_csv: Some(header),
            rows: 0,
            in_row_limit,
            store,
            csv_path: csv_path.to_string(),
        })
    }

    pub async fn write(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        if batch.num_columns() == 0 {
            return Ok(());
        }
        self.rows += batch.num_rows() as u64;
        match &mut self.file {
            FirstFile::Arrow(task) => {
                if !task.write(batch).await {
                    return Err(self.arrow_failure().await);
                }
            }
            FirstFile::Parquet(writer, plain) => {
                let batch = plain_batch(batch, plain).map_err(std::io::Error::other)?;
                writer.write(&batch).await.map_err(std::io::Error::other)?;
            }
            FirstFile::Failed => return Err(failed()),
        }
        if let Some(text) = &mut self.small_csv {
            encode_rows(batch, text).map_err(std::io::Error::other)?;
            if text.len() > SMALL_RESULT_BYTES {
                self.small_csv = None;
            }
        }
        Ok(())
    }

    /// Completes the typed file, and the CSV when it stayed small (in the
    /// row, or put in the lake whole). `bytes` is the CSV's size, or the
    /// typed file's without a CSV.
    pub async fn finish(self) -> std::io::Result<WrittenResult> {
        let Self {
            file,
            small_csv,
            rows,
            in_row_limit,
            store,
            csv_path,
        } = self;
        let (typed_bytes, arrow_in_row) = match file {
            FirstFile::Arrow(task) => match task.finish().await? {
                TypedCopy::Stored(size) => (size, None),
                TypedCopy::InRow(bytes) => (bytes.len() as u64, Some(bytes)),
            },
            FirstFile::Parquet(writer, _) => {
                (writer.close().await.map_err(std::io::Error::other)?, None)
            }
            FirstFile::Failed => return Err(failed()),
        };
        let Some(csv) = small_csv.map(Bytes::from) else {
            if let Some(arrow) = arrow_in_row {
                // Without a CSV the typed file is in the lake.
                let path = result_file_path(&csv_path, ResultFormat::Arrow);
                store
                    .put(&Path::from(path), arrow.into())
                    .await
                    .map_err(std::io::Error::other)?;
            }
            return Ok(WrittenResult {
                rows,
                bytes: typed_bytes,
                small: None,
                in_row: ResultInRow::default(),
            });
        };
        let in_row = (csv.len() <= in_row_limit).then(|| csv.clone());
        if in_row.is_none() {
            let path = Path::from(csv_path.as_str());
            store
                .put(&path, csv.clone().into())
                .await
                .map_err(std::io::Error::other)?;
        }
        Ok(WrittenResult {
            rows,
            bytes: csv.len() as u64,
            small: Some(csv),
            in_row: ResultInRow {
                csv: in_row,
                arrow: arrow_in_row,
            },
        })
    }

    /// Abandons the typed file (a Parquet file never closed never appears).
    pub async fn abort(self) {
        if let FirstFile::Arrow(task) = self.file {
            task.abort().await;
        }
    }
}

impl TypedFirstWriter {
    /// Why the Arrow file's task ended before its feed did; the writer is
    /// left `Failed`.
    async fn arrow_failure(&mut self) -> std::io::Error {
        match std::mem::replace(&mut self.file, FirstFile::Failed) {
            FirstFile::Arrow(task) => task.outcome().await.err().unwrap_or_else(failed),
            _ => failed(),
        }
    }
}

fn failed() -> std::io::Error {
    std::io::Error::other("the result's typed file failed")
}
