//! Extended-protocol parameters, inlined as SQL literals: each `$n` token
//! of the statement (found by sqlparser's tokenizer, never in a string or a
//! comment) becomes the literal of the n-th bound value. The statement the
//! query service gets, checks and stores is then self-contained: any
//! replica can plan it again and `GET /v2/query/{id}` shows what ran.
//!
//! Values in the text format become numbers (in parentheses), booleans or
//! quoted strings by their declared type; in the binary format the integer,
//! float, boolean and text types are read, others are refused. Each literal
//! stands apart from its neighbours (a space each side), and the result is
//! tokenized again (with the engine's dialect): a value that changed the
//! statement around it (a comment, a string or a name swallowing the rest)
//! refuses the statement.

use datafusion::sql::sqlparser::{
    dialect::GenericDialect,
    tokenizer::{Token, Tokenizer},
};
use pgwire::{
    api::{Type, portal::Portal, results::FieldFormat},
    error::PgWireResult,
};

use super::{code_tokens, sqlstate::error};

/// At most this many parameters in one statement.
pub const MAX_PARAMETERS: usize = 1_000;

/// The parameter number of a `$n` token.
fn number_of(token: &Token) -> Option<usize> {
    match token {
        Token::Placeholder(text) => text.strip_prefix('$')?.parse().ok(),
        _ => None,
    }
}

/// How many parameters `sql` takes: its highest `$n`.
pub fn count(sql: &str) -> PgWireResult<usize> {
    let highest = placeholders(sql)?
        .iter()
        .map(|(_, _, n)| *n)
        .max()
        .unwrap_or(0);
    if highest > MAX_PARAMETERS {
        return Err(error(
            "54023",
            format!("a statement takes at most {MAX_PARAMETERS} parameters"),
        ));
    }
    Ok(highest)
}

/// The `$n` placeholders of `sql`: each one's byte offset, text and number.
fn placeholders(sql: &str) -> PgWireResult<Vec<(usize, String, usize)>> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| error("42601", e.to_string()))?;
    // Token locations are lines and columns (1-based, in chars).
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(sql.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let offset_of = |line: u64, column: u64| -> Option<usize> {
        let start = *line_starts.get(usize::try_from(line).ok()?.checked_sub(1)?)?;
        let column = usize::try_from(column).ok()?.checked_sub(1)?;
        let skipped: usize = sql[start..].chars().take(column).map(char::len_utf8).sum();
        Some(start + skipped)
    };
    let mut found = Vec::new();
    for token in tokens {
        if let Some(n) = number_of(&token.token) {
            let text = token.token.to_string();
            let at = offset_of(token.span.start.line, token.span.start.column)
                .filter(|&at| sql.get(at..at + text.len()) == Some(text.as_str()))
                .ok_or_else(|| error("42601", "a parameter's place in the statement is unclear"))?;
            found.push((at, text, n));
        }
    }
    Ok(found)
}

/// The portal's statement with its bound values inlined.
pub fn inline(portal: &Portal<String>) -> PgWireResult<String> {
    let sql = &portal.statement.statement;
    let placeholders = placeholders(sql)?;
    if placeholders.is_empty() {
        return Ok(sql.clone());
    }
    let mut expected_tokens = code_token_count(sql)? - placeholders.len();
    let mut inlined = String::with_capacity(sql.len());
    let mut copied = 0;
    for (at, text, n) in placeholders {
        let index = n
            .checked_sub(1)
            .ok_or_else(|| error("42P02", "there is no parameter $0"))?;
        let Some(value) = portal.parameters.get(index) else {
            return Err(error(
                "08P01",
                format!(
                    "bind message supplies {} parameters, but the statement uses ${n}",
                    portal.parameters.len()
                ),
            ));
        };
        let declared = portal
            .statement
            .parameter_types
            .get(index)
            .cloned()
            .flatten()
            .unwrap_or(Type::UNKNOWN);
        let format = portal.parameter_format.format_for(index);
        let literal = literal(value.as_deref(), &declared, format)?;
        expected_tokens += code_token_count(&literal)?;
        inlined.push_str(&sql[copied..at]);
        // Apart from its neighbours: no `-` before it makes a comment, no
        // letter before it makes a prefixed string (E'...', N'...').
        inlined.push(' ');
        inlined.push_str(&literal);
        inlined.push(' ');
        copied = at + text.len();
    }
    inlined.push_str(&sql[copied..]);
    // The values changed nothing but themselves: each placeholder became its
    // literal's tokens, and no comment, string or name swallowed the rest.
    if code_token_count(&inlined)? != expected_tokens {
        return Err(error(
            "42601",
            "a parameter's value changed the statement around it; it was not run",
        ));
    }
    Ok(inlined)
}

/// How many tokens of `sql` are code (`pg::code_tokens`).
fn code_token_count(sql: &str) -> PgWireResult<usize> {
    code_tokens(sql)
        .map(|tokens| tokens.len())
        .map_err(|e| error("42601", e.to_string()))
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

/// `text` as a standard SQL string literal.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
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
    fn values_cannot_change_the_statement_around_them() {
        // A negative number after a minus is no comment.
        let sql = inlined(
            "SELECT x FROM t WHERE x > 0-$1 AND x < 0",
            &["-1"],
            &[Type::INT4],
        );
        assert_eq!(sql.unwrap(), "SELECT x FROM t WHERE x > 0- (-1)  AND x < 0");
        // A quote stays inside its string, whatever comes before it.
        let sql = inlined("SELECT E $1, 'a'$2", &["\\' OR TRUE --", "b' OR TRUE"], &[]);
        let sql = sql.unwrap();
        assert_eq!(code_token_count(&sql).unwrap(), 6, "{sql}");
        // A placeholder in a comment (to the line's end, \r included) or in a
        // quoted name is no placeholder.
        for sql in ["SELECT 1 -- one\r AND x = $1", "SELECT `a $1`"] {
            assert_eq!(inlined(sql, &["x\n OR TRUE --"], &[]).unwrap(), sql);
        }
        // Placeholders without a value are refused, not left in.
        let refused = |sql: &str| match inlined(sql, &["a"], &[]) {
            Err(pgwire::error::PgWireError::UserError(info)) => info.code,
            other => panic!("{sql}: {other:?}"),
        };
        assert_eq!(refused("SELECT $2"), "08P01");
        assert_eq!(refused("SELECT $0"), "42P02");
        assert_eq!(
            inlined("SELECT $1 || $2", &["it's", "\n"], &[]).unwrap(),
            "SELECT  'it''s'  ||  '\n' "
        );
    }

    #[test]
    fn placeholders_are_counted_outside_strings_and_comments() {
        assert_eq!(count("SELECT 1").unwrap(), 0);
        assert_eq!(count("SELECT $1, $2 WHERE a = $1").unwrap(), 2);
        assert_eq!(count("SELECT '$1' -- $3\n, $2").unwrap(), 2);
        assert!(count("SELECT $1001").is_err(), "past the cap");
    }

    #[test]
    fn placeholders_are_found_where_they_stand() {
        let sql = "SELECT 'it''s', $1 -- $9\n, 'é' || $2, $1";
        let found: Vec<(usize, usize)> = placeholders(sql)
            .unwrap()
            .into_iter()
            .map(|(at, _, n)| (at, n))
            .collect();
        assert_eq!(found.len(), 3);
        for (at, n) in found {
            assert_eq!(&sql[at..at + 2], format!("${n}"));
        }
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
