//! Arrow IPC record batch messages encoded (and compressed) on tasks of
//! their own, a few at a time, and appended to the stream in their order:
//! a typed result's stream is compressed on every core while its query, or
//! its read-back, goes on. Each batch is made the stream's plain types
//! (`engine::layout::plain_batch`) where it is encoded.
//!
//! Only a compressed stream is encoded so: without a codec, encoding is a
//! copy, which a task of its own makes slower, not faster (measured on
//! lineitem: a query writing its uncompressed Arrow file took 1.50 s with
//! tasks, 1.08 s without). And only one whose columns hold no dictionary anywhere:
//! a dictionary is sent once, before the first batch that uses it, which
//! needs the one tracker the stream's own writer keeps, so such a stream is
//! encoded in order on its writer's task. Small batches with nothing in
//! flight are encoded in place: a task would cost more than it saves.

use std::collections::VecDeque;

use datafusion::arrow::{
    array::RecordBatch,
    datatypes::{DataType, SchemaRef},
    error::ArrowError,
    ipc::writer::{
        DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions, StreamWriter,
        write_message,
    },
};
use tokio::task::JoinHandle;

use crate::engine::layout::plain_batch;

/// Batches being encoded at once, ahead of the one appended next.
const ENCODING_AHEAD: usize = 3;

/// Batches of at most this many rows are encoded in place.
const ENCODE_INLINE_ROWS: usize = 1024;

/// Encodes a stream's record batches, on tasks when it can.
pub struct BatchEncoder {
    /// The stream's schema, in plain types.
    schema: SchemaRef,
    options: IpcWriteOptions,
    /// Whether batches may be encoded on tasks (no dictionaries).
    on_tasks: bool,
    /// The batches being encoded, in the stream's order.
    encoding: VecDeque<JoinHandle<Result<Vec<u8>, ArrowError>>>,
}

impl BatchEncoder {
    /// An encoder for a stream of `schema` (plain types) written with
    /// `options`, which say whether it is `compressed`.
    pub fn new(schema: SchemaRef, options: IpcWriteOptions, compressed: bool) -> Self {
        let on_tasks = compressed
            && !schema
                .fields()
                .iter()
                .any(|f| has_dictionary(f.data_type()));
        Self {
            schema,
            options,
            on_tasks,
            encoding: VecDeque::new(),
        }
    }

    /// Appends `batch` to `stream`: at once, or once it is encoded, which
    /// this waits for only while more than `ENCODING_AHEAD` are in flight.
    pub async fn write(
        &mut self,
        stream: &mut StreamWriter<Vec<u8>>,
        batch: RecordBatch,
    ) -> Result<(), ArrowError> {
        let in_place = batch.num_rows() <= ENCODE_INLINE_ROWS && self.encoding.is_empty();
        let schema = self.schema.clone();
        if !self.on_tasks || in_place {
            return stream.write(&plain_batch(&batch, &schema)?);
        }
        let options = self.options.clone();
        let task =
            tokio::spawn(async move { encode_message(&plain_batch(&batch, &schema)?, &options) });
        self.encoding.push_back(task);
        while self.encoding.len() > ENCODING_AHEAD {
            self.append_oldest(stream).await?;
        }
        Ok(())
    }

    /// Appends every batch still in flight.
    pub async fn drain(&mut self, stream: &mut StreamWriter<Vec<u8>>) -> Result<(), ArrowError> {
        while !self.encoding.is_empty() {
            self.append_oldest(stream).await?;
        }
        Ok(())
    }

    /// Stops every batch in flight (the stream is abandoned).
    pub fn abort(&mut self) {
        for task in self.encoding.drain(..) {
            task.abort();
        }
    }

    async fn append_oldest(
        &mut self,
        stream: &mut StreamWriter<Vec<u8>>,
    ) -> Result<(), ArrowError> {
        if let Some(task) = self.encoding.pop_front() {
            let message = task
                .await
                .map_err(|e| ArrowError::ExternalError(Box::new(e)))??;
            stream.get_mut().extend_from_slice(&message);
        }
        Ok(())
    }
}

/// `batch` as the bytes of its record batch message, as the stream's own
/// writer would write them (no dictionaries: `BatchEncoder::new`).
fn encode_message(batch: &RecordBatch, options: &IpcWriteOptions) -> Result<Vec<u8>, ArrowError> {
    let mut tracker = DictionaryTracker::new(false);
    let mut context = IpcWriteContext::default();
    let (dictionaries, message) =
        IpcDataGenerator::default().encode(batch, &mut tracker, options, &mut context)?;
    let mut bytes = Vec::with_capacity(message.ipc_message.len() + message.arrow_data.len() + 16);
    for dictionary in dictionaries {
        write_message(&mut bytes, dictionary, options)?;
    }
    write_message(&mut bytes, message, options)?;
    Ok(bytes)
}

/// Whether a column of `data_type` holds a dictionary, at any depth.
fn has_dictionary(data_type: &DataType) -> bool {
    match data_type {
        DataType::Dictionary(..) => true,
        DataType::List(field)
        | DataType::LargeList(field)
        | DataType::ListView(field)
        | DataType::LargeListView(field)
        | DataType::FixedSizeList(field, _)
        | DataType::Map(field, _) => has_dictionary(field.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| has_dictionary(f.data_type())),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| has_dictionary(f.data_type())),
        DataType::RunEndEncoded(_, values) => has_dictionary(values.data_type()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::{
        array::{Array as _, DictionaryArray, Int32Array, Int64Array, StringArray},
        datatypes::{Field, Int32Type, Schema},
        ipc::{CompressionType, reader::StreamReader},
    };

    use super::*;

    /// A stream of `batches` written through a `BatchEncoder`.
    async fn stream_of(
        batches: &[RecordBatch],
        options: IpcWriteOptions,
        compressed: bool,
    ) -> Vec<u8> {
        let schema = batches[0].schema();
        let mut stream =
            StreamWriter::try_new_with_options(Vec::new(), &schema, options.clone()).unwrap();
        let mut encoder = BatchEncoder::new(schema, options, compressed);
        for batch in batches {
            encoder.write(&mut stream, batch.clone()).await.unwrap();
        }
        encoder.drain(&mut stream).await.unwrap();
        stream.finish().unwrap();
        stream.into_inner().unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_encoded_on_tasks_are_the_stream_in_order_and_compressed() {
        // Big batches (on tasks) between small ones (in place when nothing
        // is in flight), more than are encoded at once.
        let mut next = 0i64;
        let batches: Vec<RecordBatch> = [3, 5000, 2, 9000, 4000, 1, 7000, 3000, 8000, 6000, 5]
            .into_iter()
            .map(|rows| {
                let n: Vec<i64> = (next..next + rows).collect();
                let text: Vec<String> = n.iter().map(|i| format!("row {i}")).collect();
                next += rows;
                RecordBatch::try_from_iter([
                    ("n", Arc::new(Int64Array::from(n)) as _),
                    ("t", Arc::new(StringArray::from(text)) as _),
                ])
                .unwrap()
            })
            .collect();
        for codec in [
            None,
            Some(CompressionType::LZ4_FRAME),
            Some(CompressionType::ZSTD),
        ] {
            let options = IpcWriteOptions::default()
                .try_with_compression(codec)
                .unwrap();
            let bytes = stream_of(&batches, options, codec.is_some()).await;
            let read: Vec<RecordBatch> = StreamReader::try_new(std::io::Cursor::new(bytes), None)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert_eq!(read, batches, "{codec:?}");
        }
    }

    #[tokio::test]
    async fn a_stream_with_dictionaries_is_encoded_in_order_by_its_writer() {
        let keys = Int32Array::from_iter_values((0..5000).map(|i| i % 3));
        let values = Arc::new(StringArray::from(vec!["a", "b", "c"]));
        let dictionary = DictionaryArray::<Int32Type>::try_new(keys, values).unwrap();
        let field = Field::new("d", dictionary.data_type().clone(), false);
        let schema = Arc::new(Schema::new(vec![field]));
        assert!(!BatchEncoder::new(schema.clone(), IpcWriteOptions::default(), true).on_tasks);
        let batch = RecordBatch::try_new(schema, vec![Arc::new(dictionary)]).unwrap();
        let batches = vec![batch.clone(), batch];
        let bytes = stream_of(&batches, IpcWriteOptions::default(), true).await;
        let read: Vec<RecordBatch> = StreamReader::try_new(std::io::Cursor::new(bytes), None)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(read, batches);
    }
}
