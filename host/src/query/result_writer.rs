//! Result files: a query's rows written once, as the CSV the spec's signed
//! link serves (header row, every value quoted, NULL as an empty unquoted
//! field so it stays distinguishable from an empty string), streamed batch by
//! batch to the object store: no result is ever held in memory whole.
//! `ResultWriter` also writes the same batches as the typed Arrow copy
//! (`result_arrow.rs`) when `query.typed_results` is on; the CSV never
//! depends on it: a typed copy that fails is dropped, the query goes on.

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::{
    array::{Array, RecordBatch},
    datatypes::Schema,
    util::display::{ArrayFormatter, FormatOptions},
};
use object_store::{ObjectStore, buffered::BufWriter, path::Path};
use tokio::io::AsyncWriteExt as _;

use super::result_arrow::ArrowResultWriter;
use crate::{
    config::ArrowCompression,
    lake::{ResultFormat, result_file_path},
};

/// How cells become strings: SQL-style timestamps, everything else Arrow's text.
fn format_options() -> FormatOptions<'static> {
    FormatOptions::new()
        .with_display_error(true)
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.3f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.3f %Z"))
}

/// Appends `value` as one quoted CSV field.
fn push_quoted(out: &mut Vec<u8>, value: &str) {
    out.push(b'"');
    for byte in value.bytes() {
        if byte == b'"' {
            out.push(b'"');
        }
        out.push(byte);
    }
    out.push(b'"');
}

/// Appends the rows of `batch` as CSV lines (formatters are not `Send`, so
/// this stays synchronous).
fn encode_rows(batch: &RecordBatch, out: &mut Vec<u8>) -> std::io::Result<()> {
    use std::fmt::Write as _;
    let options = format_options();
    let formatters = batch
        .columns()
        .iter()
        .map(|column| ArrayFormatter::try_new(column.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(std::io::Error::other)?;
    let mut cell = String::new();
    for row in 0..batch.num_rows() {
        for (i, (column, formatter)) in batch.columns().iter().zip(&formatters).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if !column.is_null(row) {
                cell.clear();
                write!(cell, "{}", formatter.value(row)).map_err(std::io::Error::other)?;
                push_quoted(out, &cell);
            }
        }
        out.push(b'\n');
    }
    Ok(())
}

/// Results up to this size are also kept in memory by the writer, so the
/// replica that ran a query can serve its pages without reading the file.
pub const SMALL_RESULT_BYTES: usize = 256 * 1024;

/// Streams a result to `path` as CSV.
pub struct CsvResultWriter {
    writer: BufWriter,
    path: Path,
    rows: u64,
    bytes: u64,
    buffer: Vec<u8>,
    /// Every byte written so far, while the result is small.
    copy: Option<Vec<u8>>,
}

/// A finished result file.
#[derive(Debug, Clone)]
pub struct WrittenResult {
    pub rows: u64,
    pub bytes: u64,
    /// The whole CSV, when it is at most `SMALL_RESULT_BYTES`.
    pub small: Option<Bytes>,
}

impl CsvResultWriter {
    /// Starts the file and writes the header row (no header for a result
    /// without columns: its CSV is empty).
    pub async fn create(
        store: Arc<dyn ObjectStore>,
        path: &str,
        schema: &Schema,
    ) -> std::io::Result<Self> {
        let path = Path::from(path);
        let mut writer = Self {
            writer: BufWriter::new(store, path.clone()),
            path,
            rows: 0,
            bytes: 0,
            buffer: Vec::with_capacity(64 * 1024),
            copy: Some(Vec::new()),
        };
        if !schema.fields().is_empty() {
            for (i, field) in schema.fields().iter().enumerate() {
                if i > 0 {
                    writer.buffer.push(b',');
                }
                push_quoted(&mut writer.buffer, field.name());
            }
            writer.buffer.push(b'\n');
            writer.flush_buffer().await?;
        }
        Ok(writer)
    }

    async fn flush_buffer(&mut self) -> std::io::Result<()> {
        if let Some(copy) = &mut self.copy {
            if copy.len() + self.buffer.len() <= SMALL_RESULT_BYTES {
                copy.extend_from_slice(&self.buffer);
            } else {
                self.copy = None;
            }
        }
        self.writer.write_all(&self.buffer).await?;
        self.bytes += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    pub async fn write(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        if batch.num_columns() == 0 {
            return Ok(());
        }
        encode_rows(batch, &mut self.buffer)?;
        self.rows += batch.num_rows() as u64;
        if self.buffer.len() >= 1 << 20 {
            self.flush_buffer().await?;
        }
        Ok(())
    }

    /// Completes the upload.
    pub async fn finish(mut self) -> std::io::Result<WrittenResult> {
        self.flush_buffer().await?;
        self.writer.shutdown().await?;
        Ok(WrittenResult {
            rows: self.rows,
            bytes: self.bytes,
            small: self.copy.map(Bytes::from),
        })
    }

    /// Abandons the upload (cancellation, failure).
    pub async fn abort(mut self) {
        let _ = self.writer.abort().await;
        tracing::debug!(path = %self.path, "result upload abandoned");
    }
}

/// A result's files: the CSV at its result path and, when typed copies are
/// kept, the Arrow stream beside it.
pub struct ResultWriter {
    csv: CsvResultWriter,
    arrow: Option<ArrowResultWriter>,
}

impl ResultWriter {
    /// Starts the CSV at `csv_path` and, when `typed` says how to compress
    /// it, its Arrow copy.
    pub async fn create(
        store: Arc<dyn ObjectStore>,
        csv_path: &str,
        schema: &Schema,
        typed: Option<ArrowCompression>,
    ) -> std::io::Result<Self> {
        let csv = CsvResultWriter::create(store.clone(), csv_path, schema).await?;
        let arrow = if let Some(compression) = typed {
            let path = result_file_path(csv_path, ResultFormat::Arrow);
            match ArrowResultWriter::create(store, &path, schema, compression).await {
                Ok(writer) => Some(writer),
                Err(e) => {
                    tracing::warn!(%path, error = %e, "result kept without its typed copy");
                    None
                }
            }
        } else {
            None
        };
        Ok(Self { csv, arrow })
    }

    pub async fn write(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        if batch.num_columns() == 0 {
            return Ok(());
        }
        self.csv.write(batch).await?;
        if let Some(arrow) = &mut self.arrow
            && let Err(e) = arrow.write(batch).await
        {
            tracing::warn!(error = %e, "result kept without its typed copy");
            if let Some(arrow) = self.arrow.take() {
                arrow.abort().await;
            }
        }
        Ok(())
    }

    /// Completes both files (the typed copy first: a CSV that then fails
    /// fails the query, whose end deletes every file of the result).
    pub async fn finish(self) -> std::io::Result<WrittenResult> {
        if let Some(arrow) = self.arrow
            && let Err(e) = arrow.finish().await
        {
            tracing::warn!(error = %e, "result kept without its typed copy");
        }
        self.csv.finish().await
    }

    /// Abandons both uploads (cancellation, failure).
    pub async fn abort(self) {
        if let Some(arrow) = self.arrow {
            arrow.abort().await;
        }
        self.csv.abort().await;
    }
}
