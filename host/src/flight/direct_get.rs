//! `DoGet` answered by lakehost's own route instead of tonic's generated
//! service, so that a statement's rows reach the socket without being
//! copied (`frames.rs`); the rows are the bulk of what Flight SQL sends.
//! Every other ticket (the catalog listings) is answered by the same Flight
//! SQL service as before, its messages framed as protobuf as they come.
//!
//! The call is what gRPC makes it: one uncompressed `Ticket` message in the
//! request, `application/grpc` messages in the answer, then trailers with
//! the status (`grpc-status`, `grpc-message`). A call refused before any row
//! is a trailers-only answer, as tonic's. Compressed requests are refused as
//! tonic refuses them (lakehost accepts no compression), and the answer is
//! never compressed.

use std::{convert::Infallible, sync::Arc};

use arrow_flight::{
    FlightData, Ticket,
    flight_service_server::FlightService as _,
    sql::{Any, TicketStatementQuery},
};
use axum::{
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, header::CONTENT_TYPE},
    response::Response,
};
use bytes::{BufMut as _, Bytes};
use futures::{StreamExt as _, TryStreamExt as _, stream::BoxStream};
use http_body_util::{BodyExt as _, Limited, StreamBody};
use hyper::body::Frame;
use prost::Message as _;
use tonic::{Code, Status, metadata::MetadataMap};

use super::{
    DoGetStream, LakeFlightSql,
    frames::{self, FlightFrames},
    results::{TicketRows, internal},
};

/// The gRPC path of `DoGet`.
pub const PATH: &str = "/arrow.flight.protocol.FlightService/DoGet";

/// A request larger than this is refused (a ticket is a few hundred bytes;
/// tonic's default limit is 4 MiB).
const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The answer's messages, each as body chunks; an error ends the call with
/// its status.
type Messages = BoxStream<'static, Result<Vec<Bytes>, Status>>;

/// The route's handler.
pub async fn do_get(State(service): State<Arc<LakeFlightSql>>, request: Request) -> Response {
    match answer(&service, request).await {
        Ok(messages) => grpc_response(messages),
        Err(status) => status.into_http(),
    }
}

async fn answer(service: &LakeFlightSql, request: Request) -> Result<Messages, Status> {
    let (parts, body) = request.into_parts();
    if let Some(encoding) = parts.headers.get("grpc-encoding")
        && encoding != "identity"
    {
        return Err(Status::unimplemented(format!(
            "Content is compressed with `{}` which isn't supported",
            super::status::echo(encoding.to_str().unwrap_or("?"))
        )));
    }
    let body = Limited::new(body, MAX_REQUEST_BYTES)
        .collect()
        .await
        .map_err(|_| Status::resource_exhausted("the DoGet request is too large or broken"))?
        .to_bytes();
    let ticket = ticket_of(&body)?;
    let request = tonic::Request::from_parts(
        MetadataMap::from_headers(parts.headers),
        parts.extensions,
        ticket,
    );
    match statement_of(&request.get_ref().ticket) {
        Some(statement) => Ok(rows_messages(service.rows_of(&statement, &request).await?)),
        None => Ok(data_messages(service.do_get(request).await?.into_inner())),
    }
}

/// The request's one gRPC message, as a `Ticket`.
fn ticket_of(body: &[u8]) -> Result<Ticket, Status> {
    let malformed = || Status::invalid_argument("the DoGet request is not one gRPC message");
    let (prefix, message) = body.split_at_checked(5).ok_or_else(malformed)?;
    if prefix[0] != 0 {
        return Err(Status::unimplemented(
            "the DoGet request is compressed: lakehost accepts no compression",
        ));
    }
    let len = u32::from_be_bytes(prefix[1..].try_into().expect("four bytes")) as usize;
    if len != message.len() {
        return Err(malformed());
    }
    Ticket::decode(message)
        .map_err(|_| Status::invalid_argument("the DoGet request is not a Ticket"))
}

/// The statement ticket `ticket` holds, if it is one (others are listings).
fn statement_of(ticket: &[u8]) -> Option<TicketStatementQuery> {
    Any::decode(ticket).ok()?.unpack().ok().flatten()
}

/// A result's rows as messages: the schema's, then each batch's, its buffers
/// shared (a schema with dictionaries goes through arrow-flight's encoder).
fn rows_messages(rows: TicketRows) -> Messages {
    if !frames::sendable(&rows.schema) {
        return data_messages(rows.into_flight_data());
    }
    let schema = rows.schema.clone();
    let (head, mut frames) = match FlightFrames::schema(&schema)
        .and_then(|head| Ok((head, FlightFrames::new(&schema)?)))
    {
        Ok(encoders) => encoders,
        Err(error) => {
            return futures::stream::once(async move { Err(internal(error.into())) }).boxed();
        }
    };
    let batches = rows.batches.map(move |batch| {
        batch.and_then(|batch| frames.batch(&batch).map_err(|e| internal(e.into())))
    });
    futures::stream::once(async move { Ok(head) })
        .chain(batches)
        .boxed()
}

/// Flight data made by arrow-flight, each message encoded as protobuf.
fn data_messages(data: DoGetStream) -> Messages {
    data.map_ok(|data| vec![message_frame(&data)]).boxed()
}

/// `data` as one gRPC message (the prefix, then its protobuf).
fn message_frame(data: &FlightData) -> Bytes {
    let len = data.encoded_len();
    let mut frame = Vec::with_capacity(5 + len);
    frame.put_u8(0);
    frame.put_u32(u32::try_from(len).expect("arrow-flight cuts messages to a few MiB"));
    data.encode(&mut frame)
        .expect("the frame has room for the message");
    Bytes::from(frame)
}

/// The answer: the messages, then trailers with the status of the call (the
/// first error's, else OK).
fn grpc_response(messages: Messages) -> Response {
    let frames = futures::stream::unfold(Some(messages), |sending| async move {
        let mut messages = sending?;
        let last = match messages.next().await {
            Some(Ok(chunks)) => {
                let frames = chunks.into_iter().map(Frame::data).collect::<Vec<_>>();
                return Some((frames, Some(messages)));
            }
            Some(Err(status)) => trailers(&status),
            None => trailers(&Status::new(Code::Ok, "")),
        };
        Some((vec![last], None))
    })
    .flat_map(futures::stream::iter)
    .map(Ok::<_, Infallible>);
    let mut response = Response::new(Body::new(StreamBody::new(frames)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

/// The trailers that end a call with `status`.
fn trailers(status: &Status) -> Frame<Bytes> {
    let mut headers = HeaderMap::new();
    if status.add_header(&mut headers).is_err() {
        headers.insert("grpc-status", HeaderValue::from_static("13"));
    }
    super::status::bound_message(&mut headers);
    Frame::trailers(headers)
}

#[cfg(test)]
#[path = "direct_get_tests.rs"]
mod tests;
