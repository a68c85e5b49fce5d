//! A Parquet file whose row groups are encoded on blocking threads, a few at
//! once, and written in their order: `ArrowWriter` encodes on the thread that
//! calls it, one column after another, so a single file used one core. Each
//! row group gets its own column writers from the file's
//! `ArrowRowGroupWriterFactory` (so the file is what `ArrowWriter` would have
//! written with the same properties, the Arrow schema embedded), and its
//! encoded chunks are appended when every earlier group's are. The bytes go
//! to the object store after each row group: memory is the groups being
//! encoded, never the file.

use std::{
    collections::VecDeque,
    io::Write,
    sync::{Arc, Mutex},
};

use datafusion::{
    arrow::{array::RecordBatch, datatypes::SchemaRef},
    parquet::{
        arrow::{
            ArrowWriter,
            arrow_writer::{
                ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves,
            },
        },
        errors::ParquetError,
        file::{properties::WriterProperties, writer::SerializedFileWriter},
    },
};
use object_store::buffered::BufWriter;
use tokio::{io::AsyncWriteExt as _, task::JoinHandle};

use crate::locks::locked;

/// Row groups being encoded at once, the one appended next included.
const ENCODING_AHEAD: usize = 3;

/// What a row group's task gives back: its column chunks, in the file's
/// leaf order.
type EncodedGroup = JoinHandle<Result<Vec<ArrowColumnChunk>, ParquetError>>;

/// Streams record batches into a Parquet file of `row_group_rows`-row groups.
pub struct ParquetRowGroupWriter {
    file: SerializedFileWriter<SharedBytes>,
    factory: ArrowRowGroupWriterFactory,
    bytes: SharedBytes,
    upload: BufWriter,
    row_group_rows: usize,
    /// The next row group's rows, not yet handed to a task.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    /// Row groups handed out so far (the next one's index).
    started: usize,
    encoding: VecDeque<EncodedGroup>,
    /// Bytes sent to `upload` so far.
    sent: u64,
}

impl ParquetRowGroupWriter {
    /// A file of `schema` written to `upload`, which is completed by
    /// `close` (dropped before, nothing appears in the store).
    pub fn try_new(
        upload: BufWriter,
        schema: SchemaRef,
        properties: WriterProperties,
        row_group_rows: usize,
    ) -> Result<Self, ParquetError> {
        let bytes = SharedBytes::default();
        let (file, factory) = ArrowWriter::try_new(bytes.clone(), schema, Some(properties))?
            .into_serialized_writer()?;
        Ok(Self {
            file,
            factory,
            bytes,
            upload,
            row_group_rows: row_group_rows.max(1),
            pending: Vec::new(),
            pending_rows: 0,
            started: 0,
            encoding: VecDeque::new(),
            sent: 0,
        })
    }

    /// Adds `batch`'s rows; a full row group goes to a task of its own.
    pub async fn write(&mut self, batch: &RecordBatch) -> Result<(), ParquetError> {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let take = (self.row_group_rows - self.pending_rows).min(batch.num_rows() - offset);
            self.pending.push(batch.slice(offset, take));
            self.pending_rows += take;
            offset += take;
            if self.pending_rows == self.row_group_rows {
                self.start_group().await?;
            }
        }
        Ok(())
    }

    /// Encodes the rows held so far as the next row group, after appending
    /// the oldest group when `ENCODING_AHEAD` are already running.
    async fn start_group(&mut self) -> Result<(), ParquetError> {
        if self.encoding.len() >= ENCODING_AHEAD {
            self.append_oldest().await?;
        }
        let writers = self.factory.create_column_writers(self.started)?;
        self.started += 1;
        let batches = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        self.encoding
            .push_back(tokio::task::spawn_blocking(move || {
                encode_group(writers, &batches)
            }));
        Ok(())
    }

    /// Appends the oldest running group to the file and sends the file's
    /// new bytes on.
    async fn append_oldest(&mut self) -> Result<(), ParquetError> {
        let Some(task) = self.encoding.pop_front() else {
            return Ok(());
        };
        let chunks = task
            .await
            .map_err(|e| ParquetError::External(Box::new(e)))??;
        let mut group = self.file.next_row_group()?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut group)?;
        }
        group.close()?;
        self.send_bytes().await
    }

    async fn send_bytes(&mut self) -> Result<(), ParquetError> {
        let bytes = self.bytes.take();
        if !bytes.is_empty() {
            self.upload.write_all(&bytes).await?;
            self.sent += bytes.len() as u64;
        }
        Ok(())
    }

    /// Writes the last row group and the footer and completes the upload;
    /// the file's size.
    pub async fn close(mut self) -> Result<u64, ParquetError> {
        if self.pending_rows > 0 {
            self.start_group().await?;
        }
        while !self.encoding.is_empty() {
            self.append_oldest().await?;
        }
        self.file.finish()?;
        self.send_bytes().await?;
        self.upload.shutdown().await?;
        Ok(self.sent)
    }
}

/// One row group's columns, encoded one leaf writer after another.
fn encode_group(
    mut writers: Vec<ArrowColumnWriter>,
    batches: &[RecordBatch],
) -> Result<Vec<ArrowColumnChunk>, ParquetError> {
    for batch in batches {
        let mut leaf_writers = writers.iter_mut();
        let schema = batch.schema();
        for (array, field) in batch.columns().iter().zip(schema.fields()) {
            for leaf in compute_leaves(field, array)? {
                let writer = leaf_writers.next().ok_or_else(|| {
                    ParquetError::General("more leaf columns than column writers".into())
                })?;
                writer.write(&leaf)?;
            }
        }
    }
    writers.into_iter().map(ArrowColumnWriter::close).collect()
}

/// The file writer's output, taken by the async side after each row group.
#[derive(Clone, Default)]
struct SharedBytes(Arc<Mutex<Vec<u8>>>);

impl SharedBytes {
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *locked(&self.0))
    }
}

impl Write for SharedBytes {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        locked(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use datafusion::{
        arrow::{
            array::{Int32Array, ListArray, StringArray, StructArray},
            compute::concat_batches,
            datatypes::{DataType, Field, Fields, Int32Type, Schema},
        },
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder,
    };
    use object_store::{ObjectStore, ObjectStoreExt as _, memory::InMemory, path::Path};

    use super::*;

    fn batch(start: i32, rows: i32) -> RecordBatch {
        let point = Fields::from(vec![
            Field::new("x", DataType::Int32, true),
            Field::new("label", DataType::Utf8, true),
        ]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new_list_field(DataType::Int32, true))),
                true,
            ),
            Field::new("point", DataType::Struct(point.clone()), true),
        ]));
        let ids: Vec<i32> = (start..start + rows).collect();
        let tags =
            ListArray::from_iter_primitive::<Int32Type, _, _>(ids.iter().map(|i| {
                (i % 4 != 0).then(|| (0..i % 3).map(|t| Some(i + t)).collect::<Vec<_>>())
            }));
        let point = StructArray::new(
            point,
            vec![
                Arc::new(Int32Array::from_iter(ids.iter().map(|i| Some(i * 2)))),
                Arc::new(StringArray::from_iter(
                    ids.iter().map(|i| (i % 5 != 0).then(|| format!("p{i}"))),
                )),
            ],
            None,
        );
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(ids)),
                Arc::new(tags),
                Arc::new(point),
            ],
        )
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn row_groups_encoded_at_once_keep_their_rows_in_order() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = Path::from("out.parquet");
        // Batches that straddle row groups of 1,000 rows: 11 groups, the
        // last one short, more than ENCODING_AHEAD running at a time.
        let batches: Vec<_> = (0..14).map(|i| batch(i * 777, 777)).collect();
        let schema = batches[0].schema();
        let upload = BufWriter::new(store.clone(), path.clone());
        let mut writer = ParquetRowGroupWriter::try_new(
            upload,
            schema.clone(),
            WriterProperties::default(),
            1000,
        )
        .unwrap();
        for batch in &batches {
            writer.write(batch).await.unwrap();
        }
        let size = writer.close().await.unwrap();
        let bytes = crate::lake::stored_bytes(store.as_ref(), "out.parquet").await;
        assert_eq!(size, bytes.len() as u64, "close tells the file's size");
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        let groups: Vec<i64> = reader
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows())
            .collect();
        assert_eq!(groups.len(), 11);
        assert!(groups[..10].iter().all(|rows| *rows == 1000));
        assert_eq!(groups[10], 14 * 777 - 10_000);
        assert_eq!(reader.schema(), &schema, "the Arrow schema is embedded");
        let read: Vec<RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
        assert_eq!(
            concat_batches(&schema, &read).unwrap(),
            concat_batches(&schema, &batches).unwrap()
        );
    }

    #[tokio::test]
    async fn a_writer_dropped_before_close_leaves_no_file() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = Path::from("dropped.parquet");
        let upload = BufWriter::new(store.clone(), path.clone());
        let mut writer = ParquetRowGroupWriter::try_new(
            upload,
            batch(0, 1).schema(),
            WriterProperties::default(),
            10,
        )
        .unwrap();
        writer.write(&batch(0, 35)).await.unwrap();
        drop(writer);
        assert!(store.head(&path).await.is_err());
    }
}
