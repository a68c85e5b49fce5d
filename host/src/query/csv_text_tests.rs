//! The CSV text of each column type, byte for byte as Arrow's formatter
//! shows it, and quotes doubled.

use std::sync::Arc;

use datafusion::arrow::{
    array::{
        ArrayRef, BinaryArray, BooleanArray, Float64Array, Int8Array, Int16Array, Int32Array,
        Int64Array, ListArray, TimestampMillisecondArray, UInt8Array, UInt16Array, UInt32Array,
        UInt64Array,
    },
    datatypes::{Int32Type, Schema},
};

use super::*;

/// Each cell as Arrow's formatter shows it, quoted: the text before the
/// short paths, which they must give byte for byte.
fn formatted_then_quoted(batch: &RecordBatch) -> Vec<u8> {
    let options = format_options();
    let formatters: Vec<_> = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
        .collect();
    let mut out = Vec::new();
    for row in 0..batch.num_rows() {
        for (i, (column, formatter)) in batch.columns().iter().zip(&formatters).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if !column.is_null(row) {
                push_quoted(&mut out, &formatter.value(row).to_string());
            }
        }
        out.push(b'\n');
    }
    out
}

/// A batch of `columns`, named `c0`, `c1`, ...
fn batch_of(columns: Vec<ArrayRef>) -> RecordBatch {
    let fields: Vec<_> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            datafusion::arrow::datatypes::Field::new(format!("c{i}"), c.data_type().clone(), true)
        })
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

#[test]
fn every_short_path_writes_what_the_formatter_shows() {
    // Dates from the year 0 to 9999 and past both ends, every day of
    // some leap and century years, and the epoch.
    let mut days: Vec<Option<i32>> = (-800_000..3_100_000).step_by(997).map(Some).collect();
    days.extend((-719_528..-719_528 + 800).map(Some)); // the years 0 and 1
    days.extend((10_957..10_957 + 1_500).map(Some)); // 2000-2003
    days.extend([
        None,
        Some(0),
        Some(-1),
        Some(2_932_896),
        Some(2_932_897),
        Some(-719_529),
    ]);
    days.extend([Some(i32::MIN), Some(i32::MAX)]);
    let rows = days.len();
    let texts = [
        "",
        "plain",
        "\"",
        "a \"b\", c",
        "ünïcödé",
        "long enough to leave the view",
    ];
    let text = |row: usize| (row % 7 != 3).then(|| texts[row % texts.len()]);
    let list = ListArray::from_iter_primitive::<Int32Type, _, _>(
        (0..rows).map(|row| (row % 5 != 0).then(|| vec![Some(row as i32), None])),
    );
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Date32Array::from(days)),
        Arc::new(StringArray::from_iter((0..rows).map(text))),
        Arc::new(LargeStringArray::from_iter((0..rows).map(text))),
        Arc::new(StringViewArray::from_iter((0..rows).map(text))),
        Arc::new(Int64Array::from_iter(
            (0..rows).map(|r| (r % 9 != 0).then(|| (r as i64 - 500) * 1_000_003)),
        )),
        Arc::new(UInt64Array::from_iter_values(
            (0..rows).map(|r| u64::MAX - r as u64),
        )),
        Arc::new(Float64Array::from_iter_values((0..rows).map(|r| {
            [f64::NAN, f64::INFINITY, -0.0, 1e-300, 0.1 + 0.2][r % 5] * r as f64
        }))),
        Arc::new(
            Decimal128Array::from_iter_values((0..rows).map(|r| r as i128 * 12_345 - 99_999))
                .with_precision_and_scale(12, 2)
                .unwrap(),
        ),
        Arc::new(BooleanArray::from_iter(
            (0..rows).map(|r| (r % 4 != 0).then_some(r % 3 == 0)),
        )),
        Arc::new(
            TimestampMillisecondArray::from_iter_values(
                (0..rows).map(|r| r as i64 * 86_400_017 - 1_000_000_000_000),
            )
            .with_timezone("+02:00"),
        ),
        Arc::new(TimestampMillisecondArray::from_iter_values(
            (0..rows).map(|r| r as i64 * 3_600_001),
        )),
        Arc::new(BinaryArray::from_iter(
            (0..rows).map(|r| (r % 3 != 0).then(|| vec![b'"', r as u8])),
        )),
        Arc::new(list),
    ];
    let batch = batch_of(columns);
    let mut out = Vec::new();
    encode_rows(&batch, &mut out).unwrap();
    let expected = formatted_then_quoted(&batch);
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&expected)
    );
    // The dates' short path did the work for most rows, and rows past
    // year 9999 were still written (by the formatter).
    let first_column: Vec<&str> = std::str::from_utf8(&out)
        .unwrap()
        .lines()
        .map(|line| line.split(',').next().unwrap())
        .collect();
    assert!(
        first_column.contains(&"\"2000-02-29\""),
        "{:?}",
        &first_column[..5]
    );
    assert!(first_column.contains(&"\"0000-01-01\""));
    assert!(first_column.contains(&"\"9999-12-31\""));
    assert!(first_column.iter().any(|d| d.len() > 12), "years past 9999");
    assert!(first_column.contains(&""), "a NULL date is an empty field");
}

#[test]
fn integers_and_decimals_are_written_as_the_formatter_shows_them() {
    let rows = 64usize;
    let pick = |values: &[i128], r: usize| values[r % values.len()];
    let edges: Vec<i128> = vec![
        0,
        1,
        -1,
        5,
        -5,
        99,
        -100,
        123_456,
        -1_234_567,
        i128::from(i64::MAX),
        i128::from(i64::MIN),
        10_i128.pow(18),
        -(10_i128.pow(37)),
        10_i128.pow(38) - 1,
        -(10_i128.pow(38) - 1),
    ];
    let decimal = |precision: u8, scale: i8, values: &[i128]| -> ArrayRef {
        Arc::new(
            Decimal128Array::from_iter((0..rows).map(|r| (r % 11 != 5).then(|| pick(values, r))))
                .with_precision_and_scale(precision, scale)
                .unwrap(),
        )
    };
    let small: Vec<i128> = edges.iter().map(|v| v % 100_000).collect();
    let columns: Vec<ArrayRef> = vec![
        decimal(38, 10, &edges),
        decimal(38, 0, &edges),
        decimal(38, 38, &edges),
        decimal(5, 2, &small),
        // Scale equal to precision: every value below 1.
        decimal(3, 3, &[0, 1, -7, 999, -999, 120]),
        // Values wider than the precision (Arrow's formatter cuts them)
        // and a negative scale: both left to the formatter.
        decimal(4, 1, &[123_456, -98_765, 12]),
        decimal(6, -2, &[0, 15, -123_456]),
        Arc::new(Int8Array::from_iter_values(
            (0..rows).map(|r| [i8::MIN, -1, 0, 7, i8::MAX][r % 5]),
        )),
        Arc::new(Int16Array::from_iter_values(
            (0..rows).map(|r| [i16::MIN, -300, 0, i16::MAX][r % 4]),
        )),
        Arc::new(Int32Array::from_iter((0..rows).map(|r| {
            (r % 3 != 1).then_some([i32::MIN, -42, 0, i32::MAX][r % 4])
        }))),
        Arc::new(Int64Array::from_iter_values(
            (0..rows).map(|r| [i64::MIN, -10, 0, 10, i64::MAX][r % 5]),
        )),
        Arc::new(UInt8Array::from_iter_values(
            (0..rows).map(|r| (r * 5 % 256) as u8),
        )),
        Arc::new(UInt16Array::from_iter_values(
            (0..rows).map(|r| [0, 9, 10, u16::MAX][r % 4]),
        )),
        Arc::new(UInt32Array::from_iter_values(
            (0..rows).map(|r| [0, 1_000_000, u32::MAX][r % 3]),
        )),
        Arc::new(UInt64Array::from_iter_values(
            (0..rows).map(|r| [0, 10_u64.pow(19), u64::MAX][r % 3]),
        )),
    ];
    let batch = batch_of(columns);
    let mut out = Vec::new();
    encode_rows(&batch, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text,
        String::from_utf8(formatted_then_quoted(&batch)).unwrap()
    );
    assert!(text.contains("\"-0.0000000001\""), "{}", &text[..400]);
    assert!(text.contains("\"99999999999999999999999999999999999999\""));
    assert!(text.contains("\"-0.007\""));
    assert!(text.contains("\"-128\""));
}

#[test]
fn quotes_inside_a_field_are_doubled() {
    let mut out = Vec::new();
    for value in ["", "plain", "\"", "a \"b\" c\"\"", "end\""] {
        push_quoted(&mut out, value);
        out.push(b'|');
    }
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "\"\"|\"plain\"|\"\"\"\"|\"a \"\"b\"\" c\"\"\"\"\"|\"end\"\"\"|"
    );
}
