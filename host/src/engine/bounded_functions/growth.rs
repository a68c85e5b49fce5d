//! How large a bounded function's result can be, worked out from its
//! arguments before it runs: bytes over all rows of the batch, a scalar
//! argument counting once per row (the result is one value per row).
//!
//! It must never copy an argument to work this out: a scalar is measured
//! once and its figure repeated, so measuring a 200 MB value for 8,192 rows
//! costs what measuring it once does.

use datafusion::{
    arrow::{
        array::{Array, ArrayRef, AsArray as _},
        compute::{cast, kernels::length::length},
        datatypes::{DataType, Int64Type, TimeUnit},
    },
    common::{Result, ScalarValue},
    logical_expr::{ColumnarValue, ScalarFunctionArgs},
};

/// How a function's result size follows from its arguments (bytes, over all
/// rows), where it can be larger than they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Growth {
    /// `repeat(s, n)`: |s| × n.
    Repeat,
    /// `lpad(s, n [, fill])`, `rpad`: n characters of up to 4 bytes.
    Pad,
    /// `replace(s, from, to)`: every `from` of s becomes `to`.
    Replace,
    /// `regexp_replace(s, pattern, replacement [, flags])`: at worst a
    /// replacement at every position.
    RegexpReplace,
    /// `range(start, stop [, step])`, `generate_series`: one 8-byte value per step.
    Range,
    /// `array_repeat(element, n)`: n copies of the element.
    ArrayRepeat,
    /// `array_resize(array, n [, fill])`: n values.
    ArrayResize,
    /// The arguments put together (`concat`, `||`, `array_concat`,
    /// `array_append`, `make_array`, `overlay`): their sizes summed.
    Sum,
    /// `concat_ws(separator, ...)`: the separator between every two values.
    SumWithSeparator,
    /// `encode(value, 'hex')`: two characters per byte at most.
    Encode,
    /// `array_to_string(array, separator)`, `array_replace_all(array, from,
    /// to)`: the array, plus each further argument once per element.
    PerElement,
    /// At most a few times the arguments (`string_to_array`, `translate`):
    /// only what the call returned is checked.
    Returned,
}

/// One figure per row of an argument, worked out from each value (a scalar
/// once, its figure repeated for every row).
fn per_row(
    arg: &ColumnarValue,
    rows: usize,
    of: impl Fn(&ArrayRef) -> Result<Vec<i128>>,
) -> Result<Vec<i128>> {
    match arg {
        ColumnarValue::Array(array) => of(array),
        ColumnarValue::Scalar(value) => {
            let once = of(&value.to_array_of_size(1)?)?;
            Ok(vec![once.first().copied().unwrap_or(0); rows])
        }
    }
}

/// Each row's integer value (null and uncastable as 0).
fn integers_of(array: &ArrayRef) -> Result<Vec<i128>> {
    let values = cast(array, &DataType::Int64)?;
    let values = values.as_primitive::<Int64Type>();
    Ok((0..values.len())
        .map(|i| match values.is_valid(i) {
            true => i128::from(values.value(i)),
            false => 0,
        })
        .collect())
}

fn integers(arg: &ColumnarValue, rows: usize) -> Result<Vec<i128>> {
    per_row(arg, rows, integers_of)
}

/// Each row's value's length in bytes as text (null as 0).
fn byte_lengths(arg: &ColumnarValue, rows: usize) -> Result<Vec<i128>> {
    per_row(arg, rows, |array| {
        let text = match array.data_type() {
            DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView => array.clone(),
            _ => cast(array, &DataType::Utf8)?,
        };
        integers_of(&length(&text)?)
    })
}

/// Each row's value's size in bytes: its length for text and binary values,
/// else the bytes a row of it takes.
fn value_bytes(arg: &ColumnarValue, rows: usize) -> Result<Vec<i128>> {
    match arg.data_type() {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => byte_lengths(arg, rows),
        _ => Ok(vec![bytes_per_row(arg, rows) as i128; rows]),
    }
}

/// Each row's number of elements of a list (null and non-lists as 0).
fn cardinalities(arg: &ColumnarValue, rows: usize) -> Result<Vec<i128>> {
    per_row(arg, rows, |array| {
        let offsets: Vec<i128> = match array.data_type() {
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                (0..list.len())
                    .map(|i| i128::from(list.value_length(i)))
                    .collect()
            }
            DataType::LargeList(_) => {
                let list = array.as_list::<i64>();
                (0..list.len())
                    .map(|i| i128::from(list.value_length(i)))
                    .collect()
            }
            DataType::FixedSizeList(_, n) => vec![i128::from(*n); array.len()],
            _ => vec![0; array.len()],
        };
        Ok(offsets)
    })
}

/// Each row's value as nanoseconds (integers as they are, dates and
/// timestamps since the epoch), for range bounds.
fn positions(arg: &ColumnarValue, rows: usize) -> Result<Vec<i128>> {
    per_row(arg, rows, |array| match array.data_type() {
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) => {
            // Milliseconds reach any date; nanoseconds stop at 2262.
            let millis = cast(array, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
            Ok(integers_of(&millis)?
                .into_iter()
                .map(|ms| ms * 1_000_000)
                .collect())
        }
        _ => integers_of(array),
    })
}

/// Each row's range step: integers as they are, intervals as nanoseconds
/// (a month as 28 days: the most steps it can make).
fn steps(arg: &ColumnarValue, rows: usize) -> Result<Vec<i128>> {
    per_row(arg, rows, |array| {
        let DataType::Interval(_) = array.data_type() else {
            return integers_of(array);
        };
        let day = 86_400_000_000_000i128;
        (0..array.len())
            .map(|i| {
                Ok(match ScalarValue::try_from_array(array, i)? {
                    ScalarValue::IntervalYearMonth(Some(months)) => i128::from(months) * 28 * day,
                    ScalarValue::IntervalDayTime(Some(v)) => {
                        i128::from(v.days) * day + i128::from(v.milliseconds) * 1_000_000
                    }
                    ScalarValue::IntervalMonthDayNano(Some(v)) => {
                        i128::from(v.months) * 28 * day
                            + i128::from(v.days) * day
                            + i128::from(v.nanoseconds)
                    }
                    _ => 0,
                })
            })
            .collect()
    })
}

/// The bytes an argument takes over all rows (a scalar once per row).
pub(super) fn bytes_over_rows(arg: &ColumnarValue, rows: usize) -> u128 {
    match arg {
        ColumnarValue::Scalar(value) => (value.size() as u128).saturating_mul(rows as u128),
        ColumnarValue::Array(array) => array.get_array_memory_size() as u128,
    }
}

/// Bytes each row of an argument takes, roughly (for copies of it).
fn bytes_per_row(arg: &ColumnarValue, rows: usize) -> u128 {
    match arg {
        ColumnarValue::Scalar(value) => value.size() as u128,
        ColumnarValue::Array(array) => (array.get_array_memory_size() / rows.max(1)) as u128,
    }
}

fn positive(v: i128) -> u128 {
    v.max(0) as u128
}

fn total(values: impl IntoIterator<Item = u128>) -> u128 {
    values.into_iter().fold(0u128, u128::saturating_add)
}

impl Growth {
    /// The result's size in bytes over all rows, worked out from the arguments.
    pub(super) fn expected_bytes(self, args: &ScalarFunctionArgs) -> Result<u128> {
        let rows = args.number_rows;
        let a = &args.args;
        let arg = |i: usize| a.get(i);
        let summed = || total(a.iter().map(|v| bytes_over_rows(v, rows)));
        Ok(match self {
            Growth::Repeat => match (arg(0), arg(1)) {
                (Some(s), Some(n)) => total(
                    byte_lengths(s, rows)?
                        .into_iter()
                        .zip(integers(n, rows)?)
                        .map(|(len, n)| positive(len).saturating_mul(positive(n))),
                ),
                _ => 0,
            },
            Growth::Pad => match arg(1) {
                Some(n) => total(
                    integers(n, rows)?
                        .into_iter()
                        .map(|n| positive(n).saturating_mul(4)),
                ),
                None => 0,
            },
            Growth::Replace | Growth::RegexpReplace => match (arg(0), arg(1), arg(2)) {
                (Some(s), Some(from), Some(to)) => {
                    let from = match self {
                        Growth::Replace => byte_lengths(from, rows)?,
                        _ => vec![0; rows],
                    };
                    total(
                        byte_lengths(s, rows)?
                            .into_iter()
                            .zip(from)
                            .zip(byte_lengths(to, rows)?)
                            .map(|((s, from), to)| {
                                let places = positive(s) / positive(from).max(1) + 1;
                                positive(s).saturating_add(places.saturating_mul(positive(to)))
                            }),
                    )
                }
                _ => 0,
            },
            Growth::Range => {
                let (start, stop, step) = match a.len() {
                    0 => return Ok(0),
                    1 => (None, &a[0], None),
                    2 => (Some(&a[0]), &a[1], None),
                    _ => (Some(&a[0]), &a[1], Some(&a[2])),
                };
                let start = match start {
                    Some(start) => positions(start, rows)?,
                    None => vec![0; rows],
                };
                let step = match step {
                    Some(step) => steps(step, rows)?,
                    None => vec![1; rows],
                };
                total(start.into_iter().zip(positions(stop, rows)?).zip(step).map(
                    |((start, stop), step)| match step {
                        0 => 0,
                        step => positive((stop - start) / step + 1).saturating_mul(8),
                    },
                ))
            }
            Growth::ArrayRepeat => match (arg(0), arg(1)) {
                (Some(element), Some(n)) => {
                    let each = bytes_per_row(element, rows).max(1);
                    total(
                        integers(n, rows)?
                            .into_iter()
                            .map(|n| positive(n).saturating_mul(each)),
                    )
                }
                _ => 0,
            },
            Growth::ArrayResize => match arg(1) {
                Some(n) => total(
                    integers(n, rows)?
                        .into_iter()
                        .map(|n| positive(n).saturating_mul(16)),
                ),
                None => 0,
            },
            Growth::Sum => summed(),
            Growth::SumWithSeparator => match arg(0) {
                Some(separator) => {
                    let between = a.len().saturating_sub(2) as u128;
                    summed()
                        .saturating_add(bytes_over_rows(separator, rows).saturating_mul(between))
                }
                None => 0,
            },
            Growth::Encode => match arg(0) {
                Some(value) => bytes_over_rows(value, rows).saturating_mul(2),
                None => 0,
            },
            Growth::PerElement => match arg(0) {
                Some(array) => {
                    let elements = cardinalities(array, rows)?;
                    let mut each = 0u128;
                    for text in &a[1..] {
                        each = each.saturating_add(total(
                            elements
                                .iter()
                                .zip(value_bytes(text, rows)?)
                                .map(|(n, len)| positive(*n).saturating_mul(positive(len))),
                        ));
                    }
                    bytes_over_rows(array, rows).saturating_add(each)
                }
                None => 0,
            },
            Growth::Returned => 0,
        })
    }
}
