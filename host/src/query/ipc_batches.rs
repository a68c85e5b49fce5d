//! A stored query's typed result (its Arrow IPC stream file, kept beside
//! the CSV) read back as record batches, decoded as the file's bytes arrive
//! from the lake, so no result is held whole in memory. The wire front ends
//! (Flight SQL, Postgres) send these.

use std::io;

use bytes::Bytes;
use datafusion::arrow::{
    array::RecordBatch, buffer::Buffer, datatypes::SchemaRef, error::ArrowError,
    ipc::reader::StreamDecoder,
};
use futures::{StreamExt as _, stream::BoxStream};

/// The record batches of an Arrow IPC stream, decoded as its bytes come.
pub struct IpcBatches {
    bytes: BoxStream<'static, io::Result<Bytes>>,
    decoder: StreamDecoder,
    buffer: Buffer,
    /// A batch decoded while looking for the schema.
    pending: Option<RecordBatch>,
}

impl IpcBatches {
    pub fn new(bytes: BoxStream<'static, io::Result<Bytes>>) -> Self {
        Self {
            bytes,
            decoder: StreamDecoder::new(),
            buffer: Buffer::from(Vec::<u8>::new()),
            pending: None,
        }
    }

    /// Takes the file's next chunk of bytes; false at its end.
    async fn fill(&mut self) -> Result<bool, ArrowError> {
        match self.bytes.next().await {
            Some(chunk) => {
                let chunk = chunk
                    .map_err(|e| ArrowError::IoError(format!("reading the result: {e}"), e))?;
                self.buffer = Buffer::from(chunk);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The next message that is a batch; `None` at the stream's end.
    pub async fn next_batch(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        if let Some(batch) = self.pending.take() {
            return Ok(Some(batch));
        }
        loop {
            if !self.buffer.is_empty() {
                if let Some(batch) = self.decoder.decode(&mut self.buffer)? {
                    return Ok(Some(batch));
                }
            } else if !self.fill().await? {
                self.decoder.finish()?;
                return Ok(None);
            }
        }
    }

    /// The stream's schema (its first message).
    pub async fn schema(&mut self) -> Result<SchemaRef, ArrowError> {
        loop {
            if let Some(schema) = self.decoder.schema() {
                return Ok(schema);
            }
            if !self.buffer.is_empty() {
                if let Some(batch) = self.decoder.decode(&mut self.buffer)? {
                    let schema = batch.schema();
                    self.pending = Some(batch);
                    return Ok(schema);
                }
            } else if !self.fill().await? {
                return Err(ArrowError::IpcError("the result file has no schema".into()));
            }
        }
    }

    /// The remaining batches as a stream.
    pub fn into_stream(self) -> BoxStream<'static, Result<RecordBatch, ArrowError>> {
        Box::pin(futures::stream::try_unfold(
            self,
            |mut batches| async move { Ok(batches.next_batch().await?.map(|batch| (batch, batches))) },
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::{
        array::{Int64Array, StringArray},
        datatypes::{DataType, Field, Schema},
        ipc::writer::StreamWriter,
    };

    use super::*;

    /// An Arrow IPC stream of `batches` (of `schema`).
    fn ipc(schema: &Schema, batches: &[RecordBatch]) -> Vec<u8> {
        let mut writer = StreamWriter::try_new(Vec::new(), schema).unwrap();
        for batch in batches {
            writer.write(batch).unwrap();
        }
        writer.into_inner().unwrap()
    }

    /// `bytes` arriving `chunk` bytes at a time.
    fn chunked(bytes: Vec<u8>, chunk: usize) -> BoxStream<'static, io::Result<Bytes>> {
        let chunks: Vec<io::Result<Bytes>> = bytes
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        Box::pin(futures::stream::iter(chunks))
    }

    async fn decoded(
        bytes: Vec<u8>,
        chunk: usize,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), ArrowError> {
        let mut batches = IpcBatches::new(chunked(bytes, chunk));
        let schema = batches.schema().await?;
        let mut all = Vec::new();
        while let Some(batch) = batches.next_batch().await? {
            all.push(batch);
        }
        Ok((schema, all))
    }

    #[tokio::test]
    async fn results_decode_whatever_the_chunks_and_empty_results_keep_their_schema() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            ],
        )
        .unwrap();
        let bytes = ipc(&schema, &[batch.clone(), batch.clone()]);
        for chunk in [1, 7, bytes.len()] {
            let (got, batches) = decoded(bytes.clone(), chunk).await.unwrap();
            assert_eq!(got, schema);
            assert_eq!(
                batches,
                vec![batch.clone(), batch.clone()],
                "chunks of {chunk}"
            );
        }
        let (got, batches) = decoded(ipc(&schema, &[]), 1).await.unwrap();
        assert_eq!((got, batches.len()), (schema.clone(), 0));
        let nothing = Schema::empty();
        let (got, batches) = decoded(ipc(&nothing, &[]), 3).await.unwrap();
        assert_eq!((got.fields().len(), batches.len()), (0, 0));
    }

    #[tokio::test]
    async fn a_cut_or_foreign_file_is_an_error_not_rows() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![7]))])
            .unwrap();
        let bytes = ipc(&schema, &[batch]);
        let cut = bytes[..bytes.len() - 12].to_vec();
        assert!(decoded(cut, 5).await.is_err());
        assert!(
            decoded(b"not an arrow stream at all".to_vec(), 4)
                .await
                .is_err()
        );
        assert!(decoded(Vec::new(), 1).await.is_err());
    }
}
