//! One-dimensional array parameters (`col = ANY($1)` with a list), in the
//! text (`{1,2,NULL}`) and binary formats: each item read as a value of
//! the array's item type (`values.rs`), the whole as one list value.

use std::sync::Arc;

use datafusion::{arrow::datatypes::DataType, common::ScalarValue};
use pgwire::{
    api::Type,
    error::PgWireResult,
    types::{FromSqlText, format::FormatOptions},
};

use super::values::{MAX_DIGITS, UTC, binary_scalar, invalid, text_scalar};
use crate::pg::sqlstate::error;

/// The type of an array type's items; `None` for other types.
pub(super) fn item_type(declared: &Type) -> Option<Type> {
    let item = match *declared {
        Type::INT2_ARRAY => Type::INT2,
        Type::INT4_ARRAY => Type::INT4,
        Type::INT8_ARRAY => Type::INT8,
        Type::FLOAT4_ARRAY => Type::FLOAT4,
        Type::FLOAT8_ARRAY => Type::FLOAT8,
        Type::NUMERIC_ARRAY => Type::NUMERIC,
        Type::BOOL_ARRAY => Type::BOOL,
        Type::TEXT_ARRAY => Type::TEXT,
        Type::VARCHAR_ARRAY => Type::VARCHAR,
        Type::BPCHAR_ARRAY => Type::BPCHAR,
        Type::DATE_ARRAY => Type::DATE,
        Type::TIME_ARRAY => Type::TIME,
        Type::TIMESTAMP_ARRAY => Type::TIMESTAMP,
        Type::TIMESTAMPTZ_ARRAY => Type::TIMESTAMPTZ,
        _ => return None,
    };
    Some(item)
}

/// An array's items as one list value of their type (numeric items at the
/// widest scale among them).
fn list_of(items: Vec<ScalarValue>, item: &Type) -> PgWireResult<ScalarValue> {
    let scale = items
        .iter()
        .filter_map(|v| match v {
            ScalarValue::Decimal128(_, _, s) => Some(*s),
            _ => None,
        })
        .max();
    let item_type = match (item, scale) {
        (&Type::NUMERIC, Some(scale)) => DataType::Decimal128(MAX_DIGITS as u8, scale),
        (&Type::NUMERIC, None) => DataType::Float64,
        _ => scalar_type(item),
    };
    let items = items
        .into_iter()
        .map(|v| {
            if v.is_null() {
                ScalarValue::try_from(&item_type)
            } else {
                v.cast_to(&item_type)
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error("22P02", format!("an array parameter's items differ: {e}")))?;
    Ok(ScalarValue::List(ScalarValue::new_list_nullable(
        &items, &item_type,
    )))
}

/// The value type a parameter of `item`'s type reads as.
fn scalar_type(item: &Type) -> DataType {
    use datafusion::arrow::datatypes::TimeUnit::Microsecond;
    match *item {
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::FLOAT4 => DataType::Float32,
        Type::FLOAT8 => DataType::Float64,
        Type::BOOL => DataType::Boolean,
        Type::DATE => DataType::Date32,
        Type::TIME => DataType::Time64(Microsecond),
        Type::TIMESTAMP => DataType::Timestamp(Microsecond, None),
        Type::TIMESTAMPTZ => DataType::Timestamp(Microsecond, Some(Arc::from(UTC))),
        _ => DataType::Utf8,
    }
}

/// An array in the text format (`{1,2,NULL}`, `{"it's","a,b"}`).
pub(super) fn text_array(text: &str, declared: &Type, item: &Type) -> PgWireResult<ScalarValue> {
    let trimmed = text.trim();
    if trimmed.starts_with("{{") || trimmed.starts_with('[') {
        return Err(error("0A000", "lakehost binds one-dimensional arrays only"));
    }
    let items = Vec::<Option<String>>::from_sql_text(
        declared,
        trimmed.as_bytes(),
        &FormatOptions::default(),
    )
    .map_err(|_| invalid(declared, text))?;
    let items = items
        .into_iter()
        .map(|item_text| match item_text {
            Some(item_text) => text_scalar(&item_text, item),
            None => Ok(ScalarValue::Null),
        })
        .collect::<PgWireResult<Vec<_>>>()?;
    list_of(items, item)
}

/// An array in the binary format: dimensions, flags, the item type, each
/// dimension's length and lower bound, then each item's length and bytes.
pub(super) fn binary_array(
    bytes: &[u8],
    declared: &Type,
    item: &Type,
) -> PgWireResult<ScalarValue> {
    let wrong = || {
        error(
            "22P03",
            format!("incorrect binary data format for type {declared}"),
        )
    };
    let int = |at: usize| -> PgWireResult<i32> {
        Ok(i32::from_be_bytes(
            bytes
                .get(at..at + 4)
                .ok_or_else(wrong)?
                .try_into()
                .expect("4 bytes"),
        ))
    };
    let dimensions = int(0)?;
    if dimensions == 0 {
        return list_of(Vec::new(), item);
    }
    if dimensions != 1 {
        return Err(error("0A000", "lakehost binds one-dimensional arrays only"));
    }
    let count = usize::try_from(int(12)?).map_err(|_| wrong())?;
    let mut at = 20;
    let mut items = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let length = int(at)?;
        at += 4;
        if length < 0 {
            items.push(ScalarValue::Null);
            continue;
        }
        let length = usize::try_from(length).map_err(|_| wrong())?;
        let value = bytes.get(at..at + length).ok_or_else(wrong)?;
        at += length;
        items.push(binary_scalar(value, item)?);
    }
    if at != bytes.len() {
        return Err(wrong());
    }
    list_of(items, item)
}
