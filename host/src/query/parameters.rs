//! Parameters inlined as exact, typed SQL literals, for the front ends that
//! bind values to a statement (the Postgres extended protocol, Flight SQL
//! prepared statements). Each front end reads its bound values as
//! DataFusion `ScalarValue`s; `literal` makes each the one literal that
//! plans back to the same value and type (strings quoted with their quotes
//! doubled, NaN and the infinities, decimals, dates and timestamps through
//! `arrow_cast`, arrays through `make_array`). Each placeholder token of the
//! statement (found by the engine's tokenizer, never in a string, a quoted
//! name or a comment) becomes its value's literal. The statement the query
//! service gets, checks and stores is then self-contained: any replica can
//! plan it again, result reuse keys on its values with its text, and
//! `GET /v2/query/{id}` shows what ran.
//!
//! Each literal stands apart from its neighbours (a space each side), and
//! the result is tokenized again: a value that changed the statement around
//! it (a comment, a string or a name swallowing the rest) refuses the
//! statement.

use datafusion::{
    arrow::datatypes::DataType,
    sql::sqlparser::{
        dialect::GenericDialect,
        tokenizer::{Token, Tokenizer, TokenizerError},
    },
};

mod literal;

pub use literal::literal;

/// At most this many parameters in one statement.
pub const MAX_PARAMETERS: usize = 1_000;

/// Which placeholders a front end's statements use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholders {
    /// `$1`, `$2`, ... (Postgres): `$n` is the n-th value.
    Numbered,
    /// `$n`, or `?` (JDBC, ODBC, ADBC): each `?` is the next value.
    NumberedOrQuestionMarks,
}

/// Why parameters could not be inlined.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParameterError {
    /// The statement does not tokenize, or a placeholder's place is unclear.
    #[error("{0}")]
    Syntax(String),
    #[error("a statement takes at most {MAX_PARAMETERS} parameters")]
    TooMany,
    #[error("there is no parameter $0")]
    Zero,
    /// A placeholder with no value bound.
    #[error("{supplied} parameters were bound, but the statement uses {placeholder}")]
    Missing {
        supplied: usize,
        placeholder: String,
    },
    /// More values than the statement's placeholders take.
    #[error("{supplied} parameters were bound, but the statement takes {takes}")]
    Unused { supplied: usize, takes: usize },
    /// `?` and `$n` in one statement.
    #[error("a statement uses either ? or $n placeholders, not both")]
    Mixed,
    #[error("a parameter's value changed the statement around it; it was not run")]
    Changed,
    /// Several rows bound to a statement that runs with one.
    #[error(
        "lakehost binds several rows of parameters only to an INSERT ... VALUES (...) with one row \
         of placeholders (it inserts them all in one statement); run other statements once per row"
    )]
    ManyRows,
    /// A bound value of a type lakehost does not bind.
    #[error("lakehost does not bind parameters of type {0}")]
    Unsupported(DataType),
}

/// The tokens of `sql` that are code (not whitespace or comments), read with
/// the engine's own SQL dialect, so what counts as a string, a quoted name
/// or a comment here is what the engine will see.
pub fn code_tokens(sql: &str) -> Result<Vec<Token>, TokenizerError> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize()?;
    Ok(tokens
        .into_iter()
        .filter(|token| !matches!(token, Token::Whitespace(_)))
        .collect())
}

/// One placeholder of a statement.
#[derive(Debug, PartialEq, Eq)]
struct Placeholder {
    /// Its byte offset in the statement.
    at: usize,
    /// Its text (`$2`, `?`).
    text: String,
    /// The value it stands for (0 for the first).
    index: usize,
}

/// The placeholders of `sql`, in order.
fn placeholders(sql: &str, style: Placeholders) -> Result<Vec<Placeholder>, ParameterError> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| ParameterError::Syntax(e.to_string()))?;
    let offsets = Offsets::of(sql);
    let (mut numbered, mut questions) = (false, 0);
    let mut found = Vec::new();
    for token in tokens {
        let Token::Placeholder(text) = &token.token else {
            continue;
        };
        let index = if let Some(number) = text.strip_prefix('$') {
            let Ok(number) = number.parse::<usize>() else {
                continue;
            };
            numbered = true;
            number.checked_sub(1).ok_or(ParameterError::Zero)?
        } else if text == "?" && style == Placeholders::NumberedOrQuestionMarks {
            questions += 1;
            questions - 1
        } else {
            continue;
        };
        if numbered && questions > 0 {
            return Err(ParameterError::Mixed);
        }
        if index >= MAX_PARAMETERS {
            return Err(ParameterError::TooMany);
        }
        let at = offsets
            .at(token.span.start.line, token.span.start.column)
            .filter(|&at| sql.get(at..at + text.len()) == Some(text.as_str()))
            .ok_or_else(unclear_place)?;
        found.push(Placeholder {
            at,
            text: text.clone(),
            index,
        });
    }
    Ok(found)
}

/// How many values `sql` takes: its highest `$n`, or its count of `?`.
pub fn count(sql: &str, style: Placeholders) -> Result<usize, ParameterError> {
    Ok(placeholders(sql, style)?
        .iter()
        .map(|p| p.index + 1)
        .max()
        .unwrap_or(0))
}

/// `sql` with `supplied` bound values inlined: `literal(i)` is the SQL
/// literal of value `i` (0-based).
pub fn inline<E: From<ParameterError>>(
    sql: &str,
    style: Placeholders,
    supplied: usize,
    mut literal: impl FnMut(usize) -> Result<String, E>,
) -> Result<String, E> {
    let placeholders = placeholders(sql, style)?;
    let takes = placeholders.iter().map(|p| p.index + 1).max().unwrap_or(0);
    if supplied > takes {
        return Err(ParameterError::Unused { supplied, takes }.into());
    }
    if placeholders.is_empty() {
        return Ok(sql.to_string());
    }
    let mut expected_tokens = code_token_count(sql)? - placeholders.len();
    let mut inlined = String::with_capacity(sql.len());
    let mut copied = 0;
    for placeholder in placeholders {
        if placeholder.index >= supplied {
            return Err(ParameterError::Missing {
                supplied,
                placeholder: placeholder.text,
            }
            .into());
        }
        let literal = literal(placeholder.index)?;
        expected_tokens += code_token_count(&literal)?;
        inlined.push_str(&sql[copied..placeholder.at]);
        // Apart from its neighbours: no `-` before it makes a comment, no
        // letter before it makes a prefixed string (E'...', N'...').
        inlined.push(' ');
        inlined.push_str(&literal);
        inlined.push(' ');
        copied = placeholder.at + placeholder.text.len();
    }
    inlined.push_str(&sql[copied..]);
    // The values changed nothing but themselves: each placeholder became its
    // literal's tokens, and no comment, string or name swallowed the rest.
    if code_token_count(&inlined)? != expected_tokens {
        return Err(ParameterError::Changed.into());
    }
    Ok(inlined)
}

/// `sql` with `rows` rows of bound values inlined: one row as `inline`
/// does; several only into an INSERT whose `VALUES` is one tuple holding
/// every placeholder, which becomes one tuple per row (one statement: all
/// rows are written or none). `literal(row, i)` is value `i` of `row`.
pub fn inline_rows<E: From<ParameterError>>(
    sql: &str,
    style: Placeholders,
    (rows, supplied): (usize, usize),
    mut literal: impl FnMut(usize, usize) -> Result<String, E>,
) -> Result<String, E> {
    if rows <= 1 {
        return inline(sql, style, supplied, |i| literal(0, i));
    }
    let (open, close) = values_tuple(sql)?;
    let outside = format!("{}{}", &sql[..open], &sql[close..]);
    if count(&outside, style)? > 0 {
        return Err(ParameterError::ManyRows.into());
    }
    let tuple = &sql[open..close];
    let mut inlined = String::from(&sql[..open]);
    for row in 0..rows {
        if row > 0 {
            inlined.push_str(", ");
        }
        inlined.push_str(&inline(tuple, style, supplied, |i| literal(row, i))?);
    }
    inlined.push_str(&sql[close..]);
    Ok(inlined)
}

/// The byte range of the one tuple after an INSERT's last `VALUES`, which
/// must end the statement (a `;` aside).
fn values_tuple(sql: &str) -> Result<(usize, usize), ParameterError> {
    use datafusion::sql::sqlparser::keywords::Keyword;
    let tokens = located_code_tokens(sql)?;
    let is_insert = matches!(
        tokens.first(),
        Some((Token::Word(word), _)) if word.keyword == Keyword::INSERT
    );
    let values = tokens
        .iter()
        .rposition(
            |(token, _)| matches!(token, Token::Word(word) if word.keyword == Keyword::VALUES),
        )
        .filter(|_| is_insert)
        .ok_or(ParameterError::ManyRows)?;
    let rest = &tokens[values + 1..];
    let (Some((Token::LParen, open)), mut depth) = (rest.first(), 0usize) else {
        return Err(ParameterError::ManyRows);
    };
    for (i, (token, at)) in rest.iter().enumerate() {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            let after = &rest[i + 1..];
            let ends = after.is_empty() || matches!(after, [(Token::SemiColon, _)]);
            return match ends {
                true => Ok((*open, at + 1)),
                false => Err(ParameterError::ManyRows),
            };
        }
    }
    Err(ParameterError::ManyRows)
}

/// The code tokens of `sql` with their byte offsets.
fn located_code_tokens(sql: &str) -> Result<Vec<(Token, usize)>, ParameterError> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| ParameterError::Syntax(e.to_string()))?;
    let offsets = Offsets::of(sql);
    tokens
        .into_iter()
        .filter(|token| !matches!(token.token, Token::Whitespace(_)))
        .map(|token| {
            let at = offsets
                .at(token.span.start.line, token.span.start.column)
                .ok_or_else(unclear_place)?;
            Ok((token.token, at))
        })
        .collect()
}

fn unclear_place() -> ParameterError {
    ParameterError::Syntax("a parameter's place in the statement is unclear".into())
}

/// Byte offsets of a statement's token locations (lines and columns,
/// 1-based, in chars).
struct Offsets<'a> {
    sql: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> Offsets<'a> {
    fn of(sql: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(sql.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self { sql, line_starts }
    }

    fn at(&self, line: u64, column: u64) -> Option<usize> {
        let start = *self
            .line_starts
            .get(usize::try_from(line).ok()?.checked_sub(1)?)?;
        let column = usize::try_from(column).ok()?.checked_sub(1)?;
        let skipped: usize = self.sql[start..]
            .chars()
            .take(column)
            .map(char::len_utf8)
            .sum();
        Some(start + skipped)
    }
}

/// How many tokens of `sql` are code.
fn code_token_count(sql: &str) -> Result<usize, ParameterError> {
    code_tokens(sql)
        .map(|tokens| tokens.len())
        .map_err(|e| ParameterError::Syntax(e.to_string()))
}

/// `text` as a standard SQL string literal.
pub fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql` with `values` inlined as strings.
    fn inlined(sql: &str, style: Placeholders, values: &[&str]) -> Result<String, ParameterError> {
        inline(sql, style, values.len(), |i| Ok(quoted(values[i])))
    }

    #[test]
    fn values_cannot_change_the_statement_around_them() {
        // A quote stays inside its string, whatever comes before it.
        let sql = inlined(
            "SELECT E $1, 'a'$2",
            Placeholders::Numbered,
            &["\\' OR TRUE --", "b' OR TRUE"],
        )
        .unwrap();
        assert_eq!(code_token_count(&sql).unwrap(), 6, "{sql}");
        // A placeholder in a comment (to the line's end, \r included) or in a
        // quoted name is no placeholder.
        for sql in [
            "SELECT 1 -- one\r AND x = $1",
            "SELECT `a $1`",
            "SELECT '?'",
        ] {
            let same = inlined(sql, Placeholders::NumberedOrQuestionMarks, &[]);
            assert_eq!(same.unwrap(), sql);
            // So a value bound for it is one too many.
            let refused = inlined(sql, Placeholders::NumberedOrQuestionMarks, &["x\n OR --"]);
            assert_eq!(
                refused,
                Err(ParameterError::Unused {
                    supplied: 1,
                    takes: 0
                })
            );
        }
        assert_eq!(
            inlined("SELECT $2", Placeholders::Numbered, &["a", "b", "c"]),
            Err(ParameterError::Unused {
                supplied: 3,
                takes: 2
            })
        );
        // A literal that swallows the rest is refused.
        let swallowing = inline("SELECT $1, 2", Placeholders::Numbered, 1, |_| {
            Ok::<_, ParameterError>("'x".to_string())
        });
        assert!(swallowing.is_err());
        // Placeholders without a value are refused, not left in.
        assert_eq!(
            inlined("SELECT $2", Placeholders::Numbered, &["a"]),
            Err(ParameterError::Missing {
                supplied: 1,
                placeholder: "$2".into()
            })
        );
        assert_eq!(
            inlined("SELECT $0", Placeholders::Numbered, &["a"]),
            Err(ParameterError::Zero)
        );
        assert_eq!(
            inlined("SELECT $1 || $2", Placeholders::Numbered, &["it's", "\n"]).unwrap(),
            "SELECT  'it''s'  ||  '\n' "
        );
    }

    #[test]
    fn question_marks_are_values_in_order_where_the_front_end_uses_them() {
        let style = Placeholders::NumberedOrQuestionMarks;
        assert_eq!(
            inlined("SELECT ? || ?", style, &["a", "b"]).unwrap(),
            "SELECT  'a'  ||  'b' "
        );
        assert_eq!(count("SELECT ?, '?', ? -- ?", style).unwrap(), 2);
        assert_eq!(count("SELECT ?", Placeholders::Numbered).unwrap(), 0);
        assert_eq!(count("SELECT ?, $1", style), Err(ParameterError::Mixed));
    }

    #[test]
    fn placeholders_are_counted_outside_strings_and_comments() {
        let style = Placeholders::Numbered;
        assert_eq!(count("SELECT 1", style).unwrap(), 0);
        assert_eq!(count("SELECT $1, $2 WHERE a = $1", style).unwrap(), 2);
        assert_eq!(count("SELECT '$1' -- $3\n, $2", style).unwrap(), 2);
        assert_eq!(count("SELECT $1001", style), Err(ParameterError::TooMany));
    }

    #[test]
    fn placeholders_are_found_where_they_stand() {
        let sql = "SELECT 'it''s', $1 -- $9\n, 'é' || $2, $1";
        let found = placeholders(sql, Placeholders::Numbered).unwrap();
        assert_eq!(found.len(), 3);
        for placeholder in found {
            let at = placeholder.at;
            assert_eq!(&sql[at..at + 2], format!("${}", placeholder.index + 1));
        }
    }

    #[test]
    fn several_rows_fill_one_insert_or_are_refused() {
        let style = Placeholders::NumberedOrQuestionMarks;
        let rows = [["1", "it's"], ["2", "b"]];
        let inlined = |sql: &str| {
            inline_rows(sql, style, (2, 2), |row, i| {
                Ok::<_, ParameterError>(quoted(rows[row][i]))
            })
        };
        assert_eq!(
            inlined("INSERT INTO t (a, b) VALUES (?, lower(?));").unwrap(),
            "INSERT INTO t (a, b) VALUES ( '1' , lower( 'it''s' )), ( '2' , lower( 'b' ));"
        );
        for refused in [
            "SELECT ?, ?",
            "INSERT INTO t SELECT ?, ?",
            "INSERT INTO t VALUES (?, ?), (1, 2)",
            "INSERT INTO t VALUES (?, 1) RETURNING ?",
            "INSERT INTO t VALUES (?, ?) -- (",
        ] {
            let answer = inlined(refused);
            if refused.ends_with("-- (") {
                assert!(answer.is_ok(), "a comment is no code: {answer:?}");
            } else {
                assert_eq!(answer, Err(ParameterError::ManyRows), "{refused}");
            }
        }
        // One row is any statement.
        let one = inline_rows("SELECT ?", style, (1, 1), |_, _| {
            Ok::<_, ParameterError>("1".to_string())
        });
        assert_eq!(one.unwrap(), "SELECT  1 ");
    }
}
