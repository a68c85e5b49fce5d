//! One bound Postgres parameter read as a typed value (`ScalarValue`), in
//! the text or the binary format of its declared type, as psycopg 3 and
//! pgjdbc send them: integers, floats, numeric (NaN and the infinities
//! too), booleans, strings, dates, times, timestamps with and without a
//! zone, bytea and one-dimensional arrays of these. A type it does not read
//! is refused with an error naming it, never guessed.

use std::sync::Arc;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime};
use datafusion::common::ScalarValue;
use pgwire::{
    api::{Type, results::FieldFormat},
    error::PgWireResult,
    types::{FromSqlText, format::FormatOptions},
};

use super::arrays::{binary_array, item_type, text_array};
use crate::pg::sqlstate::error;

/// Days from 1970-01-01 (Arrow's epoch) to 2000-01-01 (Postgres's).
const PG_EPOCH_DAYS: i64 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS * 86_400_000_000;
/// The zone of a `timestamptz` value (an instant, read as UTC).
pub(super) const UTC: &str = "+00:00";
/// The most digits a decimal holds (`Decimal128`).
pub(super) const MAX_DIGITS: usize = 38;

/// The value of one parameter: `None` is SQL NULL.
pub fn scalar(
    value: Option<&[u8]>,
    declared: &Type,
    format: FieldFormat,
) -> PgWireResult<ScalarValue> {
    let Some(bytes) = value else {
        return Ok(ScalarValue::Null);
    };
    if let Some(item) = item_type(declared) {
        return match format {
            FieldFormat::Text => text_array(text_of(bytes)?, declared, &item),
            FieldFormat::Binary => binary_array(bytes, declared, &item),
        };
    }
    match format {
        FieldFormat::Text => text_scalar(text_of(bytes)?, declared),
        FieldFormat::Binary => binary_scalar(bytes, declared),
    }
}

fn text_of(bytes: &[u8]) -> PgWireResult<&str> {
    std::str::from_utf8(bytes).map_err(|_| error("22021", "a text parameter is not UTF-8"))
}

/// The refusal of a value that is not one of its type.
pub(super) fn invalid(declared: &Type, text: &str) -> pgwire::error::PgWireError {
    let shown: String = text.chars().take(64).collect();
    error(
        "22P02",
        format!("invalid input syntax for type {declared}: \"{shown}\""),
    )
}

fn unsupported(declared: &Type) -> pgwire::error::PgWireError {
    error(
        "0A000",
        format!(
            "lakehost does not read parameters of type {declared}: bind integers, floats, numeric, \
             boolean, text, date, time, timestamp, timestamptz, bytea or one-dimensional arrays \
             of these, or send the value as text and cast it in SQL"
        ),
    )
}

/// A value in Postgres's text format (`FromSqlText` reads the date and time
/// forms, pgjdbc's `2026-01-10 +00` among them).
pub(super) fn text_scalar(text: &str, declared: &Type) -> PgWireResult<ScalarValue> {
    let parsed = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(invalid(declared, text))
        }
    };
    let options = FormatOptions::default();
    let value = match *declared {
        Type::INT2 => ScalarValue::Int16(Some(
            text.trim().parse().map_err(|_| invalid(declared, text))?,
        )),
        Type::INT4 => ScalarValue::Int32(Some(
            text.trim().parse().map_err(|_| invalid(declared, text))?,
        )),
        Type::INT8 | Type::OID => ScalarValue::Int64(Some(
            text.trim().parse().map_err(|_| invalid(declared, text))?,
        )),
        Type::FLOAT4 => ScalarValue::Float32(Some(
            text.trim().parse().map_err(|_| invalid(declared, text))?,
        )),
        Type::FLOAT8 => ScalarValue::Float64(Some(
            text.trim().parse().map_err(|_| invalid(declared, text))?,
        )),
        Type::NUMERIC => numeric(text.trim()).ok_or_else(|| invalid(declared, text))??,
        Type::BOOL => match text.trim().to_ascii_lowercase().as_str() {
            "t" | "true" | "1" | "on" | "yes" | "y" => ScalarValue::Boolean(Some(true)),
            "f" | "false" | "0" | "off" | "no" | "n" => ScalarValue::Boolean(Some(false)),
            _ => return Err(invalid(declared, text)),
        },
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            ScalarValue::Utf8(Some(text.to_string()))
        }
        Type::UNKNOWN => {
            zoned_date_or_time(text).unwrap_or_else(|| ScalarValue::Utf8(Some(text.to_string())))
        }
        Type::DATE => {
            let date = NaiveDate::from_sql_text(declared, text.as_bytes(), &options)
                .map_err(|_| invalid(declared, text))?;
            date_of(date)
        }
        Type::TIMESTAMP => {
            let at = NaiveDateTime::from_sql_text(declared, text.as_bytes(), &options)
                .or_else(|_| {
                    NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d")
                        .map(|d| d.and_time(NaiveTime::MIN))
                })
                .map_err(|_| invalid(declared, text))?;
            ScalarValue::TimestampMicrosecond(Some(at.and_utc().timestamp_micros()), None)
        }
        Type::TIMESTAMPTZ => match zoned_date_or_time(text) {
            Some(ScalarValue::Date32(Some(days))) => utc_micros(i64::from(days) * 86_400_000_000),
            Some(value) => value,
            None => {
                let at =
                    DateTime::<FixedOffset>::from_sql_text(declared, text.as_bytes(), &options)
                        .map_err(|_| invalid(declared, text))?;
                utc_micros(at.timestamp_micros())
            }
        },
        Type::TIME => {
            let time = NaiveTime::parse_from_str(text.trim(), "%H:%M:%S%.f")
                .map_err(|_| invalid(declared, text))?;
            ScalarValue::Time64Microsecond(Some(micros_of_day(time)))
        }
        Type::BYTEA => ScalarValue::Binary(Some(
            Vec::<u8>::from_sql_text(declared, text.as_bytes(), &options)
                .map_err(|_| invalid(declared, text))?,
        )),
        _ => return Err(unsupported(declared)),
    };
    parsed(true)?;
    Ok(value)
}

/// pgjdbc's `setDate` and `setTimestamp` send their value untyped with a
/// zone (`2026-01-10 +00`, `2026-01-10 12:00:00.5+01`): read as a date, and
/// as the instant (UTC). Any other untyped text stays a string.
fn zoned_date_or_time(text: &str) -> Option<ScalarValue> {
    let (head, zone) = text.trim().rsplit_once(['+', '-'])?;
    let zone_ok = !zone.is_empty()
        && zone.len() <= 8
        && zone.chars().all(|c| c.is_ascii_digit() || c == ':')
        && zone.as_bytes()[0].is_ascii_digit();
    if !zone_ok {
        return None;
    }
    let head = head.trim_end();
    if let Ok(date) = NaiveDate::parse_from_str(head, "%Y-%m-%d")
        && head.len() == 10
        && text.trim().len() > head.len() + 1
    {
        return Some(date_of(date));
    }
    let at = DateTime::parse_from_str(text.trim(), "%Y-%m-%d %H:%M:%S%.f%#z")
        .or_else(|_| DateTime::parse_from_str(text.trim(), "%Y-%m-%d %H:%M:%S%.f%:z"))
        .or_else(|_| DateTime::parse_from_str(text.trim(), "%Y-%m-%d %H:%M:%S%.f%z"))
        .ok()?;
    Some(utc_micros(at.timestamp_micros()))
}

fn date_of(date: NaiveDate) -> ScalarValue {
    let days = date
        .signed_duration_since(DateTime::UNIX_EPOCH.date_naive())
        .num_days();
    ScalarValue::Date32(i32::try_from(days).ok())
}

fn utc_micros(micros: i64) -> ScalarValue {
    ScalarValue::TimestampMicrosecond(Some(micros), Some(Arc::from(UTC)))
}

fn micros_of_day(time: NaiveTime) -> i64 {
    (time - NaiveTime::MIN).num_microseconds().unwrap_or(0)
}

/// A numeric's text: NaN and the infinities as floats (a decimal has none),
/// else a decimal of its own scale; `None` when it is no number, an error
/// when it has more than 38 digits.
fn numeric(text: &str) -> Option<PgWireResult<ScalarValue>> {
    match text.to_ascii_lowercase().as_str() {
        "nan" => return Some(Ok(ScalarValue::Float64(Some(f64::NAN)))),
        "infinity" | "+infinity" | "inf" => {
            return Some(Ok(ScalarValue::Float64(Some(f64::INFINITY))));
        }
        "-infinity" | "-inf" => return Some(Ok(ScalarValue::Float64(Some(f64::NEG_INFINITY)))),
        _ => {}
    }
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (negative, unsigned) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa.strip_prefix('+').unwrap_or(mantissa)),
    };
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .chars()
            .chain(fraction.chars())
            .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let mut digits = format!("{whole}{fraction}");
    let mut scale = i64::try_from(fraction.len()).ok()? - i64::from(exponent);
    if scale < 0 {
        digits.push_str(&"0".repeat(usize::try_from(-scale).ok()?));
        scale = 0;
    }
    let significant = digits.trim_start_matches('0');
    let scale = usize::try_from(scale).ok()?;
    if significant.len() > MAX_DIGITS || scale > MAX_DIGITS {
        return Some(Err(error(
            "22003",
            format!("numeric value {text:.64} has more than {MAX_DIGITS} digits, lakehost's most"),
        )));
    }
    let mut value: i128 = if significant.is_empty() {
        0
    } else {
        significant.parse().ok()?
    };
    if negative {
        value = -value;
    }
    let scale = i8::try_from(scale).ok()?;
    Some(Ok(ScalarValue::Decimal128(
        Some(value),
        MAX_DIGITS as u8,
        scale,
    )))
}

/// A value in Postgres's binary format.
pub(super) fn binary_scalar(bytes: &[u8], declared: &Type) -> PgWireResult<ScalarValue> {
    let wrong_size = || {
        error(
            "22P03",
            format!("incorrect binary data format for type {declared}"),
        )
    };
    let fixed = |n: usize| -> PgWireResult<&[u8]> {
        (bytes.len() == n).then_some(bytes).ok_or_else(wrong_size)
    };
    let i64_of = |b: &[u8]| i64::from_be_bytes(b.try_into().expect("8 bytes"));
    let value = match *declared {
        Type::INT2 => ScalarValue::Int16(Some(i16::from_be_bytes(
            fixed(2)?.try_into().expect("2 bytes"),
        ))),
        Type::INT4 => ScalarValue::Int32(Some(i32::from_be_bytes(
            fixed(4)?.try_into().expect("4 bytes"),
        ))),
        Type::INT8 => ScalarValue::Int64(Some(i64_of(fixed(8)?))),
        Type::OID => ScalarValue::Int64(Some(
            u32::from_be_bytes(fixed(4)?.try_into().expect("4 bytes")).into(),
        )),
        Type::FLOAT4 => ScalarValue::Float32(Some(f32::from_be_bytes(
            fixed(4)?.try_into().expect("4 bytes"),
        ))),
        Type::FLOAT8 => ScalarValue::Float64(Some(f64::from_be_bytes(
            fixed(8)?.try_into().expect("8 bytes"),
        ))),
        Type::BOOL => ScalarValue::Boolean(Some(fixed(1)?[0] != 0)),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            ScalarValue::Utf8(Some(text_of(bytes)?.to_string()))
        }
        Type::BYTEA => ScalarValue::Binary(Some(bytes.to_vec())),
        Type::NUMERIC => {
            let text = numeric_text(bytes).ok_or_else(wrong_size)?;
            numeric(&text).ok_or_else(wrong_size)??
        }
        Type::DATE => {
            let days = i32::from_be_bytes(fixed(4)?.try_into().expect("4 bytes"));
            if days == i32::MAX || days == i32::MIN {
                return Err(error("22008", "lakehost has no infinite dates"));
            }
            ScalarValue::Date32(i32::try_from(i64::from(days) + PG_EPOCH_DAYS).ok())
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64_of(fixed(8)?);
            if micros == i64::MAX || micros == i64::MIN {
                return Err(error("22008", "lakehost has no infinite timestamps"));
            }
            let micros = micros.checked_add(PG_EPOCH_MICROS).ok_or_else(wrong_size)?;
            match *declared {
                Type::TIMESTAMP => ScalarValue::TimestampMicrosecond(Some(micros), None),
                _ => utc_micros(micros),
            }
        }
        Type::TIME => ScalarValue::Time64Microsecond(Some(i64_of(fixed(8)?))),
        _ => return Err(unsupported(declared)),
    };
    Ok(value)
}

/// A binary numeric (digits in base 10000, a weight, a sign and a display
/// scale) as its text.
fn numeric_text(bytes: &[u8]) -> Option<String> {
    let word = |i: usize| -> Option<u16> {
        Some(u16::from_be_bytes(bytes.get(i..i + 2)?.try_into().ok()?))
    };
    let count = usize::from(word(0)?);
    let weight = i64::from(word(2)? as i16);
    let sign = word(4)?;
    let scale = usize::from(word(6)?);
    if bytes.len() != 8 + 2 * count {
        return None;
    }
    match sign {
        0xC000 => return Some("NaN".into()),
        0xD000 => return Some("Infinity".into()),
        0xF000 => return Some("-Infinity".into()),
        0x0000 | 0x4000 => {}
        _ => return None,
    }
    let groups: Vec<u16> = (0..count).map(|i| word(8 + 2 * i)).collect::<Option<_>>()?;
    if groups.iter().any(|&g| g > 9_999) {
        return None;
    }
    // Digit groups from 10000^weight down; the whole part ends at group
    // `weight`, the fraction shows `scale` digits.
    let group = |i: i64| -> u16 {
        usize::try_from(weight - i)
            .ok()
            .and_then(|k| groups.get(k).copied())
            .unwrap_or(0)
    };
    let mut whole = String::new();
    for power in (0..=weight.max(0)).rev() {
        whole.push_str(&format!("{:04}", group(power)));
    }
    let whole = whole.trim_start_matches('0');
    let mut fraction = String::new();
    let mut power = -1;
    while fraction.len() < scale {
        fraction.push_str(&format!("{:04}", group(power)));
        power -= 1;
    }
    fraction.truncate(scale);
    let sign = if sign == 0x4000 { "-" } else { "" };
    let whole = if whole.is_empty() { "0" } else { whole };
    Some(match scale {
        0 => format!("{sign}{whole}"),
        _ => format!("{sign}{whole}.{fraction}"),
    })
}
