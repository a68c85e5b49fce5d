use std::sync::Arc;

use arrow_flight::{FlightData, utils::flight_data_to_batches};
use bytes::{Buf as _, Bytes};
use datafusion::arrow::{
    array::{
        Array, ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Int64Array,
        LargeStringArray, ListArray, StringArray, StructArray,
    },
    datatypes::{DataType, Field, Int32Type, Schema},
};
use prost::Message as _;

use super::*;

/// The FlightData messages in the gRPC body `chunks` (each message: a
/// zero compression flag, its length, its protobuf).
fn decode(chunks: &[Bytes]) -> Vec<FlightData> {
    let mut body: Bytes = chunks.concat().into();
    let mut messages = Vec::new();
    while body.has_remaining() {
        assert_eq!(body.get_u8(), 0, "messages are not compressed");
        let len = body.get_u32() as usize;
        messages.push(FlightData::decode(body.split_to(len)).expect("a FlightData message"));
    }
    messages
}

/// The batches Flight data `chunks` carry after the schema's `head`.
fn read_back(head: &[Bytes], chunks: &[Bytes]) -> Vec<RecordBatch> {
    let mut data = decode(head);
    data.extend(decode(chunks));
    flight_data_to_batches(&data).expect("arrow-flight reads the messages")
}

fn mixed_batch() -> RecordBatch {
    let list = ListArray::from_iter_primitive::<Int32Type, _, _>([
        Some(vec![Some(1), None, Some(3)]),
        None,
        Some(vec![]),
        Some(vec![Some(7)]),
    ]);
    let point = StructArray::from(vec![
        (
            Arc::new(Field::new("x", DataType::Int64, true)),
            Arc::new(Int64Array::from(vec![Some(1), None, Some(3), Some(4)])) as ArrayRef,
        ),
        (
            Arc::new(Field::new("label", DataType::Utf8, true)),
            Arc::new(StringArray::from(vec![
                Some("a"),
                Some(""),
                None,
                Some("δ"),
            ])) as ArrayRef,
        ),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![
            Some(1),
            None,
            Some(-3),
            Some(i64::MAX),
        ])),
        Arc::new(StringArray::from(vec![
            Some("alpha"),
            None,
            Some(""),
            Some("ω long text"),
        ])),
        Arc::new(LargeStringArray::from(vec!["a", "bb", "ccc", "dddd"])),
        Arc::new(BinaryArray::from(vec![
            &b"\x00\x01"[..],
            b"",
            b"\xff",
            b"x",
        ])),
        Arc::new(BooleanArray::from(vec![
            Some(true),
            None,
            Some(false),
            Some(true),
        ])),
        Arc::new(Date32Array::from(vec![0, 19_000, -1, 20_000])),
        Arc::new(
            Decimal128Array::from(vec![Some(12_345), None, Some(-1), Some(0)])
                .with_precision_and_scale(15, 2)
                .unwrap(),
        ),
        Arc::new(list),
        Arc::new(point),
    ];
    let fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, column)| Field::new(format!("c{i}"), column.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

#[test]
fn batches_of_every_kind_of_column_read_back_equal() {
    let batch = mixed_batch();
    let schema = batch.schema();
    let head = FlightFrames::schema(&schema).unwrap();
    let mut frames = FlightFrames::new(&schema).unwrap();
    let mut chunks = frames.batch(&batch).unwrap();
    // A slice (offsets not at zero) and an empty batch, in the same stream.
    chunks.extend(frames.batch(&batch.slice(1, 3)).unwrap());
    chunks.extend(frames.batch(&batch.slice(0, 0)).unwrap());

    let back = read_back(&head, &chunks);
    assert_eq!(back.len(), 3);
    assert_eq!(back[0], batch);
    assert_eq!(back[1], batch.slice(1, 3));
    assert_eq!(back[2].num_rows(), 0);
    assert_eq!(back[2].schema(), schema);
}

#[test]
fn the_schema_alone_makes_a_stream_without_rows() {
    let schema = mixed_batch().schema();
    let data = decode(&FlightFrames::schema(&schema).unwrap());
    assert_eq!(data.len(), 1, "one message: the schema");
    assert!(data[0].data_body.is_empty());
    assert!(flight_data_to_batches(&data).unwrap().is_empty());
}

#[test]
fn long_buffers_are_sent_from_the_arrays_own_memory() {
    let values: Int64Array = (0..100_000).collect();
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(values.clone())]).unwrap();
    let chunks = FlightFrames::new(&schema).unwrap().batch(&batch).unwrap();

    let values_at = values.values().inner().as_ptr();
    let shared = chunks
        .iter()
        .find(|chunk| chunk.as_ptr() == values_at)
        .expect("the values buffer is one of the chunks, not a copy");
    assert_eq!(shared.len(), 800_000);
    assert_eq!(
        read_back(&FlightFrames::schema(&schema).unwrap(), &chunks),
        [batch]
    );
}

#[test]
fn a_large_batch_goes_as_several_messages_under_the_cap() {
    let rows = 600_000;
    let text: StringArray = (0..rows).map(|i| Some(format!("row number {i}"))).collect();
    let numbers: Int64Array = (0..rows as i64).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new("t", DataType::Utf8, false),
    ]));
    let batch =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(numbers), Arc::new(text)]).unwrap();
    let chunks = FlightFrames::new(&schema).unwrap().batch(&batch).unwrap();

    let messages = decode(&chunks);
    assert!(messages.len() >= 6, "{} messages", messages.len());
    for message in &messages {
        assert!(message.encoded_len() <= MAX_MESSAGE_BYTES + 4096);
    }
    let back = read_back(&FlightFrames::schema(&schema).unwrap(), &chunks);
    let rows_back: usize = back.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows_back, rows);
    let joined = datafusion::arrow::compute::concat_batches(&schema, &back).unwrap();
    assert_eq!(joined, batch);
}

#[test]
fn short_pieces_are_copied_together_into_few_chunks() {
    let batch = mixed_batch();
    let chunks = FlightFrames::new(&batch.schema())
        .unwrap()
        .batch(&batch)
        .unwrap();
    // Four rows of nine small columns: prefix, header and every buffer in
    // one chunk, not one per piece.
    assert_eq!(chunks.len(), 1);
}

#[test]
fn a_batch_with_other_columns_than_the_schemas_is_refused() {
    let batch = mixed_batch();
    let other = Schema::new(vec![Field::new("n", DataType::Int64, true)]);
    let mut frames = FlightFrames::new(&other).unwrap();
    let error = frames.batch(&batch).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("differ from the result's schema"),
        "{error}"
    );
}

#[test]
fn dictionaries_anywhere_go_through_arrow_flights_encoder() {
    let dictionary = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let plain = mixed_batch().schema();
    assert!(sendable(&plain));
    assert!(!sendable(&Schema::new(vec![Field::new(
        "d",
        dictionary.clone(),
        true
    )])));
    let nested = DataType::List(Arc::new(Field::new("item", dictionary.clone(), true)));
    assert!(!sendable(&Schema::new(vec![Field::new("l", nested, true)])));
    let in_struct = DataType::Struct(vec![Field::new("s", dictionary, true)].into());
    assert!(!sendable(&Schema::new(vec![Field::new(
        "s", in_struct, true
    )])));
}
