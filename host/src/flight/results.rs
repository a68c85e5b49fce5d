//! Rows sent to a Flight SQL client as Flight data: a streamed run's batches
//! as the engine sends them, or a finished stored job's typed result (its
//! record batches decoded by `query::ipc_batches` as the file's bytes
//! arrive).

use std::io;

use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _, stream::BoxStream};
use tonic::Status;

use arrow_flight::{encode::FlightDataEncoderBuilder, error::FlightError};

use super::DoGetStream;
use crate::query::{
    ipc_batches::IpcBatches,
    service::{StreamStop, StreamedRows},
};

/// A streamed run's rows: the schema first (also when no row comes), then
/// each batch as it comes (the encoder splits large ones for gRPC). A run
/// that ends short of SUCCEEDED ends the stream with its status.
pub fn streamed(rows: StreamedRows) -> DoGetStream {
    let id = rows.id;
    let batches = rows.batches.map(move |batch| {
        batch.map_err(|stop| {
            FlightError::Tonic(Box::new(match stop {
                StreamStop::Cancelled => super::statements::cancelled(&id),
                StreamStop::Failed(reason) => Status::aborted(reason),
            }))
        })
    });
    let data = FlightDataEncoderBuilder::new()
        .with_schema(rows.schema)
        .build(batches)
        .map_err(|error| match error {
            FlightError::Tonic(status) => *status,
            other => internal(other),
        });
    Box::pin(data)
}

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
