use std::sync::Arc;

use arrow_flight::utils::flight_data_to_batches;
use bytes::Buf as _;
use datafusion::arrow::{
    array::{Array as _, ArrayRef, DictionaryArray, Int64Array, RecordBatch, StringArray},
    datatypes::{DataType, Field, Int32Type, Schema},
};
use http_body_util::BodyExt as _;

use super::*;

fn grpc_message(message: &[u8]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    body
}

#[test]
fn a_ticket_is_read_from_one_uncompressed_grpc_message() {
    let ticket = Ticket::new(b"the handle".to_vec());
    let body = grpc_message(&ticket.encode_to_vec());
    assert_eq!(ticket_of(&body).unwrap(), ticket);

    let short = ticket_of(&body[..3]).unwrap_err();
    assert_eq!(short.code(), Code::InvalidArgument);
    let truncated = ticket_of(&body[..body.len() - 1]).unwrap_err();
    assert_eq!(truncated.code(), Code::InvalidArgument);
    let mut compressed = body.clone();
    compressed[0] = 1;
    assert_eq!(
        ticket_of(&compressed).unwrap_err().code(),
        Code::Unimplemented
    );
    let garbage = ticket_of(&grpc_message(&[0xff, 0xff, 0xff])).unwrap_err();
    assert_eq!(garbage.code(), Code::InvalidArgument);
    assert_eq!(garbage.message(), "the DoGet request is not a Ticket");
}

/// The body's data and its trailers.
async fn sent(response: Response) -> (Vec<u8>, HeaderMap) {
    assert_eq!(response.headers()[CONTENT_TYPE], "application/grpc");
    let mut body = response.into_body();
    let (mut data, mut trailers) = (Vec::new(), None);
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        assert!(trailers.is_none(), "nothing follows the trailers");
        match frame.into_data() {
            Ok(bytes) => data.extend_from_slice(&bytes),
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    (data, trailers.expect("the call ends with trailers"))
}

#[tokio::test]
async fn messages_end_with_ok_trailers_or_the_first_errors_status() {
    let ok: Messages = futures::stream::iter([
        Ok(vec![Bytes::from_static(b"ab"), Bytes::from_static(b"c")]),
        Ok(vec![Bytes::from_static(b"d")]),
    ])
    .boxed();
    let (data, trailers) = sent(grpc_response(ok)).await;
    assert_eq!(data, b"abcd");
    assert_eq!(trailers["grpc-status"], "0");

    let refused: Messages = futures::stream::iter([
        Ok(vec![Bytes::from_static(b"ab")]),
        Err(Status::permission_denied("not yours")),
        Ok(vec![Bytes::from_static(b"never")]),
    ])
    .boxed();
    let (data, trailers) = sent(grpc_response(refused)).await;
    assert_eq!(data, b"ab");
    assert_eq!(trailers["grpc-status"], "7");
    assert_eq!(trailers["grpc-message"], "not%20yours");
}

/// The batches in a gRPC body of FlightData messages.
fn batches_in(mut body: Bytes) -> Vec<RecordBatch> {
    let mut data = Vec::new();
    while body.has_remaining() {
        assert_eq!(body.get_u8(), 0);
        let len = body.get_u32() as usize;
        data.push(FlightData::decode(body.split_to(len)).unwrap());
    }
    flight_data_to_batches(&data).unwrap()
}

async fn body_of(messages: Messages) -> (Bytes, HeaderMap) {
    let (data, trailers) = sent(grpc_response(messages)).await;
    (Bytes::from(data), trailers)
}

#[tokio::test]
async fn rows_go_out_as_flight_data_and_a_failure_ends_them() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, true),
        Field::new("t", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef,
            Arc::new(StringArray::from(vec![None, Some("x")])),
        ],
    )
    .unwrap();
    let rows = |tail: Vec<Result<RecordBatch, Status>>| TicketRows {
        schema: schema.clone(),
        batches: futures::stream::iter([Ok(batch.clone())].into_iter().chain(tail)).boxed(),
    };

    let (body, trailers) = body_of(rows_messages(rows(vec![Ok(batch.clone())]))).await;
    assert_eq!(batches_in(body), [batch.clone(), batch.clone()]);
    assert_eq!(trailers["grpc-status"], "0");

    let failed = vec![Err(Status::aborted("the run failed")), Ok(batch.clone())];
    let (body, trailers) = body_of(rows_messages(rows(failed))).await;
    assert_eq!(batches_in(body), std::slice::from_ref(&batch));
    assert_eq!(trailers["grpc-status"], "10");

    // No rows at all: the schema still goes.
    let empty = TicketRows {
        schema: schema.clone(),
        batches: futures::stream::empty().boxed(),
    };
    let (body, _) = body_of(rows_messages(empty)).await;
    assert!(batches_in(body.clone()).is_empty());
    assert!(!body.is_empty());
}

#[tokio::test]
async fn dictionaries_are_sent_as_their_values_as_before() {
    let dictionary: DictionaryArray<Int32Type> = vec!["a", "b", "a"].into_iter().collect();
    let field = Field::new("d", dictionary.data_type().clone(), false);
    let schema = Arc::new(Schema::new(vec![field]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(dictionary)]).unwrap();
    let rows = TicketRows {
        schema,
        batches: futures::stream::iter([Ok(batch)]).boxed(),
    };
    let (body, trailers) = body_of(rows_messages(rows)).await;
    let back = batches_in(body);
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].column(0).data_type(), &DataType::Utf8);
    let values: &StringArray = back[0].column(0).as_any().downcast_ref().unwrap();
    assert_eq!(
        values.iter().collect::<Vec<_>>(),
        [Some("a"), Some("b"), Some("a")]
    );
    assert_eq!(trailers["grpc-status"], "0");
}
