//! How a result's rows become the spec's CSV text: every value quoted
//! (quotes inside doubled), NULL an empty unquoted field, SQL-style
//! timestamps, everything else Arrow's display text.
//!
//! Most of a big CSV result's CPU is this text, so the common columns take
//! short paths that give the very same bytes as Arrow's formatter: strings
//! are copied from the array (no formatting, quotes doubled); dates of
//! years 0-9999 are written digit by digit; numbers, decimals, dates,
//! times and timestamps, whose text cannot hold a quote, are formatted
//! straight into the output. Anything else (lists, structs, binary,
//! intervals) is formatted, then quoted.

use std::fmt::Write as _;

use datafusion::arrow::{
    array::{
        Array, AsArray as _, Date32Array, LargeStringArray, RecordBatch, StringArray,
        StringViewArray,
    },
    datatypes::DataType,
    error::ArrowError,
    util::display::{ArrayFormatter, FormatOptions},
};

/// How cells become strings: SQL-style timestamps, everything else Arrow's text.
fn format_options() -> FormatOptions<'static> {
    FormatOptions::new()
        .with_display_error(true)
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.3f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.3f %Z"))
}

/// Appends `value` as one quoted CSV field.
pub fn push_quoted(out: &mut Vec<u8>, value: &str) {
    out.push(b'"');
    let mut rest = value.as_bytes();
    // Each quote inside is doubled; the runs between are copied whole.
    while let Some(at) = rest.iter().position(|&b| b == b'"') {
        out.extend_from_slice(&rest[..=at]);
        out.push(b'"');
        rest = &rest[at + 1..];
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

/// `fmt::Write` straight into the output bytes.
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.0.extend_from_slice(text.as_bytes());
        Ok(())
    }
}

/// One column's way to its cells' text.
enum Cells<'a> {
    Utf8(&'a StringArray),
    LargeUtf8(&'a LargeStringArray),
    Utf8View(&'a StringViewArray),
    Dates(&'a Date32Array, ArrayFormatter<'a>),
    /// Text that cannot hold a quote: written as it is formatted.
    QuoteFree(ArrayFormatter<'a>),
    /// Anything else: formatted, then quoted.
    Formatted(ArrayFormatter<'a>),
}

/// Types whose display text never holds a `"`.
fn quote_free(data_type: &DataType) -> bool {
    data_type.is_numeric()
        || matches!(
            data_type,
            DataType::Boolean
                | DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Timestamp(_, _)
        )
}

/// Writes `days` since 1970-01-01 as `YYYY-MM-DD`, as chrono shows a date,
/// for years 0 to 9999; `false` (nothing written) for any other.
fn push_date(out: &mut Vec<u8>, days: i32) -> bool {
    // Civil date from a day number (H. Hinnant's days_from_civil, inverted).
    let z = i64::from(days) + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    if !(0..=9999).contains(&year) {
        return false;
    }
    let digit = |n: i64| b'0' + n as u8;
    out.extend_from_slice(&[
        digit(year / 1000),
        digit(year / 100 % 10),
        digit(year / 10 % 10),
        digit(year % 10),
        b'-',
        digit(month / 10),
        digit(month % 10),
        b'-',
        digit(day / 10),
        digit(day % 10),
    ]);
    true
}

/// Appends the rows of `batch` as CSV lines.
pub fn encode_rows(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
    let options = format_options();
    let columns = batch.columns();
    let cells = columns
        .iter()
        .map(|column| -> Result<Cells<'_>, ArrowError> {
            Ok(match column.data_type() {
                DataType::Utf8 => Cells::Utf8(column.as_string()),
                DataType::LargeUtf8 => Cells::LargeUtf8(column.as_string()),
                DataType::Utf8View => Cells::Utf8View(column.as_string_view()),
                data_type => {
                    let formatter = ArrayFormatter::try_new(column.as_ref(), &options)?;
                    if *data_type == DataType::Date32 {
                        Cells::Dates(column.as_primitive(), formatter)
                    } else if quote_free(data_type) {
                        Cells::QuoteFree(formatter)
                    } else {
                        Cells::Formatted(formatter)
                    }
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut text = String::new();
    for row in 0..batch.num_rows() {
        for (i, (column, cells)) in columns.iter().zip(&cells).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if column.is_null(row) {
                continue;
            }
            match cells {
                Cells::Utf8(strings) => push_quoted(out, strings.value(row)),
                Cells::LargeUtf8(strings) => push_quoted(out, strings.value(row)),
                Cells::Utf8View(strings) => push_quoted(out, strings.value(row)),
                Cells::Dates(dates, formatter) => {
                    out.push(b'"');
                    if !push_date(out, dates.value(row)) {
                        write!(Bytes(out), "{}", formatter.value(row))
                            .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
                    }
                    out.push(b'"');
                }
                Cells::QuoteFree(formatter) => {
                    out.push(b'"');
                    write!(Bytes(out), "{}", formatter.value(row))
                        .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
                    out.push(b'"');
                }
                Cells::Formatted(formatter) => {
                    text.clear();
                    write!(text, "{}", formatter.value(row))
                        .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
                    push_quoted(out, &text);
                }
            }
        }
        out.push(b'\n');
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::{
        array::{
            ArrayRef, BinaryArray, BooleanArray, Decimal128Array, Float64Array, Int64Array,
            ListArray, TimestampMillisecondArray, UInt64Array,
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
        let fields: Vec<_> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                datafusion::arrow::datatypes::Field::new(
                    format!("c{i}"),
                    c.data_type().clone(),
                    true,
                )
            })
            .collect();
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
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
}
