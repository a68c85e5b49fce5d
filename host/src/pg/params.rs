//! Extended-protocol parameters, inlined as SQL literals at their `$n`
//! tokens by `query::parameters` (which checks that no value changed the
//! statement around it). Values in the text format become numbers (in
//! parentheses), booleans or quoted strings by their declared type; in the
//! binary format the integer, float, boolean and text types are read,
//! others are refused.

use pgwire::{
    api::{Type, portal::Portal, results::FieldFormat},
    error::{PgWireError, PgWireResult},
};

use super::sqlstate::error;
use crate::query::parameters::{self, ParameterError, Placeholders, quoted};

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
        };
        error(code, e.to_string())
    }
}

/// How many parameters `sql` takes: its highest `$n`.
pub fn count(sql: &str) -> PgWireResult<usize> {
    Ok(parameters::count(sql, Placeholders::Numbered)?)
}

/// The portal's statement with its bound values inlined.
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
            literal(portal.parameters[index].as_deref(), &declared, format)
        },
    )
}

/// One bound value as a SQL literal.
fn literal(value: Option<&[u8]>, declared: &Type, format: FieldFormat) -> PgWireResult<String> {
    let Some(bytes) = value else {
        return Ok("NULL".to_string());
    };
    match format {
        FieldFormat::Text => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| error("22021", "a text parameter is not UTF-8"))?;
            text_literal(text, declared)
        }
        FieldFormat::Binary => binary_literal(bytes, declared),
    }
}

fn is_number(declared: &Type) -> bool {
    [
        Type::INT2,
        Type::INT4,
        Type::INT8,
        Type::FLOAT4,
        Type::FLOAT8,
        Type::NUMERIC,
        Type::OID,
    ]
    .contains(declared)
}

fn text_literal(text: &str, declared: &Type) -> PgWireResult<String> {
    if is_number(declared) {
        // A number's text is inlined only if it is one.
        if !text.parse::<f64>().is_ok_and(f64::is_finite) {
            return Err(error(
                "22P02",
                format!("invalid input syntax for type {declared}: \"{text}\""),
            ));
        }
        return Ok(format!("({text})"));
    }
    if *declared == Type::BOOL {
        return match text.to_ascii_lowercase().as_str() {
            "t" | "true" | "1" | "on" | "yes" | "y" => Ok("TRUE".to_string()),
            "f" | "false" | "0" | "off" | "no" | "n" => Ok("FALSE".to_string()),
            _ => Err(error(
                "22P02",
                format!("invalid input syntax for type boolean: \"{text}\""),
            )),
        };
    }
    Ok(quoted(text))
}

fn binary_literal(bytes: &[u8], declared: &Type) -> PgWireResult<String> {
    let wrong_size = || {
        error(
            "22P03",
            format!("incorrect binary data format for type {declared}"),
        )
    };
    let fixed = |n: usize| -> PgWireResult<&[u8]> {
        (bytes.len() == n).then_some(bytes).ok_or_else(wrong_size)
    };
    let text = match *declared {
        Type::INT2 => format!(
            "({})",
            i16::from_be_bytes(fixed(2)?.try_into().expect("2 bytes"))
        ),
        Type::INT4 => format!(
            "({})",
            i32::from_be_bytes(fixed(4)?.try_into().expect("4 bytes"))
        ),
        Type::INT8 => format!(
            "({})",
            i64::from_be_bytes(fixed(8)?.try_into().expect("8 bytes"))
        ),
        Type::FLOAT4 => finite(f32::from_be_bytes(fixed(4)?.try_into().expect("4 bytes")).into())?,
        Type::FLOAT8 => finite(f64::from_be_bytes(fixed(8)?.try_into().expect("8 bytes")))?,
        Type::BOOL => if fixed(1)?[0] != 0 { "TRUE" } else { "FALSE" }.to_string(),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| error("22021", "a text parameter is not UTF-8"))?;
            quoted(text)
        }
        _ => {
            return Err(error(
                "0A000",
                format!(
                    "lakehost reads binary parameters of integer, float, boolean and text types, not {declared}; send it as text"
                ),
            ));
        }
    };
    Ok(text)
}

/// A float as a literal; NaN and the infinities have none.
fn finite(value: f64) -> PgWireResult<String> {
    if value.is_finite() {
        Ok(format!("({value:?})"))
    } else {
        Err(error("22P02", format!("{value} cannot be a parameter")))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pgwire::api::stmt::StoredStatement;

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

    #[test]
    fn values_become_literals_by_type_and_format() {
        assert_eq!(text_literal("42", &Type::INT4).unwrap(), "(42)");
        assert_eq!(text_literal("-1", &Type::INT4).unwrap(), "(-1)");
        assert!(text_literal("42; DROP TABLE x", &Type::INT4).is_err());
        assert!(text_literal("NaN", &Type::FLOAT8).is_err(), "no literal");
        assert_eq!(text_literal("it's", &Type::TEXT).unwrap(), "'it''s'");
        assert_eq!(text_literal("it's", &Type::UNKNOWN).unwrap(), "'it''s'");
        assert_eq!(text_literal("t", &Type::BOOL).unwrap(), "TRUE");
        assert_eq!(
            literal(None, &Type::INT4, FieldFormat::Text).unwrap(),
            "NULL"
        );
        assert_eq!(
            binary_literal(&7i64.to_be_bytes(), &Type::INT8).unwrap(),
            "(7)"
        );
        assert_eq!(
            binary_literal(&1.5f64.to_be_bytes(), &Type::FLOAT8).unwrap(),
            "(1.5)"
        );
        assert!(binary_literal(&[0, 1], &Type::INT8).is_err(), "wrong size");
        assert!(
            binary_literal(&[0, 0, 0, 42], &Type::UNKNOWN).is_err(),
            "no guess"
        );
        assert!(binary_literal(&f64::NAN.to_be_bytes(), &Type::FLOAT8).is_err());
        assert!(binary_literal(&[0; 8], &Type::TIMESTAMP).is_err());
        assert_eq!(binary_literal(b"a'b", &Type::TEXT).unwrap(), "'a''b'");
    }
}
