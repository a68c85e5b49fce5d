//! Scalar functions whose result can be far larger than their arguments
//! (`repeat('x', 1500000000)`, `range(1, 400000000)`, `lpad`, `replace`,
//! ...), bounded. DataFusion's memory pool covers what operators hold
//! (sorts, joins, aggregations), not what one scalar function allocates for
//! its result, so a tiny query could take gigabytes. Every session caller
//! SQL runs in (queries, daily SQL, check_sum and staged SQL of loads)
//! replaces these functions with a wrapper that works out the result's size
//! from the arguments first and refuses past `MAX_RESULT_BYTES` with
//! DataFusion's "Resources exhausted" error, and that checks what the
//! function returned, so a chain of calls that each double their input
//! (`concat(x, x)` nested) stops at the cap too.

use std::sync::Arc;

use datafusion::{
    arrow::{
        array::{Array, ArrayRef, AsArray as _},
        compute::{cast, kernels::length::length},
        datatypes::{DataType, FieldRef, Int64Type, TimeUnit},
    },
    common::{DataFusionError, Result, ScalarValue},
    logical_expr::{
        ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
        ScalarUDFImpl, Signature, udf_eq::UdfEq,
    },
    prelude::SessionContext,
};

/// The most one call of a bounded function may return, over all rows of a
/// batch: a quarter of the default query memory limit.
pub const MAX_RESULT_BYTES: usize = 256 * 1024 * 1024;

/// How a function's result size follows from its arguments (bytes, over all
/// rows), where it can be far larger than they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
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
    /// Bounded by the arguments' own size (`concat`, `array_concat`,
    /// `overlay`): only the result is checked.
    Sum,
}

/// The functions bounded, by name.
const BOUNDED: &[(&str, Growth)] = &[
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("replace", Growth::Replace),
    ("regexp_replace", Growth::RegexpReplace),
    ("range", Growth::Range),
    ("generate_series", Growth::Range),
    ("array_repeat", Growth::ArrayRepeat),
    ("array_resize", Growth::ArrayResize),
    ("concat", Growth::Sum),
    ("concat_ws", Growth::Sum),
    ("array_concat", Growth::Sum),
    ("overlay", Growth::Sum),
];

/// Replaces the context's growing functions with their bounded wrappers.
pub fn bound_functions(context: &SessionContext) {
    bound_functions_at(context, MAX_RESULT_BYTES);
}

fn bound_functions_at(context: &SessionContext, max_bytes: usize) {
    for (name, growth) in BOUNDED {
        if let Some(inner) = context.state().scalar_functions().get(*name).cloned() {
            context.register_udf(ScalarUDF::new_from_impl(Bounded {
                inner: UdfEq::from(inner.inner().clone()),
                growth: *growth,
                max_bytes,
            }));
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: UdfEq<Arc<dyn ScalarUDFImpl>>,
    growth: Growth,
    max_bytes: usize,
}

impl Bounded {
    fn exhausted(&self, bytes: u128) -> DataFusionError {
        DataFusionError::ResourcesExhausted(format!(
            "{} would return {bytes} bytes, more than one function call may ({} bytes)",
            self.name(),
            self.max_bytes
        ))
    }
}

/// An argument as an array of `rows` values.
fn column(arg: &ColumnarValue, rows: usize) -> Result<ArrayRef> {
    arg.to_array(rows)
}

/// Each row's integer argument (null and uncastable as 0).
fn integers(arg: &ColumnarValue, rows: usize) -> Result<Vec<i128>> {
    let values = cast(&column(arg, rows)?, &DataType::Int64)?;
    let values = values.as_primitive::<Int64Type>();
    Ok((0..rows)
        .map(|i| match values.is_valid(i) {
            true => i128::from(values.value(i)),
            false => 0,
        })
        .collect())
}

/// Each row's string argument's length in bytes (null as 0).
fn byte_lengths(arg: &ColumnarValue, rows: usize) -> Result<Vec<i128>> {
    let array = column(arg, rows)?;
    let array = match array.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => array,
        _ => cast(&array, &DataType::Utf8)?,
    };
    integers(&ColumnarValue::Array(length(&array)?), rows)
}

/// Each row's value as nanoseconds (integers as they are, dates and
/// timestamps since the epoch), for range bounds.
fn positions(arg: &ColumnarValue, rows: usize) -> Result<Vec<i128>> {
    let array = column(arg, rows)?;
    match array.data_type() {
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) => {
            // Milliseconds reach any date; nanoseconds stop at 2262.
            let millis = cast(&array, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
            Ok(integers(&ColumnarValue::Array(millis), rows)?
                .into_iter()
                .map(|ms| ms * 1_000_000)
                .collect())
        }
        _ => integers(&ColumnarValue::Array(array), rows),
    }
}

/// Each row's range step: integers as they are, intervals as nanoseconds
/// (a month as 28 days: the most steps it can make).
fn steps(arg: &ColumnarValue, rows: usize) -> Result<Vec<i128>> {
    let array = column(arg, rows)?;
    let DataType::Interval(_) = array.data_type() else {
        return integers(&ColumnarValue::Array(array), rows);
    };
    let day = 86_400_000_000_000i128;
    (0..rows)
        .map(|i| {
            Ok(match ScalarValue::try_from_array(&array, i)? {
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
}

/// Bytes each row of an argument takes, roughly (for copies of it).
fn bytes_per_row(arg: &ColumnarValue, rows: usize) -> u128 {
    match arg {
        ColumnarValue::Scalar(value) => value.size() as u128,
        ColumnarValue::Array(array) => (array.get_array_memory_size() / rows.max(1)) as u128,
    }
}

impl Bounded {
    /// The result's size in bytes over all rows, worked out from the arguments.
    fn expected_bytes(&self, args: &ScalarFunctionArgs) -> Result<u128> {
        let rows = args.number_rows;
        let a = &args.args;
        let arg = |i: usize| a.get(i);
        let positive = |v: i128| v.max(0) as u128;
        let total = match self.growth {
            Growth::Repeat => match (arg(0), arg(1)) {
                (Some(s), Some(n)) => byte_lengths(s, rows)?
                    .into_iter()
                    .zip(integers(n, rows)?)
                    .map(|(len, n)| positive(len).saturating_mul(positive(n)))
                    .fold(0u128, u128::saturating_add),
                _ => 0,
            },
            Growth::Pad => match arg(1) {
                Some(n) => integers(n, rows)?
                    .into_iter()
                    .map(|n| positive(n).saturating_mul(4))
                    .fold(0u128, u128::saturating_add),
                None => 0,
            },
            Growth::Replace | Growth::RegexpReplace => match (arg(0), arg(1), arg(2)) {
                (Some(s), Some(from), Some(to)) => {
                    let from = match self.growth {
                        Growth::Replace => byte_lengths(from, rows)?,
                        _ => vec![0; rows],
                    };
                    byte_lengths(s, rows)?
                        .into_iter()
                        .zip(from)
                        .zip(byte_lengths(to, rows)?)
                        .map(|((s, from), to)| {
                            let places = positive(s) / positive(from).max(1) + 1;
                            positive(s).saturating_add(places.saturating_mul(positive(to)))
                        })
                        .fold(0u128, u128::saturating_add)
                }
                _ => 0,
            },
            Growth::Range => {
                let (start, stop, step) = match a.len() {
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
                start
                    .into_iter()
                    .zip(positions(stop, rows)?)
                    .zip(step)
                    .map(|((start, stop), step)| match step {
                        0 => 0,
                        step => positive((stop - start) / step + 1).saturating_mul(8),
                    })
                    .fold(0u128, u128::saturating_add)
            }
            Growth::ArrayRepeat => match (arg(0), arg(1)) {
                (Some(element), Some(n)) => {
                    let each = bytes_per_row(element, rows).max(1);
                    integers(n, rows)?
                        .into_iter()
                        .map(|n| positive(n).saturating_mul(each))
                        .fold(0u128, u128::saturating_add)
                }
                _ => 0,
            },
            Growth::ArrayResize => match arg(1) {
                Some(n) => integers(n, rows)?
                    .into_iter()
                    .map(|n| positive(n).saturating_mul(16))
                    .fold(0u128, u128::saturating_add),
                None => 0,
            },
            Growth::Sum => 0,
        };
        Ok(total)
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let expected = self.expected_bytes(&args)?;
        if expected > self.max_bytes as u128 {
            return Err(self.exhausted(expected));
        }
        let result = self.inner.invoke_with_args(args)?;
        let returned = match &result {
            ColumnarValue::Scalar(value) => value.size(),
            ColumnarValue::Array(array) => array.get_array_memory_size(),
        };
        if returned > self.max_bytes {
            return Err(self.exhausted(returned as u128));
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run_at(sql: &str, max_bytes: usize) -> Result<()> {
        let context = SessionContext::new();
        bound_functions_at(&context, max_bytes);
        context.sql(sql).await?.collect().await.map(drop)
    }

    async fn run(sql: &str) -> Result<()> {
        run_at(sql, MAX_RESULT_BYTES).await
    }

    fn is_exhausted(outcome: Result<()>) -> bool {
        outcome
            .err()
            .is_some_and(|e| matches!(e.find_root(), DataFusionError::ResourcesExhausted(_)))
    }

    #[tokio::test]
    async fn growing_functions_stop_at_the_cap_and_work_below_it() {
        for sql in [
            "SELECT length(repeat('x', 1500000000))",
            "SELECT cardinality(range(1, 400000000))",
            "SELECT cardinality(generate_series(1, 400000000))",
            "SELECT cardinality(range(DATE '1970-01-01', DATE '2200-01-01', INTERVAL '1 second'))",
            "SELECT cardinality(range(DATE '1970-01-01', DATE '9999-12-31', INTERVAL '1 minute'))",
            "SELECT length(lpad('x', 1000000000))",
            "SELECT length(rpad('x', 1000000000, 'y'))",
            "SELECT length(replace(repeat('x', 100000), 'x', repeat('y', 10000)))",
            "SELECT length(regexp_replace(repeat('x', 100000), '', repeat('y', 10000), 'g'))",
            "SELECT cardinality(array_repeat(1, 100000000))",
            "SELECT cardinality(array_resize([1], 100000000))",
            "SELECT length(repeat(v, 1000000)) FROM (VALUES ('abcdefghij'), ('klmnopqrst')) t(v) \
             CROSS JOIN (SELECT * FROM generate_series(1, 30)) g",
        ] {
            assert!(is_exhausted(run(sql).await), "{sql} must be refused");
        }
        // Doubling: each call's arguments under the cap, its result checked.
        let doubling = "SELECT length(concat(repeat('x', 600000), repeat('x', 600000)))";
        assert!(is_exhausted(run_at(doubling, 1 << 20).await));
        run_at(
            "SELECT length(concat(repeat('x', 300000), repeat('x', 300000)))",
            1 << 20,
        )
        .await
        .unwrap();
        for sql in [
            "SELECT repeat('x', 1000), lpad('x', 10), rpad('x', 10, 'y')",
            "SELECT replace('abc', 'b', 'xyz'), regexp_replace('abc', 'b', 'x')",
            "SELECT range(1, 10), generate_series(1, 10, 2), array_repeat('a', 3), array_resize([1], 5)",
            "SELECT range(DATE '2026-01-01', DATE '2026-12-31', INTERVAL '1 day')",
            "SELECT concat('a', 'b'), concat_ws(',', 'a', 'b'), array_concat([1], [2])",
            "SELECT repeat(v, 3) FROM (VALUES ('a'), (NULL)) t(v)",
        ] {
            run(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
}
