//! The exact SQL literal of a bound value: what `SELECT <literal>` plans
//! back to is the value itself, of its own type.

use datafusion::{
    arrow::{array::Array, datatypes::DataType},
    common::ScalarValue,
};

use super::{ParameterError, quoted};

/// The SQL literal that plans back to exactly `value`, of its type: a NULL
/// is `NULL` (its type taken from where it stands).
pub fn literal(value: &ScalarValue) -> Result<String, ParameterError> {
    use ScalarValue as V;
    if value.is_null() {
        return Ok("NULL".to_string());
    }
    let value_type = value.data_type();
    // `value` (SQL) cast to the bound value's exact type.
    let cast = |value: String| -> Result<String, ParameterError> {
        Ok(format!(
            "arrow_cast({value}, {})",
            quoted(&value_type.to_string())
        ))
    };
    match value {
        V::Boolean(Some(b)) => Ok(if *b { "TRUE" } else { "FALSE" }.to_string()),
        V::Int64(Some(i64::MIN)) => Ok(format!("({}-1)", i64::MIN + 1)),
        // Plain integers (what `LIMIT $1` needs), planned as Int64, or
        // UInt64 beyond it.
        V::Int8(_) | V::Int16(_) | V::Int32(_) | V::Int64(_) => Ok(format!("({value})")),
        V::UInt8(_) | V::UInt16(_) | V::UInt32(_) | V::UInt64(_) => Ok(format!("({value})")),
        V::Float64(Some(f)) if f.is_finite() => Ok(format!("({f:?})")),
        // No literal of its own: its text, cast (exact for NaN and the
        // infinities, and a float32 goes through float64 unchanged).
        V::Float64(Some(f)) => cast(quoted(&f.to_string())),
        V::Float32(Some(f)) if f.is_finite() => cast(format!("({:?})", f64::from(*f))),
        V::Float32(Some(f)) => cast(quoted(&f.to_string())),
        V::Utf8(Some(text)) | V::LargeUtf8(Some(text)) | V::Utf8View(Some(text)) => {
            Ok(quoted(text))
        }
        V::Binary(Some(bytes)) | V::LargeBinary(Some(bytes)) | V::BinaryView(Some(bytes)) => {
            Ok(format!("X'{}'", hex::encode(bytes)))
        }
        // Exact as text: the decimal's digits, the date's calendar day.
        V::Decimal128(..) | V::Decimal256(..) | V::Date32(_) | V::Date64(_) => {
            cast(quoted(&value.to_string()))
        }
        // Exact as the integer count of their unit.
        V::TimestampSecond(Some(n), _)
        | V::TimestampMillisecond(Some(n), _)
        | V::TimestampMicrosecond(Some(n), _)
        | V::TimestampNanosecond(Some(n), _)
        | V::Time64Microsecond(Some(n))
        | V::Time64Nanosecond(Some(n)) => cast(format!("({n})")),
        V::List(list) if list.len() == 1 => {
            let items = list.value(0);
            if items.is_empty() {
                return cast("make_array()".to_string());
            }
            let literals = (0..items.len())
                .map(|i| {
                    ScalarValue::try_from_array(&items, i)
                        .map_err(|_| unsupported(&value_type))
                        .and_then(|item| literal(&item))
                })
                .collect::<Result<Vec<_>, _>>()?;
            cast(format!("make_array({})", literals.join(", ")))
        }
        _ => Err(unsupported(&value_type)),
    }
}

fn unsupported(data_type: &DataType) -> ParameterError {
    ParameterError::Unsupported(data_type.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::parameters::{Placeholders, inline};

    /// What `SELECT <literal of value>` plans and runs to.
    async fn planned_back(value: &ScalarValue) -> ScalarValue {
        let sql = inline("SELECT $1 AS v", Placeholders::Numbered, 1, |_| {
            literal(value)
        })
        .unwrap();
        let context = datafusion::prelude::SessionContext::new();
        let batches = context.sql(&sql).await.unwrap().collect().await;
        let batches = batches.unwrap_or_else(|e| panic!("{sql}: {e}"));
        ScalarValue::try_from_array(batches[0].column(0), 0).unwrap()
    }

    #[tokio::test]
    async fn literals_plan_back_to_the_exact_value_and_type() {
        use std::sync::Arc;
        let utc: Option<Arc<str>> = Some("+00:00".into());
        let values = [
            ScalarValue::Utf8(Some("''".into())),
            ScalarValue::Utf8(Some("a''b".into())),
            ScalarValue::Utf8(Some("it's \\ -- /* x".into())),
            ScalarValue::Utf8(Some(String::new())),
            ScalarValue::Float64(Some(f64::NAN)),
            ScalarValue::Float64(Some(f64::INFINITY)),
            ScalarValue::Float64(Some(f64::NEG_INFINITY)),
            ScalarValue::Float64(Some(0.1)),
            ScalarValue::Float64(Some(-1e300)),
            ScalarValue::Float32(Some(1.1)),
            ScalarValue::Float32(Some(f32::NAN)),
            ScalarValue::Int64(Some(i64::MIN)),
            ScalarValue::Int64(Some(-7)),
            ScalarValue::Int32(Some(i32::MAX)),
            ScalarValue::Int16(Some(-3)),
            ScalarValue::UInt64(Some(u64::MAX)),
            ScalarValue::Boolean(Some(false)),
            ScalarValue::Decimal128(Some(-12_345), 10, 3),
            ScalarValue::Decimal128(Some(1), 38, 20),
            ScalarValue::Date32(Some(20_463)),
            ScalarValue::Date32(Some(-1)),
            ScalarValue::TimestampMicrosecond(Some(1_768_003_200_123_456), None),
            ScalarValue::TimestampMicrosecond(Some(-1), utc.clone()),
            ScalarValue::TimestampNanosecond(Some(1), Some("UTC".into())),
            ScalarValue::Time64Microsecond(Some(45_296_000_001)),
            ScalarValue::Binary(Some(vec![0, 39, 255])),
            ScalarValue::List(ScalarValue::new_list_nullable(
                &[ScalarValue::Int64(Some(1)), ScalarValue::Int64(None)],
                &DataType::Int64,
            )),
            ScalarValue::List(ScalarValue::new_list_nullable(
                &[ScalarValue::Utf8(Some("it's".into()))],
                &DataType::Utf8,
            )),
            ScalarValue::List(ScalarValue::new_list_nullable(&[], &DataType::Date32)),
        ];
        for value in values {
            let back = planned_back(&value).await;
            // Integers come back as Int64 (or UInt64 beyond it).
            let value = match value {
                ScalarValue::Int16(_) | ScalarValue::Int32(_) => {
                    value.cast_to(&DataType::Int64).unwrap()
                }
                value => value,
            };
            assert_eq!(back.data_type(), value.data_type(), "{value:?}");
            // NaN is not equal to itself: compare texts.
            assert_eq!(format!("{back:?}"), format!("{value:?}"));
        }
        assert_eq!(literal(&ScalarValue::Int32(None)).unwrap(), "NULL");
        assert_eq!(
            literal(&ScalarValue::IntervalDayTime(Some(Default::default()))),
            Err(ParameterError::Unsupported(DataType::Interval(
                datafusion::arrow::datatypes::IntervalUnit::DayTime
            )))
        );
    }
}
