//! A finished query's typed result sent to a Flight SQL client: its record
//! batches (`query::ipc_batches`, decoded as the file's bytes arrive)
//! re-framed as Flight data.

use std::io;

use bytes::Bytes;
use futures::{TryStreamExt as _, stream::BoxStream};
use tonic::Status;

use arrow_flight::{encode::FlightDataEncoderBuilder, error::FlightError};

use super::DoGetStream;
use crate::query::ipc_batches::IpcBatches;

/// The Flight data of the Arrow IPC stream `bytes`: its schema first (also
/// for a result without rows), then each batch.
pub async fn flight_data_of(
    bytes: BoxStream<'static, io::Result<Bytes>>,
) -> Result<DoGetStream, Status> {
    let mut batches = IpcBatches::new(bytes);
    let schema = batches
        .schema()
        .await
        .map_err(|e| internal(FlightError::Arrow(e)))?;
    let batches = batches.into_stream().map_err(FlightError::Arrow);
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(batches)
        .map_err(internal);
    Ok(Box::pin(data))
}

/// A failure reading or framing a result: logged, and the client gets the
/// generic text (the error may name lake paths).
pub fn internal(error: FlightError) -> Status {
    super::status::status_of(crate::query::QueryError::Internal(format!(
        "sending flight data: {error}"
    )))
}
