//! `COPY ... TO STDOUT` over the Postgres protocol (psql's `\copy ... TO
//! file` sends it): `COPY (query)` and `COPY table [(columns)]` run as the
//! read `SELECT` they name, a streamed job under the same rules as any read,
//! and its rows go out as CopyData, one message per row, in Postgres's text
//! or csv format with its HEADER, DELIMITER, NULL, QUOTE and FORCE_QUOTE
//! options. Nothing else of COPY runs: `FROM STDIN` (lakehost loads files
//! through its uploads and loads API), a server file or a PROGRAM are
//! refused with what to do instead. It parses and encodes; the job is
//! `statements.rs`'s.

use std::sync::Arc;

use datafusion::{
    arrow::{datatypes::Schema, record_batch::RecordBatch},
    sql::sqlparser::ast::{
        CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Statement,
    },
};
use futures::{Stream, StreamExt as _, stream};
use pgwire::{
    api::{
        Type,
        portal::Format,
        results::{
            CopyCsvOptions, CopyEncoder, CopyResponse, CopyTextOptions, FieldFormat, FieldInfo,
            Response,
        },
    },
    error::PgWireResult,
    messages::copy::CopyData,
};

use crate::{engine::expression_limits::ParseFailure, pg::sqlstate::error};

/// Why a `COPY ... FROM STDIN` is refused, and what to do instead.
pub const COPY_FROM_REFUSED: &str = "COPY FROM is not supported: lakehost loads data through \
     its uploads and loads API (POST /v2/uploads, then a load into a table); INSERT ... SELECT \
     copies between tables";
/// Why a COPY to or from a file or a program on the server is refused.
pub const COPY_SERVER_FILE_REFUSED: &str = "COPY to or from a file or program on the server is \
     not allowed: use psql's \\copy, or COPY ... TO STDOUT, to write the rows on the client";

/// A `COPY ... TO STDOUT`: the read it runs and how its rows are written.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyOut {
    /// The read whose rows are copied.
    pub sql: String,
    pub options: CopyOptions,
}

/// COPY's output options, Postgres's defaults for each format.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyOptions {
    pub csv: bool,
    pub header: bool,
    pub delimiter: char,
    /// The text a NULL is written as (`\N` in text, empty in csv).
    pub null: Option<String>,
    pub quote: char,
    /// Columns always quoted (csv): `None` for none, an empty list for all.
    pub force_quote: Option<Vec<String>>,
}

impl Default for CopyOptions {
    fn default() -> Self {
        Self {
            csv: false,
            header: false,
            delimiter: '\t',
            null: None,
            quote: '"',
            force_quote: None,
        }
    }
}

/// Whether `sql` is a COPY statement (its first word).
pub fn is_copy(sql: &str) -> bool {
    sql.trim_start()
        .get(..4)
        .is_some_and(|word| word.eq_ignore_ascii_case("copy"))
        && sql
            .trim_start()
            .chars()
            .nth(4)
            .is_none_or(|c| c.is_whitespace() || c == '(')
}

/// The COPY `sql` as the rows it copies to the client, or its refusal.
pub fn copy_out(sql: &str) -> PgWireResult<CopyOut> {
    let statements = crate::engine::expression_limits::parse_statements(sql).map_err(
        |failure| match failure {
            ParseFailure::Syntax(message) => error("42601", message),
            ParseFailure::TooComplex(limit) => error("54000", limit.to_string()),
        },
    )?;
    let [
        Statement::Copy {
            source,
            to,
            target,
            options,
            legacy_options,
            ..
        },
    ] = statements.as_slice()
    else {
        return Err(error(
            "42601",
            "a COPY statement must be alone in its query",
        ));
    };
    match (to, target) {
        (false, CopyTarget::Stdin) => return Err(error("0A000", COPY_FROM_REFUSED)),
        (_, CopyTarget::File { .. } | CopyTarget::Program { .. }) => {
            return Err(error("42501", COPY_SERVER_FILE_REFUSED));
        }
        (false, _) => return Err(error("0A000", COPY_FROM_REFUSED)),
        (true, CopyTarget::Stdout) => {}
        (true, CopyTarget::Stdin) => {
            return Err(error("42601", "COPY TO writes to STDOUT, not STDIN"));
        }
    }
    let sql = match source {
        CopySource::Query(query) => query.to_string(),
        CopySource::Table {
            table_name,
            columns,
        } if columns.is_empty() => format!("SELECT * FROM {table_name}"),
        CopySource::Table {
            table_name,
            columns,
        } => {
            let columns: Vec<String> = columns.iter().map(ToString::to_string).collect();
            format!("SELECT {} FROM {table_name}", columns.join(", "))
        }
    };
    let mut parsed = CopyOptions::default();
    for option in options {
        parsed.apply(option)?;
    }
    for option in legacy_options {
        parsed.apply_legacy(option)?;
    }
    parsed.check()?;
    Ok(CopyOut {
        sql,
        options: parsed,
    })
}

fn unsupported(what: impl std::fmt::Display) -> pgwire::error::PgWireError {
    error(
        "0A000",
        format!(
            "COPY option {what} is not supported: lakehost writes FORMAT text or csv with HEADER, DELIMITER, NULL, QUOTE and FORCE_QUOTE"
        ),
    )
}

impl CopyOptions {
    fn apply(&mut self, option: &CopyOption) -> PgWireResult<()> {
        match option {
            CopyOption::Format(name) => match name.value.to_ascii_lowercase().as_str() {
                "text" => self.set_csv(false),
                "csv" => self.set_csv(true),
                other => {
                    return Err(error(
                        "0A000",
                        format!(
                            "COPY format \"{other}\" is not supported: use FORMAT text or FORMAT csv"
                        ),
                    ));
                }
            },
            CopyOption::Header(header) => self.header = *header,
            CopyOption::Delimiter(c) => self.delimiter = *c,
            CopyOption::Null(null) => self.null = Some(null.clone()),
            CopyOption::Quote(c) => self.quote = *c,
            CopyOption::Escape(c) if *c == self.quote => {}
            CopyOption::ForceQuote(columns) => {
                self.force_quote = Some(columns.iter().map(|c| c.value.clone()).collect());
            }
            CopyOption::Encoding(encoding)
                if matches!(
                    encoding
                        .to_ascii_lowercase()
                        .replace(['-', '_'], "")
                        .as_str(),
                    "utf8" | "unicode"
                ) => {}
            other => return Err(unsupported(other)),
        }
        Ok(())
    }

    fn apply_legacy(&mut self, option: &CopyLegacyOption) -> PgWireResult<()> {
        match option {
            CopyLegacyOption::Delimiter(c) => self.delimiter = *c,
            CopyLegacyOption::Null(null) => self.null = Some(null.clone()),
            CopyLegacyOption::Header => self.header = true,
            CopyLegacyOption::Csv(csv) => {
                self.set_csv(true);
                for option in csv {
                    match option {
                        CopyLegacyCsvOption::Header => self.header = true,
                        CopyLegacyCsvOption::Quote(c) => self.quote = *c,
                        CopyLegacyCsvOption::Escape(c) if *c == self.quote => {}
                        CopyLegacyCsvOption::ForceQuote(columns) => {
                            self.force_quote =
                                Some(columns.iter().map(|c| c.value.clone()).collect());
                        }
                        other => return Err(unsupported(other)),
                    }
                }
            }
            other => return Err(unsupported(other)),
        }
        Ok(())
    }

    /// The format, and its default delimiter unless one was given before.
    fn set_csv(&mut self, csv: bool) {
        if self.delimiter == if self.csv { ',' } else { '\t' } {
            self.delimiter = if csv { ',' } else { '\t' };
        }
        self.csv = csv;
    }

    /// Postgres's checks of the options together.
    fn check(&self) -> PgWireResult<()> {
        if !self.delimiter.is_ascii() || !self.quote.is_ascii() {
            return Err(error(
                "0A000",
                "COPY delimiter and quote must be single one-byte characters",
            ));
        }
        if matches!(self.delimiter, '\r' | '\n' | '\\') {
            return Err(error(
                "22023",
                "COPY delimiter cannot be newline, carriage return or backslash",
            ));
        }
        if !self.csv && self.force_quote.is_some() {
            return Err(error(
                "0A000",
                "COPY force quote available only in CSV mode",
            ));
        }
        if self.csv && self.delimiter == self.quote {
            return Err(error("22023", "COPY delimiter and quote must be different"));
        }
        Ok(())
    }

    /// An encoder of rows of `fields` in these options.
    fn encoder(&self, fields: Arc<Vec<FieldInfo>>) -> PgWireResult<CopyEncoder> {
        if !self.csv {
            return Ok(CopyEncoder::new_text(
                fields,
                CopyTextOptions {
                    delimiter: self.delimiter.to_string().into(),
                    null_string: self.null.clone().unwrap_or_else(|| "\\N".into()).into(),
                },
            ));
        }
        let force_quote = match &self.force_quote {
            None => Vec::new(),
            Some(all) if all.is_empty() || all.iter().any(|c| c == "*") => {
                (0..fields.len()).collect()
            }
            Some(columns) => columns
                .iter()
                .map(|column| {
                    fields
                        .iter()
                        .position(|field| field.name() == column)
                        .ok_or_else(|| {
                            error(
                                "42703",
                                format!(
                                    "FORCE_QUOTE column \"{column}\" is not in the COPY's columns"
                                ),
                            )
                        })
                })
                .collect::<PgWireResult<_>>()?,
        };
        Ok(CopyEncoder::new_csv(
            fields,
            CopyCsvOptions {
                delimiter: self.delimiter.to_string().into(),
                quote: self.quote.to_string().into(),
                escape: self.quote.to_string().into(),
                null_string: self.null.clone().unwrap_or_default().into(),
                force_quote,
            },
        ))
    }

    /// The header line: the column names, quoted and escaped as values are.
    fn header_line(&self, fields: &[FieldInfo]) -> PgWireResult<CopyData> {
        let names = Arc::new(
            fields
                .iter()
                .map(|f| FieldInfo::new(f.name().into(), None, None, Type::TEXT, FieldFormat::Text))
                .collect::<Vec<_>>(),
        );
        let mut encoder = CopyOptions {
            force_quote: None,
            ..self.clone()
        }
        .encoder(names)?;
        for field in fields {
            encoder.encode_field(&field.name())?;
        }
        Ok(encoder.take_copy())
    }
}

/// The rows of `batches` (of `schema`) as a COPY's output in `options`:
/// one CopyData per row (pgwire counts them for the `COPY n` tag), the
/// header line sent with the first row.
pub fn copy_response(
    schema: &Schema,
    batches: impl Stream<Item = PgWireResult<RecordBatch>> + Send + 'static,
    options: &CopyOptions,
) -> PgWireResult<Response> {
    let fields = Arc::new(arrow_pg::datatypes::arrow_schema_to_pg_fields(
        schema,
        &Format::UnifiedText,
        None,
    )?);
    let mut encoder = options.encoder(fields.clone())?;
    let mut header = match options.header {
        true => Some(options.header_line(&fields)?),
        false => None,
    };
    let rows = batches.flat_map(move |batch| {
        let rows: Vec<PgWireResult<CopyData>> = match batch {
            Ok(batch) => (0..batch.num_rows())
                .map(|row| encode_row(&mut encoder, &batch, row, &fields))
                .collect(),
            Err(e) => vec![Err(e)],
        };
        stream::iter(rows)
    });
    // The header goes with the first row, or alone when there is none.
    let with_header = rows
        .map(Some)
        .chain(stream::once(async { None }))
        .filter_map(move |row| {
            let out = match (header.take(), row) {
                (Some(header), Some(Ok(row))) => {
                    let mut line = header.data.to_vec();
                    line.extend_from_slice(&row.data);
                    Some(Ok(CopyData::new(line.into())))
                }
                (Some(header), None) => Some(Ok(header)),
                (_, row) => row,
            };
            async move { out }
        });
    Ok(Response::CopyOut(CopyResponse::new(
        0,
        schema.fields().len(),
        with_header,
    )))
}

/// Row `row` of `batch` as one CopyData.
fn encode_row(
    encoder: &mut CopyEncoder,
    batch: &RecordBatch,
    row: usize,
    fields: &[FieldInfo],
) -> PgWireResult<CopyData> {
    let schema = batch.schema();
    for (column, (array, field)) in batch.columns().iter().zip(fields).enumerate() {
        arrow_pg::encoder::encode_value(encoder, array, row, schema.field(column), field)?;
    }
    Ok(encoder.take_copy())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(e: pgwire::error::PgWireError) -> String {
        match e {
            pgwire::error::PgWireError::UserError(info) => info.code,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn copy_to_stdout_names_its_read_and_options() {
        let copy = copy_out("COPY (SELECT 1 AS a) TO STDOUT WITH (FORMAT csv, HEADER)").unwrap();
        assert_eq!(copy.sql, "SELECT 1 AS a");
        assert!(copy.options.csv && copy.options.header);
        assert_eq!(copy.options.delimiter, ',');
        let copy = copy_out("copy demo_lake_v2.trips (trip_id, fare) to stdout").unwrap();
        assert_eq!(copy.sql, "SELECT trip_id, fare FROM demo_lake_v2.trips");
        assert!(!copy.options.csv);
        assert_eq!(copy.options.delimiter, '\t');
        let copy = copy_out("COPY t TO STDOUT (DELIMITER '|', NULL 'nil', FORMAT csv)").unwrap();
        assert_eq!(copy.options.delimiter, '|');
        assert_eq!(copy.options.null.as_deref(), Some("nil"));
        let copy = copy_out("COPY t TO STDOUT CSV HEADER").unwrap();
        assert!(copy.options.csv && copy.options.header);
    }

    #[test]
    fn copy_from_files_and_programs_are_refused_with_what_to_do() {
        assert_eq!(code(copy_out("COPY t FROM STDIN").unwrap_err()), "0A000");
        assert_eq!(code(copy_out("COPY t TO '/etc/x'").unwrap_err()), "42501");
        assert_eq!(code(copy_out("COPY t FROM '/etc/x'").unwrap_err()), "42501");
        assert_eq!(
            code(copy_out("COPY t TO PROGRAM 'rm -rf /'").unwrap_err()),
            "42501"
        );
        assert_eq!(
            code(copy_out("COPY t TO STDOUT (FORMAT binary)").unwrap_err()),
            "0A000"
        );
        assert!(is_copy("  copy (select 1) to stdout"));
        assert!(is_copy("COPY(select 1) to stdout"));
        assert!(!is_copy("copying"));
    }
}
