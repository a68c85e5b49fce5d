//! The CSV's text of each canonical type's edge values reads back as the
//! very same values, in any chunking; malformed text is an error.

use std::sync::Arc;

use datafusion::arrow::{
    array::{
        Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array,
        Int8Array, Int16Array, Int32Array, Int64Array, RecordBatch, StringArray, StringViewArray,
    },
    compute::concat_batches,
    datatypes::{DataType, Field, Schema, TimeUnit},
};

use super::*;
use crate::{
    engine::columns::columns_of,
    query::csv_text::{encode_rows, push_quoted},
};

/// The spec's CSV of `batch`, as the result writer writes it.
fn csv_of(batch: &RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, field) in batch.schema().fields().iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_quoted(&mut out, field.name());
    }
    out.push(b'\n');
    encode_rows(batch, &mut out).unwrap();
    out
}

fn read_back(schema: SchemaRef, csv: &[u8], chunk: usize) -> Result<RecordBatch, ArrowError> {
    let mut reader = CsvReadBack::new(schema.clone());
    let mut batches = Vec::new();
    for part in csv.chunks(chunk.max(1)) {
        batches.extend(reader.push(part)?);
    }
    batches.extend(reader.finish()?);
    concat_batches(&schema, &batches)
}

fn edge_batch() -> RecordBatch {
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "flag",
            Arc::new(BooleanArray::from(vec![
                Some(true),
                Some(false),
                None,
                Some(true),
            ])),
        ),
        (
            "tiny",
            Arc::new(Int8Array::from(vec![
                Some(i8::MIN),
                Some(i8::MAX),
                None,
                Some(0),
            ])),
        ),
        (
            "small",
            Arc::new(Int16Array::from(vec![
                Some(i16::MIN),
                Some(i16::MAX),
                Some(-1),
                None,
            ])),
        ),
        (
            "int",
            Arc::new(Int32Array::from(vec![
                Some(i32::MIN),
                None,
                Some(i32::MAX),
                Some(7),
            ])),
        ),
        (
            "big",
            Arc::new(Int64Array::from(vec![
                Some(i64::MIN),
                Some(i64::MAX),
                None,
                Some(-42),
            ])),
        ),
        (
            "real",
            Arc::new(Float32Array::from(vec![
                Some(f32::NAN),
                Some(f32::MIN_POSITIVE),
                Some(-0.0),
                Some(0.1),
            ])),
        ),
        (
            "double",
            Arc::new(Float64Array::from(vec![
                Some(f64::INFINITY),
                Some(f64::NEG_INFINITY),
                Some(1e300),
                Some(0.1 + 0.2),
            ])),
        ),
        (
            "double_edges",
            Arc::new(Float64Array::from(vec![
                Some(f64::NAN),
                Some(-0.0),
                Some(f64::MIN_POSITIVE / 4.0),
                None,
            ])),
        ),
        (
            "money",
            Arc::new(
                Decimal128Array::from(vec![
                    Some(i128::from(i64::MAX) * 1000 + 999),
                    Some(-5),
                    Some(0),
                    None,
                ])
                .with_precision_and_scale(38, 3)
                .unwrap(),
            ),
        ),
        (
            "whole",
            Arc::new(
                Decimal128Array::from(vec![Some(99_999), Some(-99_999), None, Some(1)])
                    .with_precision_and_scale(5, 0)
                    .unwrap(),
            ),
        ),
        (
            "day",
            Arc::new(Date32Array::from(vec![
                Some(0),
                Some(-719_528),   // 0000-01-01
                Some(2_932_897),  // 10000-01-01
                Some(-1_000_000), // before year 0
            ])),
        ),
        (
            "text",
            Arc::new(StringArray::from(vec![
                Some(""),
                Some("say \"hi\", then\nleave\r\n"),
                None,
                Some("ünïcødé ,\"\""),
            ])),
        ),
    ];
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array)| Field::new(*name, array.data_type().clone(), true))
        .collect();
    let arrays = columns.into_iter().map(|(_, array)| array).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
}

/// Equal as values, NaN included (NaN != NaN under PartialEq of floats).
fn assert_same(expected: &RecordBatch, actual: &RecordBatch) {
    assert_eq!(expected.schema(), actual.schema());
    assert_eq!(expected.num_rows(), actual.num_rows());
    for (i, (left, right)) in expected.columns().iter().zip(actual.columns()).enumerate() {
        assert_eq!(left.to_data(), right.to_data(), "column {i}");
    }
}

#[test]
fn every_edge_value_reads_back_the_same_in_any_chunking() {
    let batch = edge_batch();
    assert!(reads_back(&batch.schema()));
    let schema = schema_of(&columns_of(&batch.schema())).expect("readable");
    assert_eq!(schema, batch.schema());
    let csv = csv_of(&batch);
    for chunk in [1, 2, 3, 7, 64, csv.len()] {
        let back = read_back(schema.clone(), &csv, chunk).unwrap();
        assert_same(&batch, &back);
    }
}

#[test]
fn many_rows_come_back_in_batches_of_batch_rows() {
    let rows = BATCH_ROWS * 2 + 5;
    let numbers = Int64Array::from_iter_values(0..rows as i64);
    let text: StringViewArray = (0..rows).map(|i| Some(format!("row {i}"))).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new("s", DataType::Utf8View, true),
    ]));
    let batch =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(numbers), Arc::new(text)]).unwrap();
    assert!(reads_back(&schema));
    let back_schema = schema_of(&columns_of(&schema)).unwrap();
    assert_eq!(back_schema.field(1).data_type(), &DataType::Utf8);
    let mut reader = CsvReadBack::new(back_schema.clone());
    let mut batches = reader.push(&csv_of(&batch)).unwrap();
    assert_eq!(batches.len(), 2);
    batches.extend(reader.finish().unwrap());
    assert_eq!(
        batches
            .iter()
            .map(RecordBatch::num_rows)
            .collect::<Vec<_>>(),
        vec![BATCH_ROWS, BATCH_ROWS, 5]
    );
    let back = concat_batches(&back_schema, &batches).unwrap();
    let strings = back
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(strings.value(rows - 1), format!("row {}", rows - 1));
    assert_eq!(back.column(0).to_data(), batch.column(0).to_data());
}

#[test]
fn one_column_of_nulls_is_a_line_per_row() {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, true)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int32Array::from(vec![None, Some(1), None]))],
    )
    .unwrap();
    let csv = csv_of(&batch);
    assert_eq!(csv, b"\"x\"\n\n\"1\"\n\n");
    assert_same(&batch, &read_back(schema, &csv, 1).unwrap());
}

#[test]
fn a_header_alone_is_no_rows_and_no_columns_is_no_text() {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Utf8, true)]));
    assert_eq!(read_back(schema, b"\"x\"\n", 1).unwrap().num_rows(), 0);
    let empty = Arc::new(Schema::empty());
    let reader = CsvReadBack::new(empty.clone());
    assert!(reader.finish().unwrap().is_none());
    let mut reader = CsvReadBack::new(empty);
    assert!(reader.push(b"x").is_err());
}

#[test]
fn types_whose_text_loses_bits_are_not_read_back() {
    for data_type in [
        DataType::Timestamp(TimeUnit::Microsecond, None),
        DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        DataType::UInt64,
        DataType::UInt8,
        DataType::Float16,
        DataType::LargeUtf8,
        DataType::Binary,
        DataType::Date64,
        DataType::Decimal256(50, 2),
        DataType::Time64(TimeUnit::Microsecond),
        DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
    ] {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", data_type.clone(), true),
        ]);
        assert!(!reads_back(&schema), "{data_type}");
    }
    let columns = columns_of(&Schema::new(vec![Field::new(
        "t",
        DataType::Timestamp(TimeUnit::Millisecond, None),
        true,
    )]));
    assert!(schema_of(&columns).is_none());
}

#[test]
fn malformed_text_is_an_error_never_a_panic() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Utf8, true),
    ]));
    for (csv, why) in [
        (&b"\"a\",\"b\"\n1,\"x\"\n"[..], "an unquoted value"),
        (b"\"a\",\"b\"\n\"1\"\n", "another number of fields"),
        (
            b"\"a\",\"b\"\n\"1\",\"x\",\"y\"\n",
            "another number of fields",
        ),
        (b"\"a\",\"b\"\n\"1\",\"x\"", "ends inside a line"),
        (b"\"a\",\"b\"\n\"1\",\"x", "ends inside a line"),
        (b"\"a\",\"b\"\n\"1\"x,\"y\"\n", "after a closing quote"),
        (b"\"a\",\"b\"\n\"one\",\"x\"\n", "\"one\" is not an integer"),
        (
            b"\"a\",\"b\"\n\"99999999999999999999\",\"x\"\n",
            "is not an integer",
        ),
        (b"\"a\",\"b\"\n\"1\",\"\xff\"\n", "not UTF-8"),
        (
            b"\"a\",\"b\"\n\"1\",\"x\"\n\"1\",\"y\"\n\"1\",\"z\"\n\"x",
            "ends inside a line",
        ),
        (b"", "no header line"),
    ] {
        let error = read_back(schema.clone(), csv, 3).unwrap_err().to_string();
        assert!(error.contains(why), "{why}: {error}");
    }
    // Dates that are no day, and an integer too wide for its column.
    let schema = Arc::new(Schema::new(vec![
        Field::new("d", DataType::Date32, true),
        Field::new("i", DataType::Int8, true),
    ]));
    for (csv, why) in [
        (&b"\"d\",\"i\"\n\"2021-02-29\",\"1\"\n"[..], "is not a date"),
        (b"\"d\",\"i\"\n\"2021-13-01\",\"1\"\n", "is not a date"),
        (
            b"\"d\",\"i\"\n\"2020-02-29\",\"128\"\n",
            "Can't cast value 128",
        ),
    ] {
        let error = read_back(schema.clone(), csv, 5).unwrap_err().to_string();
        assert!(error.contains(why), "{why}: {error}");
    }
}

#[test]
fn decimals_are_read_as_arrow_writes_them_and_nothing_else() {
    assert_eq!(parse_decimal(b"123.45", 2), Some(12_345));
    assert_eq!(parse_decimal(b"-0.05", 2), Some(-5));
    assert_eq!(parse_decimal(b"7", 0), Some(7));
    assert_eq!(parse_decimal(b"-99999", 0), Some(-99_999));
    for (text, scale) in [
        (&b"1.2"[..], 2),
        (b"12", 2),
        (b".05", 2),
        (b"1,05", 2),
        (b"1.x5", 2),
        (b"1.5", 0),
        (b"", 0),
        (b"-", 0),
        (b"--1", 0),
        (b"1e5", 0),
        (b"1234567890123456789012345678901234567890", 0),
    ] {
        assert_eq!(parse_decimal(text, scale), None, "{text:?}");
    }
    let schema = Arc::new(Schema::new(vec![Field::new(
        "d",
        DataType::Decimal128(3, 1),
        true,
    )]));
    let error = read_back(schema.clone(), b"\"d\"\n\"1.x\"\n", 64).unwrap_err();
    assert!(error.to_string().contains("not a decimal"), "{error}");
    // More digits than the column's precision.
    let error = read_back(schema, b"\"d\"\n\"1234.5\"\n", 64).unwrap_err();
    assert!(error.to_string().contains("precision"), "{error}");
}
