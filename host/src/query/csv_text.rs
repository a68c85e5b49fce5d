//! How a result's rows become the spec's CSV text: every value quoted
//! (quotes inside doubled), NULL an empty unquoted field, SQL-style
//! timestamps, everything else Arrow's display text.
//!
//! Most of a big CSV result's CPU is this text, so the common columns take
//! short paths that give the very same bytes as Arrow's formatter: strings
//! are copied from the array (no formatting, quotes doubled); dates of
//! years 0-9999 are written digit by digit; integers, and 128-bit decimals
//! of scale 0 and up, are written from their digits (`itoa`) with the point
//! put in; other numbers, dates, times and timestamps, whose text cannot
//! hold a quote, are formatted straight into the output. Anything else
//! (lists, structs, binary, intervals) is formatted, then quoted.

use std::fmt::Write as _;

use datafusion::arrow::{
    array::{
        Array, AsArray as _, Date32Array, Decimal128Array, LargeStringArray, RecordBatch,
        StringArray, StringViewArray,
    },
    datatypes::{
        DataType, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type,
        UInt64Type,
    },
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
    Integers(Integers<'a>),
    /// With the formatter for the values it does not show as they are.
    Decimals(&'a Decimal128Array, ArrayFormatter<'a>),
    /// Text that cannot hold a quote: written as it is formatted.
    QuoteFree(ArrayFormatter<'a>),
    /// Anything else: formatted, then quoted.
    Formatted(ArrayFormatter<'a>),
}

/// An integer column's values.
enum Integers<'a> {
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    U8(&'a [u8]),
    U16(&'a [u16]),
    U32(&'a [u32]),
    U64(&'a [u64]),
}

impl<'a> Integers<'a> {
    fn of(column: &'a dyn Array) -> Option<Self> {
        Some(match column.data_type() {
            DataType::Int8 => Self::I8(column.as_primitive::<Int8Type>().values()),
            DataType::Int16 => Self::I16(column.as_primitive::<Int16Type>().values()),
            DataType::Int32 => Self::I32(column.as_primitive::<Int32Type>().values()),
            DataType::Int64 => Self::I64(column.as_primitive::<Int64Type>().values()),
            DataType::UInt8 => Self::U8(column.as_primitive::<UInt8Type>().values()),
            DataType::UInt16 => Self::U16(column.as_primitive::<UInt16Type>().values()),
            DataType::UInt32 => Self::U32(column.as_primitive::<UInt32Type>().values()),
            DataType::UInt64 => Self::U64(column.as_primitive::<UInt64Type>().values()),
            _ => return None,
        })
    }

    fn push(&self, row: usize, digits: &mut itoa::Buffer, out: &mut Vec<u8>) {
        let text = match self {
            Self::I8(values) => digits.format(values[row]),
            Self::I16(values) => digits.format(values[row]),
            Self::I32(values) => digits.format(values[row]),
            Self::I64(values) => digits.format(values[row]),
            Self::U8(values) => digits.format(values[row]),
            Self::U16(values) => digits.format(values[row]),
            Self::U32(values) => digits.format(values[row]),
            Self::U64(values) => digits.format(values[row]),
        };
        out.extend_from_slice(text.as_bytes());
    }
}

/// Writes the decimal of unscaled `value` as Arrow shows it: its digits,
/// the point `scale` digits from the right (zeros put before them when they
/// are fewer), a leading `-`. `false` (nothing written) for a negative
/// scale, and for a value of more digits than `precision`, which Arrow's
/// formatter cuts short.
fn push_decimal(
    out: &mut Vec<u8>,
    value: i128,
    (precision, scale): (u8, i8),
    digits: &mut itoa::Buffer,
) -> bool {
    let Ok(scale) = usize::try_from(scale) else {
        return false;
    };
    let text = digits.format(value.unsigned_abs()).as_bytes();
    if text.len() > usize::from(precision) {
        return false;
    }
    if value < 0 {
        out.push(b'-');
    }
    if scale == 0 {
        out.extend_from_slice(text);
    } else if text.len() > scale {
        let (whole, fraction) = text.split_at(text.len() - scale);
        out.extend_from_slice(whole);
        out.push(b'.');
        out.extend_from_slice(fraction);
    } else {
        out.extend_from_slice(b"0.");
        out.resize(out.len() + scale - text.len(), b'0');
        out.extend_from_slice(text);
    }
    true
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
            if let Some(integers) = Integers::of(column.as_ref()) {
                return Ok(Cells::Integers(integers));
            }
            Ok(match column.data_type() {
                DataType::Utf8 => Cells::Utf8(column.as_string()),
                DataType::LargeUtf8 => Cells::LargeUtf8(column.as_string()),
                DataType::Utf8View => Cells::Utf8View(column.as_string_view()),
                DataType::Decimal128(_, _) => Cells::Decimals(
                    column.as_primitive(),
                    ArrayFormatter::try_new(column.as_ref(), &options)?,
                ),
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
    let mut digits = itoa::Buffer::new();
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
                Cells::Integers(values) => {
                    out.push(b'"');
                    values.push(row, &mut digits, out);
                    out.push(b'"');
                }
                Cells::Decimals(values, formatter) => {
                    out.push(b'"');
                    let shape = (values.precision(), values.scale());
                    if !push_decimal(out, values.value(row), shape, &mut digits) {
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
#[path = "csv_text_tests.rs"]
mod tests;
