//! Extended-protocol parameters: each bound value is read as a typed value
//! in its format and declared type (`values.rs`), then inlined as its exact
//! literal at its `$n` tokens by `query::parameters` (which checks that no
//! value changed the statement around it).

mod arrays;
mod values;

use pgwire::{
    api::{Type, portal::Portal},
    error::{PgWireError, PgWireResult},
};

use super::sqlstate::error;
use crate::query::parameters::{self, ParameterError, Placeholders};

impl From<ParameterError> for PgWireError {
    fn from(e: ParameterError) -> Self {
        let code = match e {
            ParameterError::TooMany => "54023",
            ParameterError::Zero => "42P02",
            ParameterError::Missing {
                supplied,
                ref placeholder,
            } => {
                return error(
                    "08P01",
                    format!(
                        "bind message supplies {supplied} parameters, but the statement uses {placeholder}"
                    ),
                );
            }
            ParameterError::Unused { supplied, takes } => {
                return error(
                    "08P01",
                    format!(
                        "bind message supplies {supplied} parameters, but the statement requires {takes}"
                    ),
                );
            }
            ParameterError::Syntax(_) | ParameterError::Mixed | ParameterError::Changed => "42601",
            ParameterError::Unsupported(_) | ParameterError::ManyRows => "0A000",
        };
        error(code, e.to_string())
    }
}

/// How many parameters `sql` takes: its highest `$n`.
pub fn count(sql: &str) -> PgWireResult<usize> {
    Ok(parameters::count(sql, Placeholders::Numbered)?)
}

/// `sql` with every parameter NULL: what a statement is described by
/// before values are bound (its columns do not depend on them).
pub fn with_nulls(sql: &str) -> PgWireResult<String> {
    let takes = count(sql)?;
    parameters::inline(sql, Placeholders::Numbered, takes, |_| {
        Ok::<_, PgWireError>("NULL".to_string())
    })
}

/// The portal's statement with its bound values inlined, each as the exact
/// literal of its typed value (`values.rs` reads it in its format).
pub fn inline(portal: &Portal<String>) -> PgWireResult<String> {
    parameters::inline(
        &portal.statement.statement,
        Placeholders::Numbered,
        portal.parameters.len(),
        |index| {
            let declared = portal
                .statement
                .parameter_types
                .get(index)
                .cloned()
                .flatten()
                .unwrap_or(Type::UNKNOWN);
            let format = portal.parameter_format.format_for(index);
            let value = values::scalar(portal.parameters[index].as_deref(), &declared, format)?;
            Ok(parameters::literal(&value)?)
        },
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pgwire::api::{results::FieldFormat, stmt::StoredStatement};

    use super::*;

    /// `sql` with text values bound to parameters of `types`.
    fn inlined(sql: &str, values: &[&str], types: &[Type]) -> PgWireResult<String> {
        let mut portal = Portal::<String>::default();
        portal.statement = Arc::new(StoredStatement::new(
            "s".into(),
            sql.into(),
            types.iter().cloned().map(Some).collect(),
        ));
        portal.parameters = values
            .iter()
            .map(|v| Some(bytes::Bytes::copy_from_slice(v.as_bytes())))
            .collect();
        inline(&portal)
    }

    #[test]
    fn values_are_inlined_with_postgres_errors() {
        // A negative number after a minus is no comment.
        let sql = inlined(
            "SELECT x FROM t WHERE x > 0-$1 AND x < 0",
            &["-1"],
            &[Type::INT4],
        );
        assert_eq!(sql.unwrap(), "SELECT x FROM t WHERE x > 0- (-1)  AND x < 0");
        let refused = |sql: &str| match inlined(sql, &["a"], &[]) {
            Err(PgWireError::UserError(info)) => (info.code, info.message),
            other => panic!("{sql}: {other:?}"),
        };
        assert_eq!(
            refused("SELECT $2"),
            (
                "08P01".to_string(),
                "bind message supplies 1 parameters, but the statement uses $2".to_string()
            )
        );
        assert_eq!(refused("SELECT $0").0, "42P02");
        assert_eq!(refused("SELECT $1001").0, "54023");
        // `?` is no placeholder in Postgres.
        assert_eq!(count("SELECT ?").unwrap(), 0);
    }

    /// `value` bound as `declared` in `format`, as its literal.
    fn bound(value: Option<&[u8]>, declared: Type, format: FieldFormat) -> PgWireResult<String> {
        let value = values::scalar(value, &declared, format)?;
        Ok(parameters::literal(&value)?)
    }

    fn text(value: &str, declared: Type) -> PgWireResult<String> {
        bound(Some(value.as_bytes()), declared, FieldFormat::Text)
    }

    fn binary(value: &[u8], declared: Type) -> PgWireResult<String> {
        bound(Some(value), declared, FieldFormat::Binary)
    }

    fn code(result: PgWireResult<String>) -> String {
        match result {
            Err(PgWireError::UserError(info)) => info.code,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_become_exact_literals_by_type_and_format() {
        assert_eq!(text("42", Type::INT4).unwrap(), "(42)");
        assert_eq!(code(text("42; DROP TABLE x", Type::INT4)), "22P02");
        assert_eq!(text("it's", Type::TEXT).unwrap(), "'it''s'");
        assert_eq!(text("a''b", Type::UNKNOWN).unwrap(), "'a''''b'");
        assert_eq!(text("t", Type::BOOL).unwrap(), "TRUE");
        assert_eq!(bound(None, Type::INT4, FieldFormat::Text).unwrap(), "NULL");
        assert_eq!(binary(&7i64.to_be_bytes(), Type::INT8).unwrap(), "(7)");
        assert_eq!(
            binary(&1.5f64.to_be_bytes(), Type::FLOAT8).unwrap(),
            "(1.5)"
        );
        assert_eq!(
            binary(&f64::NAN.to_be_bytes(), Type::FLOAT8).unwrap(),
            "arrow_cast('NaN', 'Float64')"
        );
        assert_eq!(
            text("-Infinity", Type::FLOAT8).unwrap(),
            "arrow_cast('-inf', 'Float64')"
        );
        assert_eq!(code(binary(&[0, 1], Type::INT8)), "22P03");
        assert_eq!(code(binary(&[0, 0, 0, 42], Type::UNKNOWN)), "0A000");
        assert_eq!(code(text("(1,2)", Type::POINT)), "0A000");
        assert_eq!(binary(b"a'b", Type::TEXT).unwrap(), "'a''b'");
    }

    #[test]
    fn dates_and_times_in_both_formats() {
        let date = "arrow_cast('2026-01-10', 'Date32')";
        assert_eq!(text("2026-01-10", Type::DATE).unwrap(), date);
        // pgjdbc's setDate: untyped, with a zone.
        assert_eq!(text("2026-01-10 +00", Type::UNKNOWN).unwrap(), date);
        assert_eq!(text("2026-01-10 -05", Type::UNKNOWN).unwrap(), date);
        // 2026-01-10 is day 9506 after 2000-01-01.
        assert_eq!(binary(&9506i32.to_be_bytes(), Type::DATE).unwrap(), date);
        let midnight = "arrow_cast((1768003200000000), 'Timestamp(µs, \"+00:00\")')";
        assert_eq!(
            text("2026-01-10 00:00:00+00", Type::UNKNOWN).unwrap(),
            midnight
        );
        assert_eq!(text("2026-01-10 +00", Type::TIMESTAMPTZ).unwrap(), midnight);
        assert_eq!(
            text("2026-01-10 01:00:00+01", Type::TIMESTAMPTZ).unwrap(),
            midnight
        );
        let micros = (1_768_003_200_000_000i64 - 946_684_800_000_000).to_be_bytes();
        assert_eq!(binary(&micros, Type::TIMESTAMPTZ).unwrap(), midnight);
        assert_eq!(
            binary(&micros, Type::TIMESTAMP).unwrap(),
            "arrow_cast((1768003200000000), 'Timestamp(µs)')"
        );
        assert_eq!(
            text("2026-01-10 00:00:00.5", Type::TIMESTAMP).unwrap(),
            "arrow_cast((1768003200500000), 'Timestamp(µs)')"
        );
        assert_eq!(
            text("01:00:00.25", Type::TIME).unwrap(),
            "arrow_cast((3600250000), 'Time64(µs)')"
        );
        // Untyped text that is no zoned date stays a string.
        assert_eq!(text("2026-01-10", Type::UNKNOWN).unwrap(), "'2026-01-10'");
        assert_eq!(text("1-2", Type::UNKNOWN).unwrap(), "'1-2'");
        assert_eq!(code(text("2026-13-40", Type::DATE)), "22P02");
    }

    /// A numeric in the binary format: base-10000 groups.
    fn numeric(groups: &[u16], weight: i16, sign: u16, scale: u16) -> Vec<u8> {
        let mut bytes = Vec::new();
        for word in [groups.len() as u16, weight as u16, sign, scale] {
            bytes.extend_from_slice(&word.to_be_bytes());
        }
        for group in groups {
            bytes.extend_from_slice(&group.to_be_bytes());
        }
        bytes
    }

    #[test]
    fn numerics_in_both_formats() {
        let decimal =
            |text: &str, scale: u8| format!("arrow_cast('{text}', 'Decimal128(38, {scale})')");
        assert_eq!(text("123.45", Type::NUMERIC).unwrap(), decimal("123.45", 2));
        assert_eq!(text("-0.001", Type::NUMERIC).unwrap(), decimal("-0.001", 3));
        assert_eq!(text("1E+2", Type::NUMERIC).unwrap(), decimal("100", 0));
        assert_eq!(
            text("NaN", Type::NUMERIC).unwrap(),
            "arrow_cast('NaN', 'Float64')"
        );
        assert_eq!(code(text("1.2.3", Type::NUMERIC)), "22P02");
        assert_eq!(code(text(&"9".repeat(39), Type::NUMERIC)), "22003");
        // 123.45: groups 123 and 4500, weight 0, scale 2.
        let bytes = numeric(&[123, 4500], 0, 0, 2);
        assert_eq!(binary(&bytes, Type::NUMERIC).unwrap(), decimal("123.45", 2));
        // -12345678.9: groups 1234, 5678, 9000; weight 1.
        let bytes = numeric(&[1234, 5678, 9000], 1, 0x4000, 1);
        assert_eq!(
            binary(&bytes, Type::NUMERIC).unwrap(),
            decimal("-12345678.9", 1)
        );
        // 0.0001 (weight -1) and 20000 (trailing zero groups left out).
        let bytes = numeric(&[1], -1, 0, 4);
        assert_eq!(binary(&bytes, Type::NUMERIC).unwrap(), decimal("0.0001", 4));
        let bytes = numeric(&[2], 1, 0, 0);
        assert_eq!(binary(&bytes, Type::NUMERIC).unwrap(), decimal("20000", 0));
        let bytes = numeric(&[], 0, 0, 0);
        assert_eq!(binary(&bytes, Type::NUMERIC).unwrap(), decimal("0", 0));
        assert_eq!(
            binary(&numeric(&[], 0, 0xD000, 0), Type::NUMERIC).unwrap(),
            "arrow_cast('inf', 'Float64')"
        );
        let bytes = numeric(&[10_000], 0, 0, 0);
        assert_eq!(code(binary(&bytes, Type::NUMERIC)), "22P03");
    }

    #[test]
    fn one_dimensional_arrays_in_both_formats() {
        assert_eq!(
            text("{1,NULL,3}", Type::INT8_ARRAY).unwrap(),
            "arrow_cast(make_array((1), NULL, (3)), 'List(Int64)')"
        );
        assert_eq!(
            text("{\"it's\",\"a,b\"}", Type::TEXT_ARRAY).unwrap(),
            "arrow_cast(make_array('it''s', 'a,b'), 'List(Utf8)')"
        );
        assert_eq!(
            text("{}", Type::INT4_ARRAY).unwrap(),
            "arrow_cast(make_array(), 'List(Int32)')"
        );
        assert_eq!(code(text("{{1},{2}}", Type::INT4_ARRAY)), "0A000");
        // Binary: 1 dimension, no nulls, int4 items, 2 items from 1; 7, 8.
        let mut bytes = Vec::new();
        for word in [1i32, 0, 23, 2, 1, 4, 7, 4, 8] {
            bytes.extend_from_slice(&word.to_be_bytes());
        }
        assert_eq!(
            binary(&bytes, Type::INT4_ARRAY).unwrap(),
            "arrow_cast(make_array((7), (8)), 'List(Int32)')"
        );
        assert_eq!(code(binary(&bytes[..30], Type::INT4_ARRAY)), "22P03");
        assert_eq!(
            text("{1.5,2}", Type::NUMERIC_ARRAY).unwrap(),
            "arrow_cast(make_array(arrow_cast('1.5', 'Decimal128(38, 1)'), \
             arrow_cast('2.0', 'Decimal128(38, 1)')), 'List(Decimal128(38, 1))')"
        );
    }
}
