//! Result files: a query's rows written once, as the CSV the spec's signed
//! link serves (header row, every value quoted, NULL as an empty unquoted
//! field so it stays distinguishable from an empty string; the text of a
//! cell is `csv_text.rs`'s), streamed batch by
//! batch to the object store: no result is ever held in memory whole.
//! Batches are made text on tasks of their own, a few at a time, and written
//! in their order, so a big result is encoded on every core while the query
//! still runs.
//! `ResultWriter` also has the same batches written as the typed Arrow copy
//! (`result_arrow.rs`, on a task of its own) when `query.typed_results` is
//! on; the CSV never depends on it: a typed copy that fails is dropped, the
//! query goes on.
//! A result may instead be written Arrow or Parquet first (`ResultWriter`,
//! `result_first.rs`).
//! A result whose CSV is at most the writer's `in_row_limit` is never
//! uploaded: its bytes (and its Arrow copy's, when that is as small) come
//! back in `WrittenResult::in_row`, for the job's row in the store
//! (docs/design/small-results.md).

use std::{collections::VecDeque, sync::Arc};

use bytes::Bytes;
use datafusion::arrow::{array::RecordBatch, datatypes::Schema};
use object_store::{ObjectStore, buffered::BufWriter, path::Path};
use tokio::{io::AsyncWriteExt as _, task::JoinHandle};

use super::{
    csv_read_back::reads_back,
    csv_text::{encode_rows, push_quoted},
    result_arrow::{TypedCopy, TypedCopyTask},
    result_first::TypedFirstWriter,
};
use crate::{
    config::{ArrowCompression, SMALL_RESULT_BYTES},
    lake::{ResultFormat, result_file_path},
    store::queries::ResultInRow,
};

/// The typed format a result may be written in first (`TypedCopies::First`).
pub use super::result_first::FirstFormat;

/// Batches being made text at once, ahead of the one written next.
const ENCODING_AHEAD: usize = 4;

/// Batches at most this many rows are made text on the writer's own task:
/// a task of their own would cost more than it saves.
const ENCODE_INLINE_ROWS: usize = 1024;

/// The CSV's header row: every column's name, quoted (none for a result
/// without columns: its CSV is empty).
pub(super) fn push_header(buffer: &mut Vec<u8>, schema: &Schema) {
    if schema.fields().is_empty() {
        return;
    }
    for (i, field) in schema.fields().iter().enumerate() {
        if i > 0 {
            buffer.push(b',');
        }
        push_quoted(buffer, field.name());
    }
    buffer.push(b'\n');
}

/// Streams a result to `path` as CSV.
pub struct CsvResultWriter {
    writer: BufWriter,
    path: Path,
    rows: u64,
    bytes: u64,
    buffer: Vec<u8>,
    /// Every byte written so far, while the result is small.
    copy: Option<Vec<u8>>,
    /// Batches being made text, in the result's order.
    encoding: VecDeque<JoinHandle<std::io::Result<Vec<u8>>>>,
}

/// A finished result file.
#[derive(Debug, Clone)]
pub struct WrittenResult {
    pub rows: u64,
    pub bytes: u64,
    /// The whole CSV, when it is at most `SMALL_RESULT_BYTES`.
    pub small: Option<Bytes>,
    /// The forms kept for the store's row instead of the lake.
    pub in_row: ResultInRow,
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
            encoding: VecDeque::new(),
        };
        if !schema.fields().is_empty() {
            push_header(&mut writer.buffer, schema);
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
        self.rows += batch.num_rows() as u64;
        if batch.num_rows() <= ENCODE_INLINE_ROWS && self.encoding.is_empty() {
            encode_rows(batch, &mut self.buffer).map_err(std::io::Error::other)?;
        } else {
            let batch = batch.clone();
            self.encoding.push_back(tokio::spawn(async move {
                let mut text = Vec::with_capacity(batch.num_rows() * batch.num_columns() * 8);
                encode_rows(&batch, &mut text).map_err(std::io::Error::other)?;
                Ok(text)
            }));
            if self.encoding.len() > ENCODING_AHEAD {
                self.take_encoded().await?;
            }
        }
        if self.buffer.len() >= 1 << 20 {
            self.flush_buffer().await?;
        }
        Ok(())
    }

    /// The oldest batch being made text, appended to the buffer.
    async fn take_encoded(&mut self) -> std::io::Result<()> {
        if let Some(task) = self.encoding.pop_front() {
            let text = task.await.map_err(std::io::Error::other)??;
            self.buffer.extend_from_slice(&text);
        }
        Ok(())
    }

    /// Completes the upload.
    pub async fn finish(self) -> std::io::Result<WrittenResult> {
        self.finish_within(0).await
    }

    /// Completes the CSV: one of at most `in_row_limit` bytes is handed
    /// back in `in_row` and never uploaded; a bigger one's upload completes.
    pub async fn finish_within(mut self, in_row_limit: usize) -> std::io::Result<WrittenResult> {
        while !self.encoding.is_empty() {
            self.take_encoded().await?;
        }
        self.flush_buffer().await?;
        let small = self.copy.map(Bytes::from);
        let in_row = small
            .as_ref()
            .filter(|csv| csv.len() <= in_row_limit)
            .cloned();
        if in_row.is_none() {
            self.writer.shutdown().await?;
        }
        // Else nothing was sent (`SMALL_RESULT_BYTES`): dropping the
        // buffered upload leaves no object.
        Ok(WrittenResult {
            rows: self.rows,
            bytes: self.bytes,
            small,
            in_row: ResultInRow {
                csv: in_row,
                arrow: None,
            },
        })
    }

    /// Abandons the upload (cancellation, failure).
    pub async fn abort(mut self) {
        for task in self.encoding.drain(..) {
            task.abort();
        }
        let _ = self.writer.abort().await;
        tracing::debug!(path = %self.path, "result upload abandoned");
    }
}

/// When a result's typed (Arrow) copy is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypedCopies {
    /// Never (`query.typed_results` off).
    Never,
    /// While the query runs only when its columns do not read back from
    /// its CSV (`csv_read_back::reads_back`); else on first request
    /// (`typed_conversions.rs`), so the CSV's query pays nothing for it.
    OnRequest(ArrowCompression),
    /// While the query runs, whatever its columns.
    WhileRunning(ArrowCompression),
    /// As the result itself (`Prefer: result-format=arrow` or `parquet`):
    /// the typed file is written while the query runs, the CSV only while
    /// it is small (`result_first.rs`).
    First(FirstFormat),
}

impl TypedCopies {
    /// How the copy of a result of `schema` is compressed when it is
    /// written while the query runs; `None` when it is not.
    pub fn while_running(self, schema: &Schema) -> Option<ArrowCompression> {
        match self {
            TypedCopies::Never | TypedCopies::First(FirstFormat::Parquet) => None,
            TypedCopies::OnRequest(_) if reads_back(schema) => None,
            TypedCopies::OnRequest(compression)
            | TypedCopies::WhileRunning(compression)
            | TypedCopies::First(FirstFormat::Arrow(compression)) => Some(compression),
        }
    }
}

/// A result's files, as `TypedCopies` says: written CSV first
/// (`CsvFirstWriter`), or in a typed format first (`TypedFirstWriter`).
pub enum ResultWriter {
    CsvFirst(Box<CsvFirstWriter>),
    TypedFirst(TypedFirstWriter),
}

impl ResultWriter {
    /// Starts the result's files at `csv_path` (and beside it); each form
    /// of at most `in_row_limit` bytes (at most `SMALL_RESULT_BYTES`) is
    /// handed back for the store's row instead.
    pub async fn create(
        store: Arc<dyn ObjectStore>,
        csv_path: &str,
        schema: &Schema,
        typed: TypedCopies,
        in_row_limit: usize,
    ) -> std::io::Result<Self> {
        let in_row_limit = in_row_limit.min(SMALL_RESULT_BYTES);
        Ok(match typed {
            TypedCopies::First(first) => ResultWriter::TypedFirst(
                TypedFirstWriter::create(store, csv_path, schema, first, in_row_limit).await?,
            ),
            _ => ResultWriter::CsvFirst(Box::new(
                CsvFirstWriter::create(store, csv_path, schema, typed, in_row_limit).await?,
            )),
        })
    }

    pub async fn write(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        match self {
            ResultWriter::CsvFirst(writer) => writer.write(batch).await,
            ResultWriter::TypedFirst(writer) => writer.write(batch).await,
        }
    }

    /// Completes every file (a failure fails the query, whose end deletes
    /// every file of the result).
    pub async fn finish(self) -> std::io::Result<WrittenResult> {
        match self {
            ResultWriter::CsvFirst(writer) => writer.finish().await,
            ResultWriter::TypedFirst(writer) => writer.finish().await,
        }
    }

    /// Abandons every upload (cancellation, failure).
    pub async fn abort(self) {
        match self {
            ResultWriter::CsvFirst(writer) => writer.abort().await,
            ResultWriter::TypedFirst(writer) => writer.abort().await,
        }
    }
}

/// A result's files: the CSV at its result path and, when `TypedCopies`
/// says so, the Arrow stream beside it, written on its own task
/// (`TypedCopyTask`) while this one encodes the CSV.
pub struct CsvFirstWriter {
    csv: CsvResultWriter,
    typed: Option<TypedCopyTask>,
    in_row_limit: usize,
}

impl CsvFirstWriter {
    /// Starts the CSV at `csv_path` and, when `typed` says it is written
    /// now, its Arrow copy; each form of at most `in_row_limit` bytes is
    /// handed back for the store's row instead.
    async fn create(
        store: Arc<dyn ObjectStore>,
        csv_path: &str,
        schema: &Schema,
        typed: TypedCopies,
        in_row_limit: usize,
    ) -> std::io::Result<Self> {
        let csv = CsvResultWriter::create(store.clone(), csv_path, schema).await?;
        let typed = typed.while_running(schema).map(|compression| {
            let path = result_file_path(csv_path, ResultFormat::Arrow);
            TypedCopyTask::start(store, path, schema, compression, in_row_limit)
        });
        Ok(Self {
            csv,
            typed,
            in_row_limit,
        })
    }

    pub async fn write(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        if batch.num_columns() == 0 {
            return Ok(());
        }
        // The copy's task takes the batch first, so it encodes while the
        // CSV does.
        if let Some(typed) = &self.typed
            && !typed.write(batch).await
            && let Some(failed) = self.typed.take()
        {
            let why = failed.outcome().await.err().map(|e| e.to_string());
            tracing::warn!(
                error = why.as_deref().unwrap_or("ended early"),
                "result kept without its typed copy"
            );
        }
        self.csv.write(batch).await
    }

    /// Completes both files at once (a CSV that fails fails the query,
    /// whose end deletes every file of the result; both are done by then).
    pub async fn finish(self) -> std::io::Result<WrittenResult> {
        let typed = async {
            match self.typed {
                Some(typed) => typed.finish().await.map(Some),
                None => Ok(None),
            }
        };
        let (typed, csv) = tokio::join!(typed, self.csv.finish_within(self.in_row_limit));
        let mut written = csv?;
        match typed {
            Ok(Some(TypedCopy::InRow(arrow))) => written.in_row.arrow = Some(arrow),
            Ok(Some(TypedCopy::Stored(_)) | None) => {}
            Err(e) => tracing::warn!(error = %e, "result kept without its typed copy"),
        }
        Ok(written)
    }

    /// Abandons both uploads (cancellation, failure).
    pub async fn abort(self) {
        if let Some(typed) = self.typed {
            typed.abort().await;
        }
        self.csv.abort().await;
    }
}

#[cfg(test)]
#[path = "result_writer_tests.rs"]
mod tests;
