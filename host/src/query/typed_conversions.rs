//! Forms of a result made on first request, and kept: the Arrow copy of a
//! result read back from its CSV (`csv_read_back.rs`), the Parquet copy made
//! from the Arrow copy, or read back from the CSV when there is no Arrow
//! copy (`result_parquet.rs`), and the CSV of a result written Arrow or
//! Parquet first (`Prefer: result-format=`), made from that file (and the
//! Arrow copy of one written Parquet first, from its Parquet file).
//!
//! A query whose columns read back from their CSV writes the CSV alone
//! while it runs (the spec's path pays nothing for the typed forms); the
//! first request for Arrow or Parquet reads the CSV back, a chunk at a
//! time, and writes `<query>-<attempt>.arrows` beside it, compressed as
//! `query.typed_results_compression` says. Nothing is ever whole in memory.
//!
//! Each conversion runs as its own task on the engine runtime: a caller
//! that gives up (a gateway timeout, a closed connection) does not stop it,
//! so asking again finds it done or joins it, and concurrent askers on one
//! replica share one run. Two replicas converting at once write the same
//! bytes; the object store's upload is all or nothing, so a reader never
//! sees half a file. The sizes of the files a replica found or made are
//! kept (`known_sizes.rs`), so a page of a typed-first result, or a download
//! of a copy made, does not HEAD its file again.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use datafusion::{
    arrow::{array::RecordBatch, datatypes::SchemaRef},
    parquet::arrow::ParquetRecordBatchStreamBuilder,
};
use futures::{
    FutureExt as _, StreamExt as _,
    future::{BoxFuture, Shared},
    stream::BoxStream,
};
use object_store::{ObjectStore, ObjectStoreExt as _, path::Path};

use super::{
    InternalCause,
    csv_read_back::CsvReadBack,
    ipc_batches::IpcBatches,
    known_sizes::KnownSizes,
    result_arrow::{ArrowResultWriter, TypedCopy},
    result_parquet::{self, StoredParquet, TypedResultError},
    result_writer::CsvResultWriter,
};
use crate::{
    config::ArrowCompression,
    lake::{self, ResultFormat, result_file_path},
};

/// A CSV smaller than this reads back into an uncompressed copy: for a few
/// rows a codec costs more than it saves (as for copies made while a query
/// runs, `result_arrow.rs`).
const COMPRESS_FROM_CSV_BYTES: u64 = 64 * 1024;

/// Batches read back and not yet written: the reader runs ahead of the
/// writer (which encodes and compresses) by at most this many.
const READ_AHEAD: usize = 2;

/// Reads the CSV `source` back as `schema` into `writer`; a copy of at most
/// `in_memory_limit` bytes is handed back, never uploaded. The text is read
/// on this task and the copy written on another, so reading and
/// compressing run at once.
pub async fn arrow_from_csv(
    mut source: BoxStream<'static, std::io::Result<Bytes>>,
    schema: SchemaRef,
    mut writer: ArrowResultWriter,
    in_memory_limit: usize,
) -> Result<TypedCopy, TypedResultError> {
    let (batches, mut to_write) = tokio::sync::mpsc::channel::<RecordBatch>(READ_AHEAD);
    let writing = tokio::spawn(async move {
        while let Some(batch) = to_write.recv().await {
            if let Err(e) = writer.write(&batch).await {
                writer.abort().await;
                return Err(e);
            }
        }
        Ok(writer)
    });
    let read: Result<(), TypedResultError> = async {
        let mut reader = CsvReadBack::new(schema);
        while let Some(chunk) = source.next().await {
            let chunk =
                chunk.map_err(|e| TypedResultError::Failed(InternalCause::new("result CSV", e)))?;
            for batch in reader.push(&chunk)? {
                if batches.send(batch).await.is_err() {
                    return Ok(()); // The writer failed: its outcome says why.
                }
            }
        }
        if let Some(batch) = reader.finish()? {
            let _ = batches.send(batch).await;
        }
        Ok(())
    }
    .await;
    drop(batches);
    let written = writing
        .await
        .map_err(|e| TypedResultError::Failed(InternalCause::new("arrow copy task", e)))?;
    match (read, written) {
        (Ok(()), Ok(writer)) => writer
            .finish_within(in_memory_limit)
            .await
            .map_err(copy_failed),
        (Err(e), Ok(writer)) => {
            writer.abort().await;
            Err(e)
        }
        (_, Err(e)) => Err(copy_failed(e)),
    }
}

/// The record batches of a result's typed file at `path` (an Arrow IPC
/// stream or a Parquet file), read a part at a time; with its schema.
async fn typed_batches(
    store: Arc<dyn ObjectStore>,
    path: &str,
    format: ResultFormat,
) -> Result<
    (
        SchemaRef,
        BoxStream<'static, Result<RecordBatch, TypedResultError>>,
    ),
    TypedResultError,
> {
    if format == ResultFormat::Parquet {
        let reader = StoredParquet::open(store, path).await?;
        let stream = ParquetRecordBatchStreamBuilder::new(reader)
            .await?
            .build()?;
        let schema = stream.schema().clone();
        return Ok((schema, stream.map(|batch| Ok(batch?)).boxed()));
    }
    let source = lake::object_bytes(store.as_ref(), path, None).await?;
    let mut batches = IpcBatches::new(source);
    let schema = batches.schema().await?;
    Ok((
        schema,
        batches.into_stream().map(|batch| Ok(batch?)).boxed(),
    ))
}

/// A result file written from record batches: finished whole, or aborted
/// leaving nothing.
trait BatchSink: Sized {
    async fn write(&mut self, batch: &RecordBatch) -> std::io::Result<()>;
    /// The file's size.
    async fn finish(self) -> std::io::Result<u64>;
    async fn abort(self);
}

impl BatchSink for CsvResultWriter {
    async fn write(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        CsvResultWriter::write(self, batch).await
    }
    async fn finish(self) -> std::io::Result<u64> {
        Ok(CsvResultWriter::finish(self).await?.bytes)
    }
    async fn abort(self) {
        CsvResultWriter::abort(self).await;
    }
}

impl BatchSink for ArrowResultWriter {
    async fn write(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        ArrowResultWriter::write(self, batch).await
    }
    async fn finish(self) -> std::io::Result<u64> {
        ArrowResultWriter::finish(self).await
    }
    async fn abort(self) {
        ArrowResultWriter::abort(self).await;
    }
}

/// Writes every batch of `batches` to `sink`; the first error aborts it.
/// The file's size.
async fn write_all(
    mut batches: BoxStream<'static, Result<RecordBatch, TypedResultError>>,
    mut sink: impl BatchSink,
    failed: fn(std::io::Error) -> TypedResultError,
) -> Result<u64, TypedResultError> {
    let written: Result<(), TypedResultError> = async {
        while let Some(batch) = batches.next().await {
            sink.write(&batch?).await.map_err(failed)?;
        }
        Ok(())
    }
    .await;
    match written {
        Ok(()) => sink.finish().await.map_err(failed),
        Err(e) => {
            sink.abort().await;
            Err(e)
        }
    }
}

/// Writes the CSV at `csv_path` from the result's typed file at `path` in
/// `format`, a batch at a time; a failure leaves no CSV. Its size.
async fn csv_from_typed(
    store: Arc<dyn ObjectStore>,
    path: &str,
    format: ResultFormat,
    csv_path: &str,
) -> Result<u64, TypedResultError> {
    let (schema, batches) = typed_batches(store.clone(), path, format).await?;
    let writer = CsvResultWriter::create(store, csv_path, &schema).await?;
    write_all(batches, writer, TypedResultError::from).await
}

/// Writes the Arrow copy at `arrow_path` of a result written Parquet first
/// from its Parquet file at `parquet_path`; a failure leaves no file. Its
/// size.
async fn arrow_from_parquet(
    store: Arc<dyn ObjectStore>,
    parquet_path: &str,
    arrow_path: &str,
    compression: ArrowCompression,
) -> Result<u64, TypedResultError> {
    let (schema, batches) =
        typed_batches(store.clone(), parquet_path, ResultFormat::Parquet).await?;
    let writer = ArrowResultWriter::create(store, arrow_path, &schema, compression)
        .await
        .map_err(copy_failed)?;
    write_all(batches, writer, copy_failed).await
}

fn copy_failed(e: std::io::Error) -> TypedResultError {
    TypedResultError::Failed(InternalCause::new("arrow copy", e))
}

/// The Arrow writer of a copy read back from a CSV of `csv_bytes`.
pub async fn read_back_writer(
    store: Arc<dyn ObjectStore>,
    arrow_path: &str,
    schema: &SchemaRef,
    compression: ArrowCompression,
    csv_bytes: u64,
) -> Result<ArrowResultWriter, TypedResultError> {
    let codec = if csv_bytes < COMPRESS_FROM_CSV_BYTES {
        ArrowCompression::None
    } else {
        compression
    };
    ArrowResultWriter::create(store, arrow_path, schema, codec)
        .await
        .map_err(copy_failed)
}

type Conversion = Shared<BoxFuture<'static, Result<u64, TypedResultError>>>;

/// The typed copies being made on this replica, by the path they go to,
/// and the sizes of those it found or made.
#[derive(Default)]
pub struct TypedConversions {
    pub(super) running: Arc<Mutex<HashMap<String, Conversion>>>,
    known: Arc<KnownSizes>,
}

/// What the Arrow copy of a result is read back from: its CSV in the lake.
pub struct ReadBack {
    pub schema: SchemaRef,
    pub compression: ArrowCompression,
    pub csv_bytes: u64,
}

impl TypedConversions {
    /// The size of the Arrow copy of the result whose CSV is at `csv_path`,
    /// read back from that CSV now on `runtime` if it is not there yet (or
    /// joined, if another request on this replica is making it).
    pub async fn ensure_arrow(
        &self,
        runtime: &tokio::runtime::Handle,
        store: Arc<dyn ObjectStore>,
        csv_path: &str,
        read_back: ReadBack,
    ) -> Result<u64, TypedResultError> {
        let arrow_path = result_file_path(csv_path, ResultFormat::Arrow);
        let csv_path = csv_path.to_string();
        let make = {
            let store = store.clone();
            let arrow_path = arrow_path.clone();
            async move {
                // A megabyte per read (object store's own stream reads a
                // file on disk 8 KiB at a time).
                let source = lake::object_bytes(store.as_ref(), &csv_path, None).await?;
                let ReadBack {
                    schema,
                    compression,
                    csv_bytes,
                } = read_back;
                let writer =
                    read_back_writer(store, &arrow_path, &schema, compression, csv_bytes).await?;
                match arrow_from_csv(source, schema, writer, 0).await? {
                    TypedCopy::Stored(size) => Ok(size),
                    TypedCopy::InRow(bytes) => Ok(bytes.len() as u64),
                }
            }
            .boxed()
        };
        self.ensure(runtime, store, arrow_path, make).await
    }

    /// The size of the Parquet copy of the result whose CSV is at
    /// `csv_path`, made from its Arrow copy now on `runtime` if it is not
    /// there yet (or joined).
    pub async fn ensure_parquet(
        &self,
        runtime: &tokio::runtime::Handle,
        store: Arc<dyn ObjectStore>,
        csv_path: &str,
    ) -> Result<u64, TypedResultError> {
        let parquet_path = result_file_path(csv_path, ResultFormat::Parquet);
        let arrow_path = result_file_path(csv_path, ResultFormat::Arrow);
        let make = {
            let store = store.clone();
            let parquet_path = parquet_path.clone();
            async move { result_parquet::convert(store, &arrow_path, &parquet_path).await }.boxed()
        };
        self.ensure(runtime, store, parquet_path, make).await
    }

    /// The size of the Parquet copy of the result whose CSV is at
    /// `csv_path` and whose columns read back as `schema`, read straight
    /// from the CSV now on `runtime` if it is not there yet (or joined, also
    /// by a request making it from the Arrow copy). For a result with no
    /// Arrow copy: making one first would encode and compress every row
    /// once more.
    pub async fn ensure_parquet_read_back(
        &self,
        runtime: &tokio::runtime::Handle,
        store: Arc<dyn ObjectStore>,
        csv_path: &str,
        schema: SchemaRef,
    ) -> Result<u64, TypedResultError> {
        let parquet_path = result_file_path(csv_path, ResultFormat::Parquet);
        let csv_path = csv_path.to_string();
        let make = {
            let store = store.clone();
            let parquet_path = parquet_path.clone();
            async move { result_parquet::from_csv(store, &csv_path, schema, &parquet_path).await }
                .boxed()
        };
        self.ensure(runtime, store, parquet_path, make).await
    }

    /// The size of the CSV at `csv_path` of a result written in the typed
    /// format `first` first, made now on `runtime` from that file if it is
    /// not there yet (or joined): the same text the query would have
    /// written, since it is encoded from the same values by the same writer.
    pub async fn ensure_csv(
        &self,
        runtime: &tokio::runtime::Handle,
        store: Arc<dyn ObjectStore>,
        csv_path: &str,
        first: ResultFormat,
    ) -> Result<u64, TypedResultError> {
        let source = result_file_path(csv_path, first);
        let make = {
            let store = store.clone();
            let csv_path = csv_path.to_string();
            async move { csv_from_typed(store, &source, first, &csv_path).await }.boxed()
        };
        self.ensure(runtime, store, csv_path.to_string(), make)
            .await
    }

    /// The size of the Arrow copy of a result written Parquet first (its
    /// CSV at `csv_path`), made now on `runtime` from the Parquet file if it
    /// is not there yet (or joined).
    pub async fn ensure_arrow_from_parquet(
        &self,
        runtime: &tokio::runtime::Handle,
        store: Arc<dyn ObjectStore>,
        csv_path: &str,
        compression: ArrowCompression,
    ) -> Result<u64, TypedResultError> {
        let arrow_path = result_file_path(csv_path, ResultFormat::Arrow);
        let parquet_path = result_file_path(csv_path, ResultFormat::Parquet);
        let make = {
            let store = store.clone();
            let arrow_path = arrow_path.clone();
            async move { arrow_from_parquet(store, &parquet_path, &arrow_path, compression).await }
                .boxed()
        };
        self.ensure(runtime, store, arrow_path, make).await
    }

    /// The size of the result file at `path` when it is in the lake: known
    /// to this replica, or found by a HEAD (and known from then on); `None`
    /// when it is not there.
    pub async fn found(
        &self,
        store: &dyn ObjectStore,
        path: &str,
    ) -> Result<Option<u64>, object_store::Error> {
        if let Some(size) = self.known.get(path) {
            return Ok(Some(size));
        }
        match store.head(&Path::from(path)).await {
            Ok(meta) => {
                self.known.insert(path, meta.size);
                Ok(Some(meta.size))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Remembers that the result file at `path`, just put in the lake
    /// whole, has `size` bytes.
    pub fn remember(&self, path: &str, size: u64) {
        self.known.insert(path, size);
    }

    /// The size of the file at `path`, made by `make` on `runtime` unless
    /// it is there (known to this replica, or found), or joined while this
    /// replica makes it.
    async fn ensure(
        &self,
        runtime: &tokio::runtime::Handle,
        store: Arc<dyn ObjectStore>,
        path: String,
        make: BoxFuture<'static, Result<u64, TypedResultError>>,
    ) -> Result<u64, TypedResultError> {
        if let Some(size) = self.found(store.as_ref(), &path).await? {
            return Ok(size);
        }
        let known = self.known.clone();
        let conversion = {
            let mut running = self.running.lock().expect("conversions lock");
            running
                .entry(path.clone())
                .or_insert_with(|| {
                    let running = self.running.clone();
                    let task = runtime.spawn(async move {
                        let outcome = make.await;
                        match &outcome {
                            Ok(size) => known.insert(&path, *size),
                            Err(TypedResultError::Failed(why)) => {
                                tracing::warn!(path = %path, error = %why, "typed copy failed");
                            }
                            Err(_) => {}
                        }
                        running.lock().expect("conversions lock").remove(&path);
                        outcome
                    });
                    async move {
                        task.await.unwrap_or_else(|e| {
                            Err(TypedResultError::Failed(InternalCause::new(
                                "typed copy task",
                                e,
                            )))
                        })
                    }
                    .boxed()
                    .shared()
                })
                .clone()
        };
        conversion.await
    }
}

#[cfg(test)]
#[path = "typed_conversions_tests.rs"]
mod tests;
