//! A result's CSV read back into typed batches, for the columns whose text
//! (`csv_text.rs`) holds every bit of their value: booleans, signed
//! integers, floats and doubles (Arrow writes the shortest text that reads
//! back to the same number), decimals of up to 38 digits, dates and
//! strings. Such a result needs no typed copy while it runs: its Arrow copy
//! is made from its CSV the first time it is asked for
//! (`service/result_file.rs`). A result with any other column (timestamps,
//! whose CSV keeps milliseconds; unsigned or 16-bit floats, which share an
//! SQL type with another Arrow type; binaries, lists) keeps its typed copy
//! while it runs, as before.
//!
//! Which Arrow type a column is read back as comes from its ColumnInfo
//! alone (`canonical_type`), so a job's stored columns are enough; a result
//! is read back only when that type is the one it ran with
//! (`reads_back`), and the tests below check the text of each type's edge
//! values (NaN, infinities, -0, the widest integers and decimals, years
//! past 9999) comes back as the same value.
//!
//! The CSV is the spec's: every value quoted (quotes doubled), NULL an
//! empty unquoted field, one record per line (strings may hold newlines),
//! a header line first. It is read as it arrives, in any chunking.

use std::sync::Arc;

use datafusion::arrow::{
    array::{ArrayRef, Date32Builder, Decimal128Builder, Int64Builder, RecordBatch, StringBuilder},
    compute::{CastOptions, cast_with_options, kernels::cast_utils::Parser as _},
    datatypes::{DataType, Date32Type, Field, Schema, SchemaRef},
    error::ArrowError,
    util::display::FormatOptions,
};

use crate::engine::columns::{ResultColumn, sql_type};

/// Rows per batch read back.
pub const BATCH_ROWS: usize = 32_768;

/// The Arrow type a column of this ColumnInfo is read back as, when its
/// CSV text holds every bit of its values.
pub fn canonical_type(column: &ResultColumn) -> Option<DataType> {
    let precision = u8::try_from(column.precision).ok();
    let scale = i8::try_from(column.scale).ok();
    Some(match column.sql_type.as_str() {
        "boolean" => DataType::Boolean,
        "tinyint" => DataType::Int8,
        "smallint" => DataType::Int16,
        "integer" => DataType::Int32,
        "bigint" => DataType::Int64,
        "float" => DataType::Float32,
        "double" => DataType::Float64,
        "decimal" => match (precision, scale) {
            (Some(p @ 1..=38), Some(s @ 0..=38)) if s as u8 <= p => DataType::Decimal128(p, s),
            _ => return None,
        },
        "varchar" => DataType::Utf8,
        "date" => DataType::Date32,
        _ => return None,
    })
}

/// Whether a result of `schema` can be read back from its CSV: every
/// column's type (strings as the plain type the typed copy holds) is the
/// canonical type of its ColumnInfo.
pub fn reads_back(schema: &Schema) -> bool {
    schema.fields().iter().all(|field| {
        let plain = match field.data_type() {
            DataType::Utf8View => DataType::Utf8,
            other => other.clone(),
        };
        let (name, precision, scale) = sql_type(&plain);
        let column = ResultColumn {
            name: String::new(),
            sql_type: name.to_string(),
            precision,
            scale,
            nullable: true,
        };
        canonical_type(&column).as_ref() == Some(&plain)
    })
}

/// The schema a result with these columns is read back as; `None` when a
/// column's text does not hold its value (the result needs a typed copy).
pub fn schema_of(columns: &[ResultColumn]) -> Option<SchemaRef> {
    let fields = columns
        .iter()
        .map(|column| canonical_type(column).map(|t| Field::new(&column.name, t, column.nullable)))
        .collect::<Option<Vec<_>>>()?;
    Some(Arc::new(Schema::new(fields)))
}

/// Where the reader is within the CSV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// At the start of a field.
    FieldStart,
    /// Inside a quoted field.
    Quoted,
    /// After a quote inside a quoted field: a second quote is a quote of
    /// the value, anything else ends the field.
    QuoteInQuoted,
}

/// Reads the spec's CSV of a result into batches of `schema`, a chunk at a
/// time.
pub struct CsvReadBack {
    schema: SchemaRef,
    at: At,
    /// The header line is read, not kept.
    in_header: bool,
    column: usize,
    field: Vec<u8>,
    builders: Vec<Column>,
    rows: usize,
}

/// One column's values as they are read: decimals, integers and dates
/// parsed at once from their bytes (Arrow's text casts allocate per decimal
/// and go through the text a second time), everything else (booleans,
/// floats, strings) as text cast to its type per batch.
enum Column {
    Text(StringBuilder),
    Decimal(Decimal128Builder, i8),
    /// Any signed width, narrowed (checked) per batch.
    Integer(Int64Builder),
    Date(Date32Builder),
}

impl Column {
    fn for_type(data_type: &DataType) -> Self {
        match data_type {
            DataType::Decimal128(_, scale) => Column::Decimal(Decimal128Builder::new(), *scale),
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                Column::Integer(Int64Builder::new())
            }
            DataType::Date32 => Column::Date(Date32Builder::new()),
            _ => Column::Text(StringBuilder::new()),
        }
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), ArrowError> {
        let shown = || String::from_utf8_lossy(bytes).into_owned();
        match self {
            Column::Text(builder) => builder.append_value(
                std::str::from_utf8(bytes).map_err(|_| malformed("a value that is not UTF-8"))?,
            ),
            Column::Decimal(builder, scale) => {
                let value = parse_decimal(bytes, *scale).ok_or_else(|| {
                    malformed(&format!("{:?} is not a decimal of scale {scale}", shown()))
                })?;
                builder.append_value(value);
            }
            Column::Integer(builder) => {
                let value = parse_integer(bytes)
                    .ok_or_else(|| malformed(&format!("{:?} is not an integer", shown())))?;
                builder.append_value(value);
            }
            Column::Date(builder) => {
                // Years 0-9999 as `csv_text.rs` writes them; any other as
                // Arrow's own date parser reads the formatter's text.
                let value = parse_date(bytes)
                    .or_else(|| Date32Type::parse(std::str::from_utf8(bytes).ok()?))
                    .ok_or_else(|| malformed(&format!("{:?} is not a date", shown())))?;
                builder.append_value(value);
            }
        }
        Ok(())
    }

    fn append_null(&mut self) {
        match self {
            Column::Text(builder) => builder.append_null(),
            Column::Decimal(builder, _) => builder.append_null(),
            Column::Integer(builder) => builder.append_null(),
            Column::Date(builder) => builder.append_null(),
        }
    }

    fn finish(&mut self, target: &DataType) -> Result<ArrayRef, ArrowError> {
        let strictly = |values: ArrayRef| match target {
            target if values.data_type() == target => Ok(values),
            target => {
                let options = CastOptions {
                    safe: false,
                    format_options: FormatOptions::default(),
                };
                cast_with_options(&values, target, &options)
            }
        };
        match self {
            Column::Text(builder) => strictly(Arc::new(builder.finish())),
            Column::Integer(builder) => strictly(Arc::new(builder.finish())),
            Column::Date(builder) => Ok(Arc::new(builder.finish())),
            Column::Decimal(builder, _) => {
                let values = builder.finish().with_data_type(target.clone());
                if let DataType::Decimal128(precision, _) = target {
                    values.validate_decimal_precision(*precision)?;
                }
                Ok(Arc::new(values))
            }
        }
    }
}

/// A decimal's text as Arrow writes it (`-`, digits, and exactly `scale`
/// digits after a point when `scale` is positive) as its unscaled value.
fn parse_decimal(text: &[u8], scale: i8) -> Option<i128> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (whole, fraction) = match usize::try_from(scale).ok().filter(|&s| s > 0) {
        Some(scale) => {
            let point = digits.len().checked_sub(scale + 1)?;
            if digits[point] != b'.' {
                return None;
            }
            (&digits[..point], &digits[point + 1..])
        }
        None => (digits, &digits[..0]),
    };
    let digits = whole.len() + fraction.len();
    if whole.is_empty() || digits > 39 {
        return None;
    }
    let mut all = whole.iter().chain(fraction);
    if !all.clone().all(u8::is_ascii_digit) {
        return None;
    }
    let value = if digits <= 18 {
        // At most 18 digits fit in 64 bits: summed there, without checks.
        i128::from(all.fold(0_i64, |value, &digit| value * 10 + i64::from(digit - b'0')))
    } else {
        all.try_fold(0_i128, |value, &digit| {
            value.checked_mul(10)?.checked_add(i128::from(digit - b'0'))
        })?
    };
    Some(if negative { -value } else { value })
}

/// An integer's text as written (`-` and digits) as its value.
fn parse_integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    // Summed below zero, so that i64::MIN reads back too.
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value
            .checked_mul(10)?
            .checked_sub(i64::from(digit - b'0'))?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// A `YYYY-MM-DD` date (of a year 0-9999, a real day) as days since
/// 1970-01-01; `None` for any other text.
fn parse_date(text: &[u8]) -> Option<i32> {
    let [y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1] = *text else {
        return None;
    };
    let digit = |b: u8| b.is_ascii_digit().then(|| i64::from(b - b'0'));
    let year = digit(y0)? * 1000 + digit(y1)? * 100 + digit(y2)? * 10 + digit(y3)?;
    let month = digit(m0)? * 10 + digit(m1)?;
    let day = digit(d0)? * 10 + digit(d1)?;
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if !(1..=days_in_month).contains(&day) {
        return None;
    }
    // Days from the civil date (H. Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    i32::try_from(era * 146_097 + day_of_era - 719_468).ok()
}

fn malformed(why: &str) -> ArrowError {
    ArrowError::CsvError(format!("the result CSV cannot be read back: {why}"))
}

impl CsvReadBack {
    pub fn new(schema: SchemaRef) -> Self {
        let builders = schema
            .fields()
            .iter()
            .map(|field| Column::for_type(field.data_type()))
            .collect();
        Self {
            schema,
            at: At::FieldStart,
            in_header: true,
            column: 0,
            field: Vec::new(),
            builders,
            rows: 0,
        }
    }

    /// Reads `chunk`; returns the batches it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<RecordBatch>, ArrowError> {
        let mut batches = Vec::new();
        if self.schema.fields().is_empty() {
            return if chunk.is_empty() {
                Ok(batches)
            } else {
                Err(malformed("a result without columns has text"))
            };
        }
        let mut rest = chunk;
        while let Some((&byte, after)) = rest.split_first() {
            match self.at {
                At::Quoted => {
                    // The value runs to the next quote: copied whole.
                    match memchr::memchr(b'"', rest) {
                        Some(quote) => {
                            self.field.extend_from_slice(&rest[..quote]);
                            self.at = At::QuoteInQuoted;
                            rest = &rest[quote + 1..];
                        }
                        None => {
                            self.field.extend_from_slice(rest);
                            rest = &[];
                        }
                    }
                    continue;
                }
                At::QuoteInQuoted if byte == b'"' => {
                    self.field.push(b'"');
                    self.at = At::Quoted;
                }
                At::QuoteInQuoted => {
                    if byte != b',' && byte != b'\n' {
                        return Err(malformed("text after a closing quote"));
                    }
                    let field = std::mem::take(&mut self.field);
                    let ended = self.end_field(Some(&field), byte, &mut batches);
                    self.field = field;
                    self.field.clear();
                    ended?;
                    self.at = At::FieldStart;
                }
                At::FieldStart => match byte {
                    b'"' => {
                        // Most values are whole in the chunk, without a
                        // quote inside: read where they are, not copied.
                        if let Some(quote) = memchr::memchr(b'"', after)
                            && let Some(&end @ (b',' | b'\n')) = after.get(quote + 1)
                        {
                            self.end_field(Some(&after[..quote]), end, &mut batches)?;
                            rest = &after[quote + 2..];
                            continue;
                        }
                        self.at = At::Quoted;
                    }
                    b',' | b'\n' => self.end_field(None, byte, &mut batches)?,
                    _ => return Err(malformed("an unquoted value")),
                },
            }
            rest = after;
        }
        Ok(batches)
    }

    /// Whether `byte`, ending a field, ends its record; an error when the
    /// record has too few or too many fields.
    fn end_of(&self, byte: u8) -> Result<bool, ArrowError> {
        let width = self.schema.fields().len();
        match byte {
            b',' if self.column < width => Ok(false),
            b'\n' if self.column == width => Ok(true),
            _ => Err(malformed("a line with another number of fields")),
        }
    }

    /// Ends a field, a value (`Some`) or NULL, and with `end` (the byte
    /// after it) its record when that is a line's end.
    fn end_field(
        &mut self,
        value: Option<&[u8]>,
        end: u8,
        batches: &mut Vec<RecordBatch>,
    ) -> Result<(), ArrowError> {
        let column = self.column;
        self.column += 1;
        if !self.in_header {
            let builder = self
                .builders
                .get_mut(column)
                .ok_or_else(|| malformed("a line with more fields than columns"))?;
            match value {
                Some(bytes) => builder.append(bytes)?,
                None => builder.append_null(),
            }
        }
        if self.end_of(end)? {
            self.end_record(batches)?;
        }
        Ok(())
    }

    fn end_record(&mut self, batches: &mut Vec<RecordBatch>) -> Result<(), ArrowError> {
        self.column = 0;
        if self.in_header {
            self.in_header = false;
            return Ok(());
        }
        self.rows += 1;
        if self.rows == BATCH_ROWS {
            batches.push(self.take_batch()?);
        }
        Ok(())
    }

    /// The rows read so far as a batch of the schema's types.
    fn take_batch(&mut self) -> Result<RecordBatch, ArrowError> {
        let columns = self
            .builders
            .iter_mut()
            .zip(self.schema.fields())
            .map(|(builder, field)| builder.finish(field.data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), columns)
    }

    /// The rows after the last full batch; an error when the CSV ended
    /// inside a record.
    pub fn finish(mut self) -> Result<Option<RecordBatch>, ArrowError> {
        if self.schema.fields().is_empty() {
            return Ok(None);
        }
        if self.at != At::FieldStart || self.column != 0 {
            return Err(malformed("it ends inside a line"));
        }
        if self.in_header {
            return Err(malformed("it has no header line"));
        }
        if self.rows == 0 {
            return Ok(None);
        }
        self.take_batch().map(Some)
    }
}

#[cfg(test)]
#[path = "csv_read_back_tests.rs"]
mod tests;
