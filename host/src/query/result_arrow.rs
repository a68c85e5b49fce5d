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
//! It never decides whether a copy is kept (`query.typed_results`), nor
//! serves one: `result_writer.rs` and `service/reading.rs` do.

use std::sync::Arc;

use datafusion::arrow::{
    array::{ArrayRef, RecordBatch, RecordBatchOptions},
    compute::cast,
    datatypes::{Schema, SchemaRef},
    error::ArrowError,
    ipc::{
        CompressionType,
        writer::{IpcWriteOptions, StreamWriter},
    },
};
use object_store::{ObjectStore, buffered::BufWriter, path::Path};
use tokio::io::AsyncWriteExt as _;

use crate::{config::ArrowCompression, engine::layout::without_view_types};

/// Bytes gathered before they go to the object store.
const FLUSH_BYTES: usize = 1 << 20;

/// Streams a result to `path` as an Arrow IPC stream.
pub struct ArrowResultWriter {
    ipc: StreamWriter<Vec<u8>>,
    upload: BufWriter,
    path: Path,
    schema: SchemaRef,
    bytes: u64,
}

fn io_error(error: ArrowError) -> std::io::Error {
    std::io::Error::other(error)
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
        let options = IpcWriteOptions::default()
            .try_with_compression(codec)
            .map_err(io_error)?;
        let buffer = Vec::with_capacity(2 * FLUSH_BYTES);
        let ipc = StreamWriter::try_new_with_options(buffer, &schema, options).map_err(io_error)?;
        let path = Path::from(path);
        Ok(Self {
            ipc,
            upload: BufWriter::new(store, path.clone()),
            path,
            schema,
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
        let batch = plain_batch(batch, &self.schema).map_err(io_error)?;
        self.ipc.write(&batch).map_err(io_error)?;
        if self.ipc.get_ref().len() >= FLUSH_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes the end-of-stream marker and completes the upload; returns
    /// the file's size.
    pub async fn finish(mut self) -> std::io::Result<u64> {
        self.ipc.finish().map_err(io_error)?;
        self.flush().await?;
        self.upload.shutdown().await?;
        Ok(self.bytes)
    }

    /// Abandons the upload (cancellation, failure).
    pub async fn abort(mut self) {
        let _ = self.upload.abort().await;
        tracing::debug!(path = %self.path, "typed result upload abandoned");
    }
}

/// `batch` with the types of `schema` (view types cast to plain ones).
fn plain_batch(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(column.clone())
            } else {
                cast(column, field.data_type())
            }
        })
        .collect::<Result<Vec<ArrayRef>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options)
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

    async fn read_back(store: &Arc<dyn ObjectStore>, size: u64) {
        let bytes = store
            .get(&Path::from("r.arrows"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
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
