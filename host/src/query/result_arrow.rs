//! The typed copy of a result: the same batches the CSV is written from, as
//! an Arrow IPC stream (`<query>-<attempt>.arrows` beside the CSV), with the
//! engine's column types. Written while the query runs, streamed to the
//! object store a megabyte at a time: never held whole in memory.
//!
//! Strings and binaries are written as the plain Arrow types (`Utf8`,
//! `Binary`), not the view types DataFusion reads the lake with: the same
//! logical type, and every Arrow reader (pyarrow before 16, DuckDB, arrow-js,
//! R) knows the plain ones. Nothing else is converted.
//!
//! A query writes its copy on a task of its own (`TypedCopyTask`), fed the
//! result's batches through a bounded channel: encoding and compressing it
//! runs beside the CSV's encoding rather than after it. A copy whose batches
//! come to less than `COMPRESS_FROM_BYTES` is written uncompressed: for a few
//! rows a codec costs more than it saves. A copy no bigger than the task's
//! `in_row_limit` is never uploaded: the task hands its bytes back
//! (`TypedCopy::InRow`) for the job's row in the store.
//!
//! It never decides whether a copy is kept (`query.typed_results`), nor
//! serves one: `result_writer.rs` and `service/reading.rs` do.

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::{
    array::RecordBatch,
    datatypes::{Schema, SchemaRef},
    ipc::{
        CompressionType,
        writer::{IpcWriteOptions, StreamWriter},
    },
};
use object_store::{ObjectStore, buffered::BufWriter, path::Path};
use tokio::{io::AsyncWriteExt as _, sync::mpsc, task::JoinHandle};

use super::ipc_encoding::BatchEncoder;
use crate::{config::ArrowCompression, engine::layout::without_view_types};

/// Bytes gathered before they go to the object store.
const FLUSH_BYTES: usize = 1 << 20;

/// The zstd level of compressed copies: the fastest of its standard levels.
const ZSTD_LEVEL: i32 = 1;

/// Streams a result to `path` as an Arrow IPC stream, its batches encoded
/// on every core (`ipc_encoding.rs`).
pub struct ArrowResultWriter {
    ipc: StreamWriter<Vec<u8>>,
    encoder: BatchEncoder,
    upload: BufWriter,
    path: Path,
    bytes: u64,
}

impl ArrowResultWriter {
    /// Starts the stream with its schema message; record batches' buffers
    /// are compressed as `compression` says.
    pub async fn create(
        store: Arc<dyn ObjectStore>,
        path: &str,
        schema: &Schema,
        compression: ArrowCompression,
    ) -> std::io::Result<Self> {
        let schema = Arc::new(without_view_types(schema));
        let codec = match compression {
            ArrowCompression::None => None,
            ArrowCompression::Lz4 => Some(CompressionType::LZ4_FRAME),
            ArrowCompression::Zstd => Some(CompressionType::ZSTD),
        };
        // zstd at level 1, as the Parquet copies: 15% less time than its
        // default level 3 for files within 1% of the size (lineitem).
        let level = (codec == Some(CompressionType::ZSTD)).then_some(ZSTD_LEVEL);
        let options = IpcWriteOptions::default()
            .try_with_compression(codec)
            .and_then(|options| options.try_with_compression_level(level))
            .map_err(std::io::Error::other)?;
        let buffer = Vec::with_capacity(2 * FLUSH_BYTES);
        let encoder = BatchEncoder::new(schema.clone(), options.clone(), codec.is_some());
        let ipc = StreamWriter::try_new_with_options(buffer, &schema, options)
            .map_err(std::io::Error::other)?;
        let path = Path::from(path);
        Ok(Self {
            ipc,
            encoder,
            upload: BufWriter::new(store, path.clone()),
            path,
            bytes: 0,
        })
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        let buffer = self.ipc.get_mut();
        self.upload.write_all(buffer).await?;
        self.bytes += buffer.len() as u64;
        buffer.clear();
        Ok(())
    }

    pub async fn write(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        self.encoder
            .write(&mut self.ipc, batch.clone())
            .await
            .map_err(std::io::Error::other)?;
        if self.ipc.get_ref().len() >= FLUSH_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes the end-of-stream marker and completes the upload; returns
    /// the file's size.
    pub async fn finish(self) -> std::io::Result<u64> {
        match self.finish_within(0).await? {
            TypedCopy::Stored(size) => Ok(size),
            TypedCopy::InRow(bytes) => Ok(bytes.len() as u64),
        }
    }

    /// Writes the end-of-stream marker. A stream of at most `in_row_limit`
    /// bytes (less than `FLUSH_BYTES`, so none of it went out yet) is
    /// handed back, never uploaded; a bigger one's upload completes.
    pub async fn finish_within(mut self, in_row_limit: usize) -> std::io::Result<TypedCopy> {
        self.encoder
            .drain(&mut self.ipc)
            .await
            .map_err(std::io::Error::other)?;
        self.ipc.finish().map_err(std::io::Error::other)?;
        let stream = self.ipc.get_ref();
        let nothing_sent = self.bytes == 0;
        if in_row_limit > 0 && nothing_sent && stream.len() <= in_row_limit.min(FLUSH_BYTES) {
            let bytes = Bytes::copy_from_slice(stream);
            // Nothing was written: dropping the upload leaves no object.
            return Ok(TypedCopy::InRow(bytes));
        }
        self.flush().await?;
        self.upload.shutdown().await?;
        Ok(TypedCopy::Stored(self.bytes))
    }

    /// Abandons the upload (cancellation, failure).
    pub async fn abort(mut self) {
        self.encoder.abort();
        let _ = self.upload.abort().await;
        tracing::debug!(path = %self.path, "typed result upload abandoned");
    }
}

/// How a typed copy ended: uploaded (its size), or small enough to be kept
/// in the job's row (its bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypedCopy {
    Stored(u64),
    InRow(Bytes),
}

/// Batches in memory below which a typed copy is written uncompressed.
const COMPRESS_FROM_BYTES: usize = 64 * 1024;

/// Batches handed to a `TypedCopyTask` that it has not written yet: the
/// most the copy holds back beside the query.
const FED_BATCHES: usize = 4;

/// What a `TypedCopyTask` is fed; a feed that closes without `Finish` (the
/// query failed or was dropped) abandons the copy.
enum Feed {
    Batch(RecordBatch),
    Finish,
}

/// The typed copy of one result, written on its own task.
pub struct TypedCopyTask {
    feed: mpsc::Sender<Feed>,
    task: JoinHandle<std::io::Result<TypedCopy>>,
}

impl TypedCopyTask {
    /// Starts the task that writes the copy to `path`, compressing as
    /// `compression` says once the copy is big enough to gain from it; a
    /// copy of at most `in_row_limit` bytes is handed back instead.
    pub fn start(
        store: Arc<dyn ObjectStore>,
        path: String,
        schema: &Schema,
        compression: ArrowCompression,
        in_row_limit: usize,
    ) -> Self {
        let (feed, batches) = mpsc::channel(FED_BATCHES);
        let schema = Arc::new(schema.clone());
        let target = CopyTarget {
            store,
            path,
            compression,
            in_row_limit,
        };
        let task = tokio::spawn(write_fed(target, schema, batches));
        Self { feed, task }
    }

    /// Hands `batch` to the task (waiting while it is `FED_BATCHES` behind);
    /// false once the task has ended, that is, once the copy failed.
    pub async fn write(&self, batch: &RecordBatch) -> bool {
        self.feed.send(Feed::Batch(batch.clone())).await.is_ok()
    }

    /// Completes the copy; returns how it was kept, or why it failed.
    pub async fn finish(self) -> std::io::Result<TypedCopy> {
        // A send that fails finds the task ended; its outcome says why.
        let _ = self.feed.send(Feed::Finish).await;
        self.outcome().await
    }

    /// Abandons the copy and waits until its upload is abandoned too.
    pub async fn abort(self) {
        let Self { feed, task } = self;
        drop(feed);
        let _ = task.await;
    }

    /// How the task ended (it runs until its feed finishes or closes).
    pub async fn outcome(self) -> std::io::Result<TypedCopy> {
        match self.task.await {
            Ok(outcome) => outcome,
            Err(e) => Err(std::io::Error::other(format!("typed copy task: {e}"))),
        }
    }
}

/// Where a `TypedCopyTask` writes its copy, and how.
struct CopyTarget {
    store: Arc<dyn ObjectStore>,
    path: String,
    compression: ArrowCompression,
    in_row_limit: usize,
}

/// The task of a `TypedCopyTask`: holds the first batches until they are
/// worth compressing or the feed finishes, then streams the rest.
async fn write_fed(
    target: CopyTarget,
    schema: SchemaRef,
    mut feed: mpsc::Receiver<Feed>,
) -> std::io::Result<TypedCopy> {
    let CopyTarget {
        store,
        path,
        compression,
        in_row_limit,
    } = target;
    let mut held = Vec::new();
    let mut held_bytes = 0;
    let finished = loop {
        match feed.recv().await {
            Some(Feed::Batch(batch)) => {
                held_bytes += batch.get_array_memory_size();
                held.push(batch);
                if held_bytes >= COMPRESS_FROM_BYTES {
                    break false;
                }
            }
            Some(Feed::Finish) => break true,
            None => return Err(abandoned()),
        }
    };
    let codec = if finished && held_bytes < COMPRESS_FROM_BYTES {
        ArrowCompression::None
    } else {
        compression
    };
    let mut writer = ArrowResultWriter::create(store, &path, &schema, codec).await?;
    let written = async {
        for batch in held {
            writer.write(&batch).await?;
        }
        if finished {
            return Ok(());
        }
        loop {
            match feed.recv().await {
                Some(Feed::Batch(batch)) => writer.write(&batch).await?,
                Some(Feed::Finish) => return Ok(()),
                None => return Err(abandoned()),
            }
        }
    }
    .await;
    match written {
        Ok(()) => writer.finish_within(in_row_limit).await,
        Err(e) => {
            writer.abort().await;
            Err(e)
        }
    }
}

fn abandoned() -> std::io::Error {
    std::io::Error::other("the typed copy was abandoned")
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::{
        array::{Array as _, AsArray as _, Int64Array, StringViewArray},
        datatypes::{DataType, Field},
        ipc::reader::StreamReader,
    };
    use object_store::{ObjectStoreExt as _, memory::InMemory};

    use super::*;

    #[tokio::test]
    async fn batches_stream_with_plain_string_types() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8View, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringViewArray::from(vec![Some("a, \"b\"\n"), None])),
            ],
        )
        .unwrap();
        for compression in [
            ArrowCompression::None,
            ArrowCompression::Lz4,
            ArrowCompression::Zstd,
        ] {
            let mut writer =
                ArrowResultWriter::create(store.clone(), "r.arrows", &schema, compression)
                    .await
                    .unwrap();
            writer.write(&batch).await.unwrap();
            writer.write(&batch).await.unwrap();
            let size = writer.finish().await.unwrap();
            read_back(&store, size).await;
        }
    }

    fn numbers(rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .unwrap()
    }

    /// The codec of the stream's first record batch, read from its message
    /// header (each message: continuation marker, metadata length, metadata,
    /// body).
    fn first_batch_compression(bytes: &[u8]) -> Option<CompressionType> {
        let mut offset = 0;
        loop {
            let length = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap());
            let start = offset + 8;
            let message =
                datafusion::arrow::ipc::root_as_message(&bytes[start..start + length as usize])
                    .unwrap();
            if let Some(batch) = message.header_as_record_batch() {
                return batch.compression().map(|c| c.codec());
            }
            offset = start + length as usize + message.bodyLength() as usize;
        }
    }

    #[tokio::test]
    async fn a_task_fed_copy_compresses_only_a_copy_worth_compressing() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        for (rows, compressed) in [(10, false), (100_000, true)] {
            let batch = numbers(rows);
            let copy = start_copy(&store, &batch, ArrowCompression::Zstd, 0);
            assert!(copy.write(&batch).await);
            let TypedCopy::Stored(size) = copy.finish().await.unwrap() else {
                panic!("no limit: the copy is stored");
            };
            let bytes = stored(&store).await;
            assert_eq!(bytes.len() as u64, size);
            let reader = StreamReader::try_new(std::io::Cursor::new(bytes.clone()), None).unwrap();
            let read: usize = reader.map(|b| b.unwrap().num_rows()).sum();
            assert_eq!(read as i64, rows);
            assert_eq!(
                first_batch_compression(&bytes).is_some(),
                compressed,
                "{rows} rows"
            );
        }
    }

    #[tokio::test]
    async fn a_copy_within_the_row_limit_is_handed_back_and_never_uploaded() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        for (rows, in_row) in [(10, true), (100_000, false)] {
            let batch = numbers(rows);
            let copy = start_copy(&store, &batch, ArrowCompression::Zstd, 64 * 1024);
            assert!(copy.write(&batch).await);
            let bytes = match copy.finish().await.unwrap() {
                TypedCopy::InRow(bytes) => {
                    assert!(in_row, "{rows} rows came back");
                    assert!(store.head(&Path::from("r.arrows")).await.is_err());
                    bytes
                }
                TypedCopy::Stored(size) => {
                    assert!(!in_row, "{rows} rows were uploaded");
                    let bytes = stored(&store).await;
                    assert_eq!(bytes.len() as u64, size);
                    bytes
                }
            };
            let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
            let read: usize = reader.map(|b| b.unwrap().num_rows()).sum();
            assert_eq!(read as i64, rows);
        }
    }

    /// A copy of `batch`'s schema to `r.arrows`.
    fn start_copy(
        store: &Arc<dyn ObjectStore>,
        batch: &RecordBatch,
        compression: ArrowCompression,
        in_row_limit: usize,
    ) -> TypedCopyTask {
        let path = "r.arrows".into();
        TypedCopyTask::start(
            store.clone(),
            path,
            &batch.schema(),
            compression,
            in_row_limit,
        )
    }

    fn start_lz4_copy(store: &Arc<dyn ObjectStore>, batch: &RecordBatch) -> TypedCopyTask {
        start_copy(store, batch, ArrowCompression::Lz4, 0)
    }

    #[tokio::test]
    async fn an_abandoned_copy_leaves_no_file() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let batch = numbers(100_000);
        let copy = start_lz4_copy(&store, &batch);
        assert!(copy.write(&batch).await);
        copy.abort().await;
        assert!(store.head(&Path::from("r.arrows")).await.is_err());

        // Dropped without a word (a cancelled query's future): the same.
        let copy = start_lz4_copy(&store, &batch);
        assert!(copy.write(&batch).await);
        let task_ended = copy.task.abort_handle();
        drop(copy);
        while !task_ended.is_finished() {
            tokio::task::yield_now().await;
        }
        assert!(store.head(&Path::from("r.arrows")).await.is_err());
    }

    /// The bytes stored at `r.arrows`.
    async fn stored(store: &Arc<dyn ObjectStore>) -> bytes::Bytes {
        crate::lake::stored_bytes(store.as_ref(), "r.arrows").await
    }

    async fn read_back(store: &Arc<dyn ObjectStore>, size: u64) {
        let bytes = stored(store).await;
        assert_eq!(bytes.len() as u64, size);
        let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
        assert_eq!(reader.schema().field(1).data_type(), &DataType::Utf8);
        let batches = reader.collect::<Result<Vec<_>, _>>().unwrap();
        assert_eq!(batches.len(), 2);
        let names = batches[1].column(1).as_string_opt::<i32>();
        let names = names.expect("plain strings");
        assert_eq!(names.value(0), "a, \"b\"\n");
        assert!(names.is_null(1));
    }
}
