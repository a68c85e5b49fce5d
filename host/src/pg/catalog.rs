//! The `pg_catalog` queries psql 15 sends for `\dt`, `\dn` and `\d <table>`,
//! answered from what the caller may list (`QueryService::visible_catalog`:
//! the databases its roles can read, as Postgres schemas, and their tables).
//! lakehost has no `pg_catalog`: each query is recognised by its shape (the
//! exact texts psql 15 sends, captured from it against PostgreSQL 15 and
//! listed in docs/postgres.md) and answered with the columns psql reads. Any
//! other statement naming `pg_catalog` is refused with 0A000, never guessed.
//!
//! A table's oid is stable (16384 plus a hash of its database and name), so
//! `\d`'s later queries, which name the table by oid, find it again.

use std::sync::Arc;

use datafusion::{
    arrow::datatypes::{DataType, Schema},
    sql::sqlparser::tokenizer::Token,
};
use futures::stream;
use pgwire::{
    api::{
        Type,
        results::{DataRowEncoder, FieldFormat, FieldInfo, QueryResponse, Response},
    },
    error::PgWireResult,
};
use regex::Regex;
use sha2::{Digest as _, Sha256};

use super::{
    code_tokens,
    sqlstate::{error, error_of},
};
use crate::{
    auth::LakeCaller,
    query::service::{QueryService, VisibleCatalog, columns_of},
    store::catalog::LakeTable,
};

/// The longest name pattern accepted from `\d <pattern>`.
const MAX_PATTERN: usize = 1024;

/// A catalog query psql sends, recognised.
#[derive(Debug, PartialEq, Eq)]
pub enum CatalogQuery {
    /// `\dt [pattern]`: the tables.
    Tables { name: Option<String> },
    /// `\dn`: the databases (as schemas).
    Schemas,
    /// `\d <pattern>`, first query: the matching tables' oids.
    FindTable {
        name: String,
        schema: Option<String>,
    },
    /// `\d`, second query: the table's kind and flags.
    TableFlags { oid: u32 },
    /// `\d`, third query: the table's columns.
    Columns { oid: u32 },
    /// `\d`'s queries of what the lake has none of (policies, statistics,
    /// publications, parents, partitions): no rows, these columns.
    Nothing { columns: &'static [&'static str] },
}

/// Whitespace runs as one space: psql's texts are matched by their words.
fn normalised(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The SQL string literal that follows `after` in `sql`, unquoted.
fn literal_after(sql: &str, after: &str) -> Option<String> {
    let rest = &sql[sql.find(after)? + after.len()..];
    let rest = rest.trim_start().strip_prefix('\'')?;
    let mut value = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            if chars.peek() == Some(&'\'') {
                chars.next();
                value.push('\'');
            } else {
                return Some(value);
            }
        } else {
            value.push(c);
        }
    }
    None
}

/// The oid in `... = '<oid>'` after `after`.
fn oid_after(sql: &str, after: &str) -> Option<u32> {
    literal_after(sql, after)?.parse().ok()
}

/// Whether `sql` names something in `pg_catalog` (and so is answered
/// here): the word `pg_catalog` then a dot, in code (never in a string, a
/// quoted name or a comment).
pub fn is_catalog_query(sql: &str) -> bool {
    let Ok(code) = code_tokens(sql) else {
        return false;
    };
    code.windows(2).any(|pair| {
        matches!(&pair[0], Token::Word(word)
            if word.quote_style.is_none() && word.value.eq_ignore_ascii_case("pg_catalog"))
            && matches!(pair[1], Token::Period)
    })
}

/// The catalog query `sql` is; a catalog query that is none of psql's is
/// 0A000.
pub fn recognise(sql: &str) -> PgWireResult<CatalogQuery> {
    let text = normalised(sql);
    let query = if text.contains("FROM pg_catalog.pg_class c")
        && text.contains("c.relkind IN ('r','p'")
        && text.contains("as \"Schema\"")
    {
        CatalogQuery::Tables {
            name: literal_after(&text, "c.relname OPERATOR(pg_catalog.~)"),
        }
    } else if text.starts_with("SELECT n.nspname AS \"Name\"")
        && text.contains("FROM pg_catalog.pg_namespace n")
    {
        CatalogQuery::Schemas
    } else if text.starts_with("SELECT c.oid, n.nspname, c.relname FROM pg_catalog.pg_class c") {
        let name = literal_after(&text, "c.relname OPERATOR(pg_catalog.~)")
            .ok_or_else(unknown_catalog_query)?;
        CatalogQuery::FindTable {
            name,
            schema: literal_after(&text, "n.nspname OPERATOR(pg_catalog.~)"),
        }
    } else if text.starts_with("SELECT c.relchecks, c.relkind, c.relhasindex") {
        CatalogQuery::TableFlags {
            oid: oid_after(&text, "WHERE c.oid =").ok_or_else(unknown_catalog_query)?,
        }
    } else if text.starts_with("SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod)")
        && text.contains("FROM pg_catalog.pg_attribute a")
    {
        CatalogQuery::Columns {
            oid: oid_after(&text, "WHERE a.attrelid =").ok_or_else(unknown_catalog_query)?,
        }
    } else if text.contains("FROM pg_catalog.pg_policy pol") {
        CatalogQuery::Nothing {
            columns: &[
                "polname",
                "polpermissive",
                "array_to_string",
                "pg_get_expr",
                "pg_get_expr",
                "cmd",
            ],
        }
    } else if text.contains("FROM pg_catalog.pg_statistic_ext") {
        CatalogQuery::Nothing {
            columns: &[
                "oid",
                "stxrelid",
                "nsp",
                "stxname",
                "columns",
                "ndist_enabled",
                "deps_enabled",
                "mcv_enabled",
                "stxstattarget",
            ],
        }
    } else if text.contains("FROM pg_catalog.pg_publication p") {
        CatalogQuery::Nothing {
            columns: &["pubname", "?column?", "?column?"],
        }
    } else if text.contains("WHERE c.oid = i.inhparent") {
        CatalogQuery::Nothing { columns: &["oid"] }
    } else if text.contains("WHERE c.oid = i.inhrelid") {
        CatalogQuery::Nothing {
            columns: &["oid", "relkind", "inhdetachpending", "pg_get_expr"],
        }
    } else {
        return Err(unknown_catalog_query());
    };
    Ok(query)
}

fn unknown_catalog_query() -> pgwire::error::PgWireError {
    error(
        "0A000",
        "lakehost has no pg_catalog: it answers the catalog queries of psql's \\dt, \\dn and \\d \
         (docs/postgres.md), and this query is not one of them",
    )
}

/// A table's stable oid: above the ones Postgres reserves, below 2^31.
pub fn oid_of(database: &str, table: &str) -> u32 {
    let digest = Sha256::digest(format!("{database}.{table}").as_bytes());
    let hash = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    16_384 + hash % (i32::MAX as u32 - 16_384)
}

/// A result of text columns (psql reads every value as text; booleans are
/// `t` and `f`).
pub fn text_response(columns: &[&str], rows: Vec<Vec<Option<String>>>) -> PgWireResult<Response> {
    let fields = Arc::new(
        columns
            .iter()
            .map(|name| FieldInfo::new(name.to_string(), None, None, Type::TEXT, FieldFormat::Text))
            .collect::<Vec<_>>(),
    );
    let mut encoded = Vec::with_capacity(rows.len());
    for row in rows {
        let mut encoder = DataRowEncoder::new(fields.clone());
        for value in &row {
            encoder.encode_field(value)?;
        }
        encoded.push(Ok(encoder.take_row()));
    }
    Ok(Response::Query(QueryResponse::new(
        fields,
        stream::iter(encoded),
    )))
}

/// A psql name pattern (already a regular expression), compiled.
fn pattern(text: &str) -> PgWireResult<Regex> {
    if text.len() > MAX_PATTERN {
        return Err(error("54000", "the name pattern is too long"));
    }
    Regex::new(text).map_err(|e| error("2201B", format!("invalid name pattern: {e}")))
}

/// The visible tables, with their database's name, by schema then name.
fn tables(visible: &VisibleCatalog) -> Vec<(&str, &LakeTable)> {
    let mut tables: Vec<(&str, &LakeTable)> = visible
        .tables
        .iter()
        .filter_map(|t| Some((visible.database_of(t)?.name.as_str(), t)))
        .collect();
    tables.sort_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
    tables
}

/// The visible table with `oid`.
fn table_with_oid(visible: &VisibleCatalog, oid: u32) -> Option<(&str, &LakeTable)> {
    tables(visible)
        .into_iter()
        .find(|(database, table)| oid_of(database, &table.name) == oid)
}

/// A column type as psql's `format_type` writes it.
fn type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 => "bigint".into(),
        DataType::UInt64 => "numeric".into(),
        DataType::Float16 | DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => format!("numeric({p},{s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "bytea".into(),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Timestamp(_, None) => "timestamp without time zone".into(),
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
        DataType::Time32(_) | DataType::Time64(_) => "time without time zone".into(),
        DataType::Interval(_) | DataType::Duration(_) => "interval".into(),
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            format!("{}[]", type_name(item.data_type()))
        }
        _ => "text".into(),
    }
}

fn columns_rows(schema: &Schema) -> Vec<Vec<Option<String>>> {
    schema
        .fields()
        .iter()
        .map(|field| {
            vec![
                Some(field.name().clone()),
                Some(type_name(field.data_type())),
                None,
                Some(if field.is_nullable() { "f" } else { "t" }.into()),
                None,
                Some(String::new()),
                Some(String::new()),
            ]
        })
        .collect()
}

/// The answer to `query` for `caller`.
pub async fn answer(
    queries: &QueryService,
    caller: &LakeCaller,
    query: CatalogQuery,
) -> PgWireResult<Response> {
    let visible = queries.visible_catalog(caller).await.map_err(error_of)?;
    let owner = Some(caller.org.clone());
    match query {
        CatalogQuery::Tables { name } => {
            let name = name.as_deref().map(pattern).transpose()?;
            let rows = tables(&visible)
                .into_iter()
                .filter(|(_, t)| name.as_ref().is_none_or(|re| re.is_match(&t.name)))
                .map(|(database, t)| {
                    vec![
                        Some(database.to_string()),
                        Some(t.name.clone()),
                        Some("table".into()),
                        owner.clone(),
                    ]
                })
                .collect();
            text_response(&["Schema", "Name", "Type", "Owner"], rows)
        }
        CatalogQuery::Schemas => {
            let mut names: Vec<&str> = visible.databases.iter().map(|d| d.name.as_str()).collect();
            names.sort_unstable();
            let rows = names
                .into_iter()
                .map(|name| vec![Some(name.to_string()), owner.clone()])
                .collect();
            text_response(&["Name", "Owner"], rows)
        }
        CatalogQuery::FindTable { name, schema } => {
            let name = pattern(&name)?;
            let schema = schema.as_deref().map(pattern).transpose()?;
            let rows = tables(&visible)
                .into_iter()
                .filter(|(database, t)| {
                    name.is_match(&t.name) && schema.as_ref().is_none_or(|re| re.is_match(database))
                })
                .map(|(database, t)| {
                    vec![
                        Some(oid_of(database, &t.name).to_string()),
                        Some(database.to_string()),
                        Some(t.name.clone()),
                    ]
                })
                .collect();
            text_response(&["oid", "nspname", "relname"], rows)
        }
        CatalogQuery::TableFlags { oid } => {
            let rows = match table_with_oid(&visible, oid) {
                Some(_) => {
                    let flags = [
                        "0", "r", "f", "f", "f", "f", "f", "f", "f", "", "0", "", "p", "d", "heap",
                    ];
                    vec![flags.iter().map(|v| Some(v.to_string())).collect()]
                }
                None => Vec::new(),
            };
            text_response(
                &[
                    "relchecks",
                    "relkind",
                    "relhasindex",
                    "relhasrules",
                    "relhastriggers",
                    "relrowsecurity",
                    "relforcerowsecurity",
                    "relhasoids",
                    "relispartition",
                    "?column?",
                    "reltablespace",
                    "reloftype",
                    "relpersistence",
                    "relreplident",
                    "amname",
                ],
                rows,
            )
        }
        CatalogQuery::Columns { oid } => {
            let rows = match table_with_oid(&visible, oid) {
                Some((_, table)) => columns_rows(&columns_of(table).map_err(error_of)?),
                None => Vec::new(),
            };
            text_response(
                &[
                    "attname",
                    "format_type",
                    "pg_get_expr",
                    "attnotnull",
                    "attcollation",
                    "attidentity",
                    "attgenerated",
                ],
                rows,
            )
        }
        CatalogQuery::Nothing { columns } => text_response(columns, Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIND_TABLE: &str = "SELECT c.oid,\n  n.nspname,\n  c.relname\nFROM pg_catalog.pg_class c\n     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace\nWHERE c.relname OPERATOR(pg_catalog.~) '^(it''s)$' COLLATE pg_catalog.default\n  AND pg_catalog.pg_table_is_visible(c.oid)\nORDER BY 2, 3;";

    #[test]
    fn psqls_queries_are_recognised_and_others_refused() {
        assert_eq!(
            recognise(FIND_TABLE).unwrap(),
            CatalogQuery::FindTable {
                name: "^(it's)$".into(),
                schema: None
            }
        );
        assert_eq!(
            recognise("SELECT c.relchecks, c.relkind, c.relhasindex FROM x WHERE c.oid = '16999';")
                .unwrap(),
            CatalogQuery::TableFlags { oid: 16999 }
        );
        assert!(recognise("SELECT * FROM pg_catalog.pg_roles").is_err());
        assert!(is_catalog_query("select 1 from PG_CATALOG.pg_type"));
        assert!(is_catalog_query("select pg_catalog . version()"));
        assert!(!is_catalog_query("SELECT 'pg_catalog' AS word"));
        assert!(!is_catalog_query(
            "SELECT 'FROM pg_catalog.pg_policy pol' AS note"
        ));
        assert!(!is_catalog_query("SELECT 1 -- pg_catalog.pg_class"));
    }

    #[test]
    fn oids_are_stable_and_in_range() {
        let oid = oid_of("demo_lake_v2", "trips");
        assert_eq!(oid, oid_of("demo_lake_v2", "trips"));
        assert_ne!(oid, oid_of("demo_insights", "trips"));
        assert!((16_384..i32::MAX as u32).contains(&oid));
    }
}
