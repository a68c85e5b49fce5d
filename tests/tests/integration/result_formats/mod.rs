//! Typed whole results (issue 19, must-have 2): a result as an Arrow IPC
//! stream and as Parquet, with the engine's column types, from
//! `GET /query/{id}/result` (`Accept`) and from signed links
//! (`GET /query/{id}/csv?format=`), read back by pyarrow, pandas and DuckDB
//! (tests/python/result_client.py) and compared with the result CSV; Range
//! and HEAD on the Parquet file; the typed JSON page
//! (`Accept: application/json; types=native`); the default page unchanged;
//! refusals of bad `Accept` and `format`, of other callers, and of typed
//! formats of a result kept without its typed copy.
//!
//! The tests are in `readers.rs` (the files read by pyarrow, pandas and
//! DuckDB; HEAD and ranges; an S3 lake), `pages.rs` (the typed and default
//! JSON pages; refusals) and `copies.rs` (when each copy is made, kept in
//! a row, or missing); the fixtures and helpers they share are here.

mod copies;
mod pages;
mod readers;
mod typed_first;

use std::sync::Arc;

use datafusion::arrow::{
    array::{
        BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int32Array,
        Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray, TimestampMillisecondArray,
    },
    datatypes::{DataType, Field, Schema, TimeUnit},
};
use lakehost_tests::*;
use serde_json::{Value, json};

const ARROW: &str = "application/vnd.apache.arrow.stream";
const PARQUET: &str = "application/vnd.apache.parquet";
const NATIVE: &str = "application/json; types=native";

/// Rows of the `typed` table.
const ROWS: usize = 2500;

/// Every kind of value a reader could get wrong: integers at their limits,
/// floats, decimals (one wider than any float), text with the CSV's special
/// characters and non-ASCII, booleans, timestamps with and without a zone,
/// dates; NULLs in every nullable column.
fn typed_batch() -> RecordBatch {
    let n = ROWS as i64;
    let ids: Vec<i64> = (0..n).collect();
    let some = |i: i64| i % 7 != 3;
    let names = [
        "plain",
        "",
        "a \"quoted\", comma",
        "line\nbreak\r\nand \"\"",
        "ünïcödé ✓",
        ",",
        "\"",
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("small", DataType::Int32, true),
        Field::new("big", DataType::Int64, true),
        Field::new("fare", DataType::Float64, true),
        Field::new("ratio", DataType::Float32, true),
        Field::new("amount", DataType::Decimal128(18, 2), true),
        Field::new("exact", DataType::Decimal128(38, 10), true),
        Field::new("name", DataType::Utf8, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new(
            "at_utc",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        Field::new("day", DataType::Date32, true),
        Field::new("service_client_id", DataType::Int64, false),
    ]));
    let big = |i: i64| match i % 3 {
        0 => i64::MAX - i,
        1 => i64::MIN + i,
        _ => i * 1_000_003,
    };
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(Int32Array::from_iter(
                ids.iter().map(|&i| some(i).then_some(i as i32 - 1000)),
            )),
            Arc::new(Int64Array::from_iter(
                ids.iter().map(|&i| some(i + 1).then_some(big(i))),
            )),
            Arc::new(Float64Array::from_iter(
                ids.iter()
                    .map(|&i| some(i + 2).then_some(i as f64 * 0.1 - 7.25)),
            )),
            Arc::new(Float32Array::from_iter(
                ids.iter().map(|&i| some(i + 3).then_some(i as f32 / 3.0)),
            )),
            Arc::new(
                Decimal128Array::from_iter(
                    ids.iter()
                        .map(|&i| some(i + 4).then_some(i128::from(i) * 101 - 5_000)),
                )
                .with_precision_and_scale(18, 2)
                .unwrap(),
            ),
            Arc::new(
                Decimal128Array::from_iter(ids.iter().map(|&i| {
                    some(i + 5).then_some(
                        (12_345_678_901_234_567_890_i128 * 10_000_000_000 + i128::from(i))
                            * if i % 2 == 0 { 1 } else { -1 },
                    )
                }))
                .with_precision_and_scale(38, 10)
                .unwrap(),
            ),
            Arc::new(StringArray::from_iter(ids.iter().map(|&i| {
                some(i + 6).then(|| format!("{} #{i}", names[i as usize % names.len()]))
            }))),
            Arc::new(BooleanArray::from_iter(
                ids.iter().map(|&i| some(i + 1).then_some(i % 2 == 0)),
            )),
            Arc::new(TimestampMicrosecondArray::from_iter(ids.iter().map(|&i| {
                some(i + 2).then_some(1_700_000_000_000_000 + i * 86_400_123_000)
            }))),
            Arc::new(
                TimestampMillisecondArray::from_iter(
                    ids.iter()
                        .map(|&i| some(i + 3).then_some(-1_000_000_000 + i * 3_600_001)),
                )
                .with_timezone("UTC"),
            ),
            Arc::new(Date32Array::from_iter(
                ids.iter()
                    .map(|&i| some(i + 4).then_some(i as i32 * 3 - 3000)),
            )),
            Arc::new(Int64Array::from_iter_values(ids.iter().map(|&i| 1 + i % 2))),
        ],
    )
    .unwrap()
}

const TYPED_SQL: &str = "SELECT id, small, big, fare, ratio, amount, exact, name, flag, at, \
                         at_utc, day, service_client_id FROM typed ORDER BY id";

/// TYPED_SQL's columns.
const TYPED_COLUMNS: [&str; 13] = [
    "id",
    "small",
    "big",
    "fare",
    "ratio",
    "amount",
    "exact",
    "name",
    "flag",
    "at",
    "at_utc",
    "day",
    "service_client_id",
];

/// What pyarrow reports for each column of the typed result.
const ARROW_TYPES: [&str; 13] = [
    "int64",
    "int32",
    "int64",
    "double",
    "float",
    "decimal128(18, 2)",
    "decimal128(38, 10)",
    "string",
    "bool",
    "timestamp[us]",
    "timestamp[ms, tz=UTC]",
    "date32[day]",
    "int64",
];

/// A server with `demo_lake_v2.typed` and an admin token.
async fn typed_app(adjust: impl FnOnce(&mut lakehost::Config)) -> (TestApp, String) {
    let app = spawn_app_with(adjust).await;
    app.import(None, "demo_lake_v2", "typed", &[typed_batch()])
        .await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    (app, token)
}

/// Runs `sql` to SUCCEEDED; its id.
async fn succeeded(app: &TestApp, token: &str, sql: &str) -> String {
    let (id, resource) = app.run_sql(ORG_HOST, token, sql).await;
    assert_eq!(resource["status"]["state"], "SUCCEEDED", "{resource}");
    id
}

/// GET `path` with `accept` (and the token); the response.
async fn get_with(
    app: &TestApp,
    token: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = app
        .request(reqwest::Method::GET, ORG_HOST, path)
        .bearer_auth(token);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Each of `requests` (a path, with an `Accept` or none) answers 409 with
/// `message`.
async fn each_answers_409(
    app: &TestApp,
    token: &str,
    requests: &[(String, Option<&str>)],
    message: &str,
) {
    for (path, accept) in requests {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let (status, body) = read(get_with(app, token, path, &headers).await).await;
        assert_eq!(
            (status, body),
            (StatusCode::CONFLICT, json!({ "message": message })),
            "{path}"
        );
    }
}

/// The signed link of `GET /query/{id}/csv` (`?format=` when given).
async fn link(app: &TestApp, token: &str, id: &str, format: Option<&str>) -> String {
    let path = match format {
        Some(format) => format!("{QUERY}/{id}/csv?format={format}"),
        None => format!("{QUERY}/{id}/csv"),
    };
    let response = get_with(app, token, &path, &[]).await;
    assert_eq!(response.status(), StatusCode::FOUND, "{path}");
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let (_, body) = read(response).await;
    assert_eq!(body, json!({ "location": location }));
    location
}

/// The result CSV as `CsvResultWriter` writes it: every value quoted, NULL
/// an empty unquoted field.
fn parse_csv(text: &str) -> Vec<Vec<Option<String>>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                let mut value = String::new();
                loop {
                    match chars.next().expect("closing quote") {
                        '"' if chars.peek() == Some(&'"') => {
                            chars.next();
                            value.push('"');
                        }
                        '"' => break,
                        other => value.push(other),
                    }
                }
                row.push(Some(value));
                match chars.next() {
                    Some(',') => {}
                    Some('\n') | None => rows.push(std::mem::take(&mut row)),
                    Some(other) => panic!("{other:?} after a value"),
                }
            }
            ',' => row.push(None),
            '\n' => {
                row.push(None);
                rows.push(std::mem::take(&mut row));
            }
            other => panic!("unquoted {other:?}"),
        }
    }
    rows
}

/// The whole result as CSV, through its spec link: header, then rows.
async fn csv_rows(app: &TestApp, token: &str, id: &str) -> Vec<Vec<Option<String>>> {
    let location = link(app, token, id, None).await;
    let text = reqwest::get(location).await.unwrap().text().await.unwrap();
    parse_csv(&text)
}

/// The SQL type of each column, from the first page's ColumnInfo.
async fn sql_types(app: &TestApp, token: &str, id: &str) -> Vec<String> {
    let (status, page) = app.result_page(ORG_HOST, token, id, None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["resultSet"]["ResultSetMetadata"]["ColumnInfo"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["Type"].as_str().unwrap().to_string())
        .collect()
}

/// Whether a reader's cell (`result_client.py`'s `cell`) is the CSV's.
fn same_value(sql_type: &str, csv: Option<&str>, read: &Value) -> bool {
    match (csv, read.as_str()) {
        (None, None) => read.is_null(),
        (Some(csv), Some(read)) => match sql_type {
            "double" => csv.parse::<f64>().ok() == read.parse::<f64>().ok(),
            "float" => csv.parse::<f32>().ok() == read.parse::<f32>().ok(),
            _ => csv == read,
        },
        _ => false,
    }
}

/// Asserts that `reader` (columns, types, rows) holds the CSV's rows.
fn assert_equals_csv(
    name: &str,
    reader: &Value,
    csv: &[Vec<Option<String>>],
    sql_types: &[String],
) {
    let header: Vec<Value> = csv[0]
        .iter()
        .map(|c| json!(c.as_deref().unwrap()))
        .collect();
    assert_eq!(reader["columns"], json!(header), "{name}");
    // Each column's type as TYPED_SQL's column of that name has it.
    let types: Vec<&str> = csv[0]
        .iter()
        .map(|column| {
            let at = TYPED_COLUMNS
                .iter()
                .position(|c| Some(*c) == column.as_deref());
            ARROW_TYPES[at.unwrap_or_else(|| panic!("{name}: column {column:?}"))]
        })
        .collect();
    assert_eq!(reader["types"], json!(types), "{name}");
    let rows = reader["rows"].as_array().unwrap();
    assert_eq!(rows.len(), csv.len() - 1, "{name}: row count");
    for (i, (read, expected)) in rows.iter().zip(&csv[1..]).enumerate() {
        let read = read.as_array().unwrap();
        assert_eq!(read.len(), expected.len(), "{name} row {i}");
        for (column, ((cell, expected), sql_type)) in
            read.iter().zip(expected).zip(sql_types).enumerate()
        {
            assert!(
                same_value(sql_type, expected.as_deref(), cell),
                "{name} row {i} column {} ({sql_type}): read {cell}, CSV {expected:?}",
                csv[0][column].as_deref().unwrap()
            );
        }
    }
}

/// The lake path of query `id`'s result CSV, from its link.
async fn csv_path_of(app: &TestApp, token: &str, id: &str) -> String {
    let location = link(app, token, id, None).await;
    let key = location.split("/_results/").nth(1).unwrap();
    format!("_results/{}", key.split('?').next().unwrap())
}

/// The names of the files of query `id`'s result in a lake on disk.
fn result_files_of(app: &TestApp, id: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut directories = vec![app.data_dir.join("lake").join("_results")];
    while let Some(directory) = directories.pop() {
        for entry in std::fs::read_dir(&directory).into_iter().flatten() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().to_string();
            if entry.file_type().unwrap().is_dir() {
                directories.push(entry.path());
            } else if name.starts_with(id) {
                found.push(name);
            }
        }
    }
    found.sort();
    found
}

/// `GET /query/{id}/result` with `accept`: the status and body.
async fn whole_result(app: &TestApp, token: &str, id: &str, accept: &str) -> bytes::Bytes {
    let response = get_with(
        app,
        token,
        &format!("{QUERY}/{id}/result"),
        &[("Accept", accept)],
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK, "{accept}");
    response.bytes().await.unwrap()
}
