//! Rows sent to a Flight SQL client: a streamed run's batches as the engine
//! sends them, or a finished stored job's typed result (its record batches
//! decoded by `query::ipc_batches` as the file's bytes arrive). `DoGet`
//! frames them itself (`direct_get.rs`); `into_flight_data` is the same rows
//! as arrow-flight's encoder makes them.

use std::io;

use bytes::Bytes;
use datafusion::arrow::{array::RecordBatch, datatypes::SchemaRef};
use futures::{StreamExt as _, TryStreamExt as _, stream::BoxStream};
use tonic::{Code, Status};

use arrow_flight::{encode::FlightDataEncoderBuilder, error::FlightError};

use super::DoGetStream;
use crate::query::{
    ipc_batches::IpcBatches,
    service::{StreamStop, StreamedRows},
};

/// A statement's result for `DoGet`: its schema (sent also when no row
/// comes), then its batches; an error ends the call with its status.
pub struct TicketRows {
    pub schema: SchemaRef,
    pub batches: BoxStream<'static, Result<RecordBatch, Status>>,
}

impl TicketRows {
    /// A streamed run's rows. A run that ends short of SUCCEEDED ends the
    /// stream with its status. A stream dropped before its end stops the
    /// query FAILED, "the client went away" (`query::execute`): gRPC does
    /// not tell the server a client's cancel from a lost connection or one
    /// closed idle because its client stopped reading, so no drop is taken
    /// for the client's stop on purpose.
    pub fn streamed(rows: StreamedRows) -> Self {
        let id = rows.id;
        let batches = rows.batches.map(move |batch| {
            batch.map_err(|stop| match stop {
                StreamStop::Cancelled => super::statements::cancelled(&id),
                StreamStop::Failed(reason) => super::status::bounded(Code::Aborted, reason),
            })
        });
        Self {
            schema: rows.schema,
            batches: batches.boxed(),
        }
    }

    /// The rows of the Arrow IPC stream `bytes`.
    pub async fn stored(bytes: BoxStream<'static, io::Result<Bytes>>) -> Result<Self, Status> {
        let mut batches = IpcBatches::new(bytes);
        let schema = batches
            .schema()
            .await
            .map_err(|e| internal(FlightError::Arrow(e)))?;
        let batches = batches
            .into_stream()
            .map_err(|e| internal(FlightError::Arrow(e)));
        Ok(Self {
            schema,
            batches: batches.boxed(),
        })
    }

    /// The rows as arrow-flight's encoder makes Flight data of them (it
    /// splits large batches for gRPC and sends dictionaries' values).
    pub fn into_flight_data(self) -> DoGetStream {
        let batches = self
            .batches
            .map_err(|status| FlightError::Tonic(Box::new(status)));
        let data = FlightDataEncoderBuilder::new()
            .with_schema(self.schema)
            .build(batches)
            .map_err(|error| match error {
                FlightError::Tonic(status) => *status,
                other => internal(other),
            });
        Box::pin(data)
    }
}

/// A failure reading or framing a result: logged, and the client gets the
/// generic text (the error may name lake paths).
pub fn internal(error: FlightError) -> Status {
    super::status::status_of(crate::query::QueryError::internal(
        "sending flight data",
        error,
    ))
}
