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
};
use crate::{
    config::{ArrowCompression, SMALL_RESULT_BYTES},
    lake::{ResultFormat, result_file_path},
    store::queries::ResultInRow,
};

/// Batches being made text at once, ahead of the one written next.
const ENCODING_AHEAD: usize = 4;

/// Batches at most this many rows are made text on the writer's own task:
/// a task of their own would cost more than it saves.
const ENCODE_INLINE_ROWS: usize = 1024;

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
}

impl TypedCopies {
    /// How the copy of a result of `schema` is compressed when it is
    /// written while the query runs; `None` when it is not.
    pub fn while_running(self, schema: &Schema) -> Option<ArrowCompression> {
        match self {
            TypedCopies::Never => None,
            TypedCopies::OnRequest(_) if reads_back(schema) => None,
            TypedCopies::OnRequest(compression) | TypedCopies::WhileRunning(compression) => {
                Some(compression)
            }
        }
    }
}

/// A result's files: the CSV at its result path and, when `TypedCopies`
/// says so, the Arrow stream beside it, written on its own task
/// (`TypedCopyTask`) while this one encodes the CSV.
pub struct ResultWriter {
    csv: CsvResultWriter,
    typed: Option<TypedCopyTask>,
    in_row_limit: usize,
}

impl ResultWriter {
    /// Starts the CSV at `csv_path` and, when `typed` says it is written
    /// now, its Arrow copy; each form of at most `in_row_limit` bytes (at
    /// most `SMALL_RESULT_BYTES`) is handed back for the store's row instead.
    pub async fn create(
        store: Arc<dyn ObjectStore>,
        csv_path: &str,
        schema: &Schema,
        typed: TypedCopies,
        in_row_limit: usize,
    ) -> std::io::Result<Self> {
        let in_row_limit = in_row_limit.min(SMALL_RESULT_BYTES);
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
mod tests {
    use datafusion::arrow::{
        array::{ArrayRef, Int64Array},
        datatypes::{DataType, Field},
    };
    use object_store::{ObjectStoreExt as _, memory::InMemory};

    use super::*;

    #[tokio::test]
    async fn a_typed_copy_that_fails_leaves_the_csv_whole_and_no_arrow_file() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int64, false),
        ]);
        // A batch the Arrow copy cannot take (one column of the two its
        // stream was started with); the CSV writes what it is given.
        let one_column = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(one_column, vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
        let mut writer = ResultWriter::create(
            store.clone(),
            "r.csv",
            &schema,
            TypedCopies::WhileRunning(ArrowCompression::Zstd),
            0,
        )
        .await
        .unwrap();
        writer.write(&batch).await.unwrap();
        writer.write(&batch).await.unwrap();
        let written = writer.finish().await.unwrap();
        assert_eq!(written.rows, 4);
        let csv = crate::lake::stored_bytes(store.as_ref(), "r.csv").await;
        assert_eq!(&csv[..], b"\"a\",\"b\"\n\"1\"\n\"2\"\n\"1\"\n\"2\"\n");
        let arrow = result_file_path("r.csv", ResultFormat::Arrow);
        assert!(store.head(&Path::from(arrow.as_str())).await.is_err());
    }

    #[tokio::test]
    async fn a_result_within_the_row_limit_comes_back_and_leaves_no_object() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        for (rows, in_row) in [(3i64, true), (20_000, false)] {
            let path = format!("r{rows}.csv");
            let mut writer = ResultWriter::create(
                store.clone(),
                &path,
                &schema,
                TypedCopies::WhileRunning(ArrowCompression::Zstd),
                64 * 1024,
            )
            .await
            .unwrap();
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from((0..rows).collect::<Vec<_>>()))],
            )
            .unwrap();
            writer.write(&batch).await.unwrap();
            let written = writer.finish().await.unwrap();
            let arrow_path = result_file_path(&path, ResultFormat::Arrow);
            let csv_object = store.head(&Path::from(path.as_str())).await;
            let arrow_object = store.head(&Path::from(arrow_path.as_str())).await;
            if in_row {
                let csv = written.in_row.csv.expect("the CSV in the row");
                assert_eq!(&csv[..], b"\"n\"\n\"0\"\n\"1\"\n\"2\"\n");
                assert_eq!(written.bytes, csv.len() as u64);
                assert!(written.in_row.arrow.is_some(), "the Arrow copy in the row");
                assert!(csv_object.is_err() && arrow_object.is_err(), "no object");
            } else {
                assert!(written.in_row.csv.is_none(), "a big CSV is uploaded");
                assert_eq!(csv_object.unwrap().size, written.bytes);
                // Each form is kept by its own size: this Arrow copy,
                // compressed, may fit the row where the CSV does not.
                assert!(
                    written.in_row.arrow.is_some() != arrow_object.is_ok(),
                    "the Arrow copy in the row or the lake, once"
                );
            }
        }
    }

    #[tokio::test]
    async fn on_request_a_copy_is_written_now_only_for_columns_that_do_not_read_back() {
        use datafusion::arrow::array::TimestampMicrosecondArray;
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let numbers: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let instants: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![1, 2]));
        for (path, column, written_now) in [("n.csv", numbers, false), ("t.csv", instants, true)] {
            let field = Field::new("c", column.data_type().clone(), false);
            let schema = Arc::new(Schema::new(vec![field]));
            let batch = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
            let mut writer = ResultWriter::create(
                store.clone(),
                path,
                &schema,
                TypedCopies::OnRequest(ArrowCompression::Zstd),
                0,
            )
            .await
            .unwrap();
            writer.write(&batch).await.unwrap();
            writer.finish().await.unwrap();
            let arrow = result_file_path(path, ResultFormat::Arrow);
            let kept = store.head(&Path::from(arrow.as_str())).await.is_ok();
            assert_eq!(kept, written_now, "{path}");
            assert!(store.head(&Path::from(path)).await.is_ok());
        }
        let never = TypedCopies::Never.while_running(&Schema::empty());
        assert_eq!(never, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_made_text_on_tasks_are_written_in_their_order() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let mut writer = CsvResultWriter::create(store.clone(), "r.csv", &schema)
            .await
            .unwrap();
        // Big batches (each on a task) between small ones (inline when
        // nothing is in flight), more of them than are encoded at once.
        let sizes = [3, 5000, 2, 9000, 4000, 1, 7000, 3000, 8000, 6000, 5];
        let mut next = 0i64;
        for size in sizes {
            let n: Vec<i64> = (next..next + size).collect();
            next += size;
            let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(n))]);
            writer.write(&batch.unwrap()).await.unwrap();
        }
        let written = writer.finish().await.unwrap();
        assert_eq!(written.rows, next as u64);
        let csv = crate::lake::stored_bytes(store.as_ref(), "r.csv").await;
        let expected: String = std::iter::once("\"n\"\n".to_string())
            .chain((0..next).map(|n| format!("\"{n}\"\n")))
            .collect();
        assert_eq!(written.bytes, expected.len() as u64);
        assert!(csv == expected.as_bytes(), "rows out of order");
    }
}
