//! A result page's body in the shape the caller asked for: the spec's
//! ("Query result page": every value a `VarCharValue` string, NULL an empty
//! cell), or, with `Accept: application/json; types=native`, the same
//! envelope with each cell a bare JSON value typed by its column:
//!
//! | column Type (ColumnInfo)             | cell                                   |
//! |--------------------------------------|----------------------------------------|
//! | tinyint, smallint, integer, bigint   | JSON integer, every digit kept         |
//! | float, double                        | JSON number (shortest exact text); NaN, Infinity, -Infinity as those strings |
//! | boolean                              | `true` / `false`                       |
//! | decimal (and unsigned 64-bit, which is decimal(20,0)) | string, as in the spec shape: a JSON number would lose digits in most parsers |
//! | anything else (varchar, date, timestamp, ...) | string, as in the spec shape  |
//! | NULL of any type                     | `null`                                 |
//!
//! The header row of the first page is the column names as bare strings.
//! The values are those of the spec shape (the result CSV's text), typed
//! here: the two shapes never disagree on a value.
//!
//! `GET /query/{id}/result` and the wait-mode answer of `POST /query` both
//! answer pages through `PageShape::from_headers` and `read_page`: a page is
//! never held whole (`body.rs`). Its rows are written cell by cell as the
//! result CSV is read (`rows_json.rs`) into the envelope `page_body` gives,
//! so the bytes are those `page_body` would give for the whole page; a page
//! above `query.max_page_bytes` is refused with 409.

use axum::http::HeaderMap;
use serde_json::{Map, Number, Value, json};

use super::{
    accept::{self, Offer},
    error::ApiError,
};
use crate::{engine::columns::ResultColumn, query::service::ResultPage};

mod body;
mod rows_json;

pub use body::{PageBody, PageRows, read_page};

/// Which shape a page's body takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageShape {
    /// The spec's: every value a string.
    Spec,
    /// Values typed by their column (`Accept: application/json; types=native`).
    Native,
}

/// The media type parameter that asks for native values.
pub const NATIVE_PARAMS: &[(&str, &str)] = &[("types", "native")];

/// What a page can be answered as, the spec's shape first (the default).
pub const PAGE_OFFERS: &[Offer<PageShape>] = &[
    Offer {
        media_type: "application/json",
        params: &[],
        by_wildcard: true,
        value: PageShape::Spec,
    },
    Offer {
        media_type: "application/json",
        params: NATIVE_PARAMS,
        by_wildcard: false,
        value: PageShape::Native,
    },
];

impl PageShape {
    /// The shape the request's `Accept` header asks for: `Native` for
    /// `application/json; types=native`, `Spec` without a header or for any
    /// other JSON (`*/*`, `application/json`, ...); 406 when it accepts
    /// neither (`text/html` alone, `application/json; types=other`).
    pub fn from_headers(headers: &HeaderMap) -> Result<PageShape, ApiError> {
        accept::choose(headers, PAGE_OFFERS).ok_or_else(|| {
            ApiError::NotAcceptable(
                "Not Acceptable: a result page is application/json (values as strings, the \
                 default) or application/json; types=native (values typed by column); the \
                 Accept header names neither."
                    .into(),
            )
        })
    }

    /// The page's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            PageShape::Spec => "application/json",
            PageShape::Native => "application/json; types=native",
        }
    }

    /// The shape's name where it is written down (an idempotent answer kept
    /// to be rendered again).
    pub fn name(self) -> &'static str {
        match self {
            PageShape::Spec => "spec",
            PageShape::Native => "native",
        }
    }

    /// The shape `name` names.
    pub fn named(name: &str) -> Option<Self> {
        [PageShape::Spec, PageShape::Native]
            .into_iter()
            .find(|shape| shape.name() == name)
    }
}

/// The first page's first row: the column names.
fn header_row(columns: &[ResultColumn], shape: PageShape) -> Value {
    let names = columns.iter().map(|c| match shape {
        PageShape::Spec => json!({ "VarCharValue": c.name }),
        PageShape::Native => json!(c.name),
    });
    json!({ "Data": names.collect::<Vec<_>>() })
}

/// The result page shape (spec "Query result page"), cells as `shape` says,
/// whole in memory: what `read_page` builds its envelope from (with no rows),
/// and the reference its streamed bytes are tested against.
pub fn page_body(page: &ResultPage, shape: PageShape) -> Value {
    let mut rows: Vec<Value> = Vec::with_capacity(page.rows.len() + 1);
    if page.first && !page.columns.is_empty() {
        rows.push(header_row(&page.columns, shape));
    }
    match shape {
        PageShape::Spec => {
            let cell = |value: &Option<String>| match value {
                Some(text) => json!({ "VarCharValue": text }),
                None => json!({}),
            };
            rows.extend(
                page.rows
                    .iter()
                    .map(|row| json!({ "Data": row.iter().map(cell).collect::<Vec<_>>() })),
            );
        }
        PageShape::Native => {
            let kinds: Vec<NativeKind> = page.columns.iter().map(NativeKind::of).collect();
            rows.extend(page.rows.iter().map(|row| {
                let cells = row.iter().enumerate().map(|(i, value)| match value {
                    Some(text) => kinds
                        .get(i)
                        .copied()
                        .unwrap_or(NativeKind::Text)
                        .value(text),
                    None => Value::Null,
                });
                json!({ "Data": cells.collect::<Vec<_>>() })
            }));
        }
    }
    let columns: Vec<Value> = page
        .columns
        .iter()
        .map(|c| {
            json!({
                "CatalogName": "hive",
                "SchemaName": "",
                "TableName": "",
                "Name": c.name,
                "Label": c.name,
                "Type": c.sql_type,
                "Precision": c.precision,
                "Scale": c.scale,
                "Nullable": if c.nullable { "NULLABLE" } else { "NOT_NULL" },
                "CaseSensitive": c.case_sensitive(),
            })
        })
        .collect();
    let mut body = Map::new();
    body.insert(
        "resultSet".into(),
        json!({
            "Rows": rows,
            "ResultSetMetadata": { "ColumnInfo": columns },
        }),
    );
    if let Some(token) = &page.next_token {
        body.insert("nextToken".into(), json!(token));
    }
    Value::Object(body)
}

/// How a column's values appear in a native page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NativeKind {
    Integer,
    Float,
    Boolean,
    Text,
}

impl NativeKind {
    fn of(column: &ResultColumn) -> Self {
        match column.sql_type.as_str() {
            "tinyint" | "smallint" | "integer" | "bigint" => NativeKind::Integer,
            "float" | "double" => NativeKind::Float,
            "boolean" => NativeKind::Boolean,
            _ => NativeKind::Text,
        }
    }

    /// The cell of `text` (the value as the CSV holds it). Text that does not
    /// read as the column's type stays a string rather than being lost.
    fn value(self, text: &str) -> Value {
        let as_text = || Value::String(text.to_string());
        match self {
            NativeKind::Integer => text.parse::<i64>().map_or_else(|_| as_text(), Value::from),
            NativeKind::Float => match text.parse::<f64>() {
                Ok(x) if x.is_nan() => json!("NaN"),
                Ok(x) if x.is_infinite() => json!(if x > 0.0 { "Infinity" } else { "-Infinity" }),
                Ok(x) => Number::from_f64(x).map_or_else(as_text, Value::Number),
                Err(_) => as_text(),
            },
            NativeKind::Boolean => match text {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => as_text(),
            },
            NativeKind::Text => as_text(),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderValue, StatusCode, header};

    use super::*;

    fn column(name: &str, sql_type: &str) -> ResultColumn {
        ResultColumn {
            name: name.into(),
            sql_type: sql_type.into(),
            precision: 0,
            scale: 0,
            nullable: true,
        }
    }

    fn page() -> ResultPage {
        let cell = |text: &str| Some(text.to_string());
        ResultPage {
            columns: vec![
                column("i", "bigint"),
                column("f", "double"),
                column("b", "boolean"),
                column("d", "decimal"),
                column("s", "varchar"),
                column("t", "timestamp"),
            ],
            first: true,
            rows: vec![
                vec![
                    cell("9223372036854775807"),
                    cell("0.1"),
                    cell("true"),
                    cell("12345678901234567890.123456789"),
                    cell("a \"quoted\", comma\nline"),
                    cell("2024-01-02 03:04:05.678"),
                ],
                vec![
                    cell("-9223372036854775808"),
                    cell("NaN"),
                    cell("false"),
                    None,
                    cell(""),
                    None,
                ],
                vec![cell("0"), cell("inf"), None, cell("0.00"), None, None],
                vec![cell("1"), cell("-inf"), cell("true"), None, None, None],
                vec![cell("2"), cell("1e300"), cell("true"), None, None, None],
            ],
            next_token: Some("1.2.abc".into()),
        }
    }

    #[test]
    fn native_cells_are_typed_by_column_without_losing_digits() {
        let body = page_body(&page(), PageShape::Native);
        let rows = body["resultSet"]["Rows"].as_array().unwrap();
        assert_eq!(rows[0]["Data"], json!(["i", "f", "b", "d", "s", "t"]));
        assert_eq!(
            rows[1]["Data"],
            json!([
                9_223_372_036_854_775_807_i64,
                0.1,
                true,
                "12345678901234567890.123456789",
                "a \"quoted\", comma\nline",
                "2024-01-02 03:04:05.678"
            ])
        );
        assert_eq!(
            rows[2]["Data"],
            json!([i64::MIN, "NaN", false, null, "", null])
        );
        assert_eq!(
            rows[3]["Data"],
            json!([0, "Infinity", null, "0.00", null, null])
        );
        assert_eq!(rows[4]["Data"][1], json!("-Infinity"));
        let text = body.to_string();
        assert!(text.contains("9223372036854775807,0.1,true,"), "{text}");
        assert!(text.contains(",1e+300,"), "{text}");
        assert_eq!(body["nextToken"], "1.2.abc");
        assert_eq!(
            body["resultSet"]["ResultSetMetadata"],
            page_body(&page(), PageShape::Spec)["resultSet"]["ResultSetMetadata"]
        );
    }

    #[test]
    fn the_spec_shape_is_strings_and_empty_cells() {
        let body = page_body(&page(), PageShape::Spec);
        let rows = body["resultSet"]["Rows"].as_array().unwrap();
        assert_eq!(rows[0]["Data"][0], json!({ "VarCharValue": "i" }));
        assert_eq!(
            rows[2]["Data"],
            json!([
                { "VarCharValue": "-9223372036854775808" },
                { "VarCharValue": "NaN" },
                { "VarCharValue": "false" },
                {},
                { "VarCharValue": "" },
                {}
            ])
        );
        let later = ResultPage {
            first: false,
            next_token: None,
            ..page()
        };
        let body = page_body(&later, PageShape::Spec);
        assert_eq!(body["resultSet"]["Rows"].as_array().unwrap().len(), 5);
        assert!(body.get("nextToken").is_none());
    }

    #[test]
    fn shapes_follow_the_accept_header() {
        let shape = |accept: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(accept) = accept {
                headers.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
            }
            PageShape::from_headers(&headers)
        };
        assert_eq!(shape(None).unwrap(), PageShape::Spec);
        assert_eq!(shape(Some("*/*")).unwrap(), PageShape::Spec);
        assert_eq!(
            shape(Some("application/json; types=native")).unwrap(),
            PageShape::Native
        );
        for refused in [
            "application/vnd.apache.parquet",
            "application/json; types=strings",
        ] {
            let error = shape(Some(refused)).unwrap_err();
            assert_eq!(error.status(), StatusCode::NOT_ACCEPTABLE, "{refused}");
        }
    }
}
