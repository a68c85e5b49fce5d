//! A finished query's typed result (its Arrow IPC stream file, kept beside
//! the CSV) sent to a Flight SQL client: the file's bytes are decoded into
//! record batches as they arrive from the lake and re-framed as Flight data,
//! so no result is held whole in memory.

use std::io;

use bytes::Bytes;
use datafusion::arrow::{
    array::RecordBatch, buffer::Buffer, datatypes::SchemaRef, ipc::reader::StreamDecoder,
};
use futures::{StreamExt as _, TryStreamExt as _, stream::BoxStream};
use tonic::Status;

use arrow_flight::{encode::FlightDataEncoderBuilder, error::FlightError};

use super::DoGetStream;

/// The record batches of an Arrow IPC stream, decoded as its bytes come.
struct IpcBatches {
    bytes: BoxStream<'static, io::Result<Bytes>>,
    decoder: StreamDecoder,
    buffer: Buffer,
    /// A batch decoded while looking for the schema.
    pending: Option<RecordBatch>,
}

impl IpcBatches {
    fn new(bytes: BoxStream<'static, io::Result<Bytes>>) -> Self {
        Self {
            bytes,
            decoder: StreamDecoder::new(),
            buffer: Buffer::from(Vec::<u8>::new()),
            pending: None,
        }
    }

    /// Takes the file's next chunk of bytes; false at its end.
    async fn fill(&mut self) -> Result<bool, FlightError> {
        match self.bytes.next().await {
            Some(chunk) => {
                let chunk = chunk.map_err(|e| FlightError::ExternalError(e.into()))?;
                self.buffer = Buffer::from(chunk);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The next message that is a batch; `None` at the stream's end.
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>, FlightError> {
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
    async fn schema(&mut self) -> Result<SchemaRef, FlightError> {
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
                return Err(FlightError::protocol("the result file has no schema"));
            }
        }
    }
}

/// The Flight data of the Arrow IPC stream `bytes`: its schema first (also
/// for a result without rows), then each batch.
pub async fn flight_data_of(
    bytes: BoxStream<'static, io::Result<Bytes>>,
) -> Result<DoGetStream, Status> {
    let mut batches = IpcBatches::new(bytes);
    let schema = batches.schema().await.map_err(|e| {
        tracing::error!(error = %e, "reading a typed result");
        Status::internal(crate::api::error::INTERNAL_MESSAGE)
    })?;
    let batches = futures::stream::try_unfold(batches, |mut batches| async move {
        Ok(batches.next_batch().await?.map(|batch| (batch, batches)))
    });
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(batches)
        .map_err(Status::from);
    Ok(Box::pin(data))
}
