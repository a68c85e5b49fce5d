//! Typed whole results (issue 19, must-have 2): a result as an Arrow IPC
//! stream and as Parquet, with the engine's column types, from
//! `GET /query/{id}/result` (`Accept`) and from signed links
//! (`GET /query/{id}/csv?format=`), read back by pyarrow, pandas and DuckDB
//! (tests/python/result_client.py) and compared with the result CSV; Range
//! and HEAD on the Parquet file; the typed JSON page
//! (`Accept: application/json; types=native`); the default page unchanged;
//! refusals of bad `Accept` and `format`, of other callers, and of typed
//! formats of a result kept without its typed copy.

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
    assert_eq!(reader["types"], json!(ARROW_TYPES), "{name}");
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

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn arrow_and_parquet_read_by_pyarrow_pandas_and_duckdb_equal_the_csv() {
    let python = test_python();
    let (app, token) = typed_app(|_| {}).await;
    let id = succeeded(&app, &token, TYPED_SQL).await;
    let csv = csv_rows(&app, &token, &id).await;
    assert_eq!(csv.len(), ROWS + 1);
    assert_eq!(csv[0].len(), 13);
    let types = sql_types(&app, &token, &id).await;

    // The signed links: what a user hands to pandas, pyarrow or DuckDB.
    let arrow_link = link(&app, &token, &id, Some("arrow")).await;
    let read = result_client(&python, "read_arrow", &json!({ "url": arrow_link })).await;
    assert_eq!(read["content_type"], ARROW);
    for reader in ["pyarrow", "pandas", "duckdb"] {
        assert_equals_csv(reader, &read["readers"][reader], &csv, &types);
    }
    let parquet_link = link(&app, &token, &id, Some("parquet")).await;
    let read = result_client(&python, "read_parquet", &json!({ "url": parquet_link })).await;
    assert_eq!(read["row_groups"], 1);
    for reader in ["pyarrow", "pandas", "duckdb"] {
        assert_equals_csv(reader, &read["readers"][reader], &csv, &types);
    }

    // The API's own endpoint, with the caller's token and Accept.
    let url = format!("{}{QUERY}/{id}/result", app.base);
    let api = |accept: &str| {
        json!({
            "url": url,
            "headers": {
                "Host": format!("{ORG_HOST}:{}", app.addr.port()),
                "Authorization": format!("Bearer {token}"),
                "Accept": accept,
            }
        })
    };
    let read = result_client(&python, "read_arrow", &api(ARROW)).await;
    assert_eq!(read["content_type"], ARROW);
    assert_equals_csv("pyarrow (API)", &read["readers"]["pyarrow"], &csv, &types);
    let read = result_client(&python, "read_parquet", &api(PARQUET)).await;
    for reader in ["pyarrow", "pandas"] {
        let name = format!("{reader} (API, ranged)");
        assert_equals_csv(&name, &read["readers"][reader], &csv, &types);
    }
}

#[tokio::test]
async fn the_parquet_file_answers_head_and_ranges_on_its_link_and_the_api() {
    let (app, token) = typed_app(|_| {}).await;
    let id = succeeded(&app, &token, TYPED_SQL).await;
    let response = get_with(
        &app,
        &token,
        &format!("{QUERY}/{id}/result"),
        &[("Accept", PARQUET)],
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], PARQUET);
    assert_eq!(headers["accept-ranges"], "bytes");
    let whole = response.bytes().await.unwrap();
    assert_eq!(headers["content-length"], whole.len().to_string().as_str());
    assert!(whole.starts_with(b"PAR1") && whole.ends_with(b"PAR1"));
    let footer_length =
        u32::from_le_bytes(whole[whole.len() - 8..whole.len() - 4].try_into().unwrap());
    assert!((footer_length as usize) < whole.len());

    let location = link(&app, &token, &id, Some("parquet")).await;
    assert!(location.contains(".parquet?"), "{location}");
    let http = reqwest::Client::new();
    let head = http.head(&location).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()["content-type"], PARQUET);
    assert_eq!(
        head.headers()["content-length"],
        whole.len().to_string().as_str()
    );
    let size = whole.len();
    // A reader's first request: the footer's length and magic at the end.
    for (range, expected, content_range) in [
        (
            "bytes=-8",
            &whole[size - 8..],
            format!("bytes {}-{}/{size}", size - 8, size - 1),
        ),
        ("bytes=0-3", &whole[..4], format!("bytes 0-3/{size}")),
        (
            "bytes=100-",
            &whole[100..],
            format!("bytes 100-{}/{size}", size - 1),
        ),
    ] {
        for url in [location.clone(), format!("{}{QUERY}/{id}/result", app.base)] {
            let mut request = http.get(&url).header("Range", range);
            if !url.contains("X-Amz-Signature") {
                request = request
                    .header("Host", format!("{ORG_HOST}:{}", app.addr.port()))
                    .header("Accept", PARQUET)
                    .bearer_auth(&token);
            }
            let part = request.send().await.unwrap();
            assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT, "{range} {url}");
            assert_eq!(part.headers()["content-range"], content_range.as_str());
            assert_eq!(&part.bytes().await.unwrap()[..], expected, "{range} {url}");
        }
    }
    let beyond = get_with(
        &app,
        &token,
        &format!("{QUERY}/{id}/result"),
        &[("Accept", PARQUET), ("Range", &format!("bytes={size}-"))],
    )
    .await;
    assert_eq!(beyond.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(
        beyond.headers()["content-range"],
        format!("bytes */{size}").as_str()
    );
    assert_eq!(
        read(beyond).await.1,
        json!({ "message": "The requested range is not satisfiable" })
    );

    // HEAD on the API: the headers, no body.
    let head = app
        .request(
            reqwest::Method::HEAD,
            ORG_HOST,
            &format!("{QUERY}/{id}/result"),
        )
        .bearer_auth(&token)
        .header("Accept", PARQUET)
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()["content-length"], size.to_string().as_str());
    assert!(head.bytes().await.unwrap().is_empty());

    // The Arrow and CSV downloads have their lengths too.
    for (accept, extension) in [(ARROW, "arrows"), ("text/csv", "csv")] {
        let response = get_with(
            &app,
            &token,
            &format!("{QUERY}/{id}/result"),
            &[("Accept", accept)],
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK, "{accept}");
        let length: usize = response.headers()["content-length"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            response.headers()["content-disposition"],
            format!("attachment; filename=\"{id}-1.{extension}\"").as_str()
        );
        assert_eq!(response.bytes().await.unwrap().len(), length, "{accept}");
    }
}

#[tokio::test]
async fn a_native_page_types_each_value_by_its_column() {
    let app = spawn_app().await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let sql = "SELECT CAST(9223372036854775807 AS BIGINT) AS big, CAST(-128 AS TINYINT) AS tiny, \
               CAST(0.1 AS DOUBLE) AS d, CAST(1e300 AS DOUBLE) AS huge, \
               CAST('NaN' AS DOUBLE) AS nan, CAST('Infinity' AS DOUBLE) AS inf, \
               CAST('-Infinity' AS DOUBLE) AS ninf, CAST(1.5 AS REAL) AS r, true AS yes, \
               CAST(NULL AS INT) AS nothing, \
               CAST('12345678901234567890.123456789' AS DECIMAL(38, 9)) AS dec, \
               'a \"b\", c' AS text, TIMESTAMP '2024-01-02 03:04:05.678' AS at, \
               DATE '2024-02-29' AS day, CAST(NULL AS VARCHAR) AS none";
    let id = succeeded(&app, &token, sql).await;
    let path = format!("{QUERY}/{id}/result");
    let response = get_with(&app, &token, &path, &[("Accept", NATIVE)]).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], NATIVE);
    let text = response.text().await.unwrap();
    let native: Value = serde_json::from_str(&text).unwrap();
    let rows = native["resultSet"]["Rows"].as_array().unwrap();
    assert_eq!(
        rows[0]["Data"],
        json!([
            "big", "tiny", "d", "huge", "nan", "inf", "ninf", "r", "yes", "nothing", "dec", "text",
            "at", "day", "none"
        ])
    );
    assert_eq!(
        rows[1]["Data"],
        json!([
            9_223_372_036_854_775_807_i64,
            -128,
            0.1,
            1e300,
            "NaN",
            "Infinity",
            "-Infinity",
            1.5,
            true,
            null,
            "12345678901234567890.123456789",
            "a \"b\", c",
            "2024-01-02 03:04:05.678",
            "2024-02-29",
            null
        ])
    );
    // Every digit of the big integer is in the body's text.
    assert!(
        text.contains("[9223372036854775807,-128,0.1,1e+300,"),
        "{text}"
    );
    // The same ColumnInfo as the spec's page; the spec's page unchanged.
    let (status, spec) = app.result_page(ORG_HOST, &token, &id, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        native["resultSet"]["ResultSetMetadata"],
        spec["resultSet"]["ResultSetMetadata"]
    );
    assert_eq!(
        page_rows(&spec)[1][..4],
        [
            Some("9223372036854775807".to_string()),
            Some("-128".to_string()),
            Some("0.1".to_string()),
            Some("1e300".to_string())
        ]
    );
}

#[tokio::test]
async fn native_pages_follow_next_tokens_to_the_end() {
    let (app, token) = typed_app(|_| {}).await;
    let id = succeeded(&app, &token, "SELECT id, flag FROM typed ORDER BY id").await;
    let mut next: Option<String> = None;
    let mut ids = Vec::new();
    loop {
        let mut path = format!("{QUERY}/{id}/result");
        if let Some(token) = &next {
            path = format!("{path}?next_token={token}");
        }
        let response = get_with(&app, &token, &path, &[("Accept", NATIVE)]).await;
        let (status, page) = read(response).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let rows = page["resultSet"]["Rows"].as_array().unwrap();
        let data = if next.is_none() {
            assert_eq!(rows[0]["Data"], json!(["id", "flag"]));
            &rows[1..]
        } else {
            &rows[..]
        };
        for row in data {
            let id = row["Data"][0].as_i64().unwrap();
            let flag = &row["Data"][1];
            assert!(flag.is_null() || flag == &json!(id % 2 == 0), "{row}");
            ids.push(id);
        }
        match page["nextToken"].as_str() {
            Some(token) => next = Some(token.to_string()),
            None => break,
        }
    }
    assert_eq!(ids, (0..ROWS as i64).collect::<Vec<_>>());
}

#[tokio::test]
async fn the_default_page_is_unchanged_byte_for_byte() {
    let app = spawn_app().await;
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let id = succeeded(
        &app,
        &token,
        "SELECT 1 AS a, 'x \"y\"' AS b, CAST(NULL AS DOUBLE) AS c",
    )
    .await;
    let path = format!("{QUERY}/{id}/result");
    // As the spec's page was rendered before typed results existed.
    let golden = "{\"resultSet\":{\"ResultSetMetadata\":{\"ColumnInfo\":[\
        {\"CaseSensitive\":false,\"CatalogName\":\"hive\",\"Label\":\"a\",\"Name\":\"a\",\"Nullable\":\"NOT_NULL\",\"Precision\":19,\"Scale\":0,\"SchemaName\":\"\",\"TableName\":\"\",\"Type\":\"bigint\"},\
        {\"CaseSensitive\":true,\"CatalogName\":\"hive\",\"Label\":\"b\",\"Name\":\"b\",\"Nullable\":\"NOT_NULL\",\"Precision\":2147483647,\"Scale\":0,\"SchemaName\":\"\",\"TableName\":\"\",\"Type\":\"varchar\"},\
        {\"CaseSensitive\":false,\"CatalogName\":\"hive\",\"Label\":\"c\",\"Name\":\"c\",\"Nullable\":\"NULLABLE\",\"Precision\":17,\"Scale\":0,\"SchemaName\":\"\",\"TableName\":\"\",\"Type\":\"double\"}]},\
        \"Rows\":[{\"Data\":[{\"VarCharValue\":\"a\"},{\"VarCharValue\":\"b\"},{\"VarCharValue\":\"c\"}]},\
        {\"Data\":[{\"VarCharValue\":\"1\"},{\"VarCharValue\":\"x \\\"y\\\"\"},{}]}]}}";
    for accept in [
        None,
        Some("application/json"),
        Some("*/*"),
        Some("application/json; charset=utf-8"),
        Some("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
    ] {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let response = get_with(&app, &token, &path, &headers).await;
        assert_eq!(response.status(), StatusCode::OK, "{accept:?}");
        assert_eq!(response.headers()["content-type"], "application/json");
        assert_eq!(response.text().await.unwrap(), golden, "{accept:?}");
    }
}

#[tokio::test]
async fn bad_accept_headers_and_formats_are_refused_clearly() {
    let (app, token) = typed_app(|_| {}).await;
    let id = succeeded(&app, &token, "SELECT id FROM typed WHERE id < 3").await;
    let path = format!("{QUERY}/{id}/result");
    for accept in [
        "text/html",
        "application/json; types=strings",
        "application/vnd.apache.arrow.file",
        "application/json;q=0",
    ] {
        let (status, body) = read(get_with(&app, &token, &path, &[("Accept", accept)]).await).await;
        assert_eq!(status, StatusCode::NOT_ACCEPTABLE, "{accept}");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "Not Acceptable: GET /query/{query_id}/result answers application/json"
            ) && message.contains("application/vnd.apache.parquet"),
            "{body}"
        );
    }
    let (status, body) = read(
        get_with(
            &app,
            &token,
            &format!("{path}?next_token=1.2.x"),
            &[("Accept", PARQUET)],
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            json!({ "message": "InvalidParameterError: \"next_token\" selects a JSON page; the whole result has no pages." })
        )
    );
    for format in ["xlsx", "Parquet", ""] {
        let (status, body) = read(
            get_with(
                &app,
                &token,
                &format!("{QUERY}/{id}/csv?format={format}"),
                &[],
            )
            .await,
        )
        .await;
        assert_eq!(
            (status, body),
            (
                StatusCode::BAD_REQUEST,
                json!({ "message": "InvalidParameterError: \"format\" must be csv, arrow or parquet." })
            ),
            "{format}"
        );
    }
    // With `format`, an unknown query is a clear 404; without it, the spec's 500.
    let unknown = uuid_like();
    let (status, body) = read(
        get_with(
            &app,
            &token,
            &format!("{QUERY}/{unknown}/csv?format=parquet"),
            &[],
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body["message"],
        format!(
            "An error occurred (InvalidRequestException) when calling the GetQueryResults operation: QueryExecution {unknown} was not found"
        )
    );
    let (status, body) =
        read(get_with(&app, &token, &format!("{QUERY}/{unknown}/csv"), &[]).await).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "message": "Internal Server Error" })
        )
    );
    // A query that has not finished: 400 like its page.
    let running = app
        .submit_sql(
            ORG_HOST,
            &token,
            "SELECT count(*) FROM typed a, typed b, typed c",
        )
        .await;
    let (status, body) = read(
        get_with(
            &app,
            &token,
            &format!("{QUERY}/{running}/result"),
            &[("Accept", ARROW)],
        )
        .await,
    )
    .await;
    if status != StatusCode::OK {
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("Query has not yet finished"),
            "{body}"
        );
    }
    app.request(
        reqwest::Method::DELETE,
        ORG_HOST,
        &format!("{QUERY}/{running}"),
    )
    .bearer_auth(&token)
    .send()
    .await
    .unwrap();
}

#[tokio::test]
async fn other_callers_cannot_reach_typed_results() {
    let (app, _) = typed_app(|_| {}).await;
    let analyst = app.token_of("analyst-1", &["OwnServiceClientAnalyst"], "[1]");
    let id = succeeded(
        &app,
        &analyst,
        "SELECT * FROM typed WHERE service_client_id = 1 ORDER BY id",
    )
    .await;
    let result = format!("{QUERY}/{id}/result");
    // Another user: the query does not exist for them.
    let other = app.token_of("analyst-2", &["OwnServiceClientAnalyst"], "[1]");
    for (path, accept) in [
        (result.clone(), Some(PARQUET)),
        (result.clone(), Some(ARROW)),
        (format!("{QUERY}/{id}/csv?format=parquet"), None),
        (format!("{QUERY}/{id}/csv?format=arrow"), None),
    ] {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let (status, body) = read(get_with(&app, &other, &path, &headers).await).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    // The same user with other service clients: their access fingerprint
    // changed, the result is out of reach.
    let changed = app.token_of("analyst-1", &["OwnServiceClientAnalyst"], "[1 2]");
    for (path, accept) in [
        (result.clone(), Some(PARQUET)),
        (result.clone(), Some(NATIVE)),
        (format!("{QUERY}/{id}/csv?format=parquet"), None),
    ] {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let (status, body) = read(get_with(&app, &changed, &path, &headers).await).await;
        assert_eq!(
            (status, body),
            (StatusCode::FORBIDDEN, json!({ "message": DATA_DENIED })),
            "{path}"
        );
    }
    // The owner, unchanged, reads it; a Parquet copy was made only then.
    let parquet = get_with(&app, &analyst, &result, &[("Accept", PARQUET)]).await;
    assert_eq!(parquet.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_result_kept_without_its_typed_copy_answers_409_and_still_serves_csv() {
    let (app, token) = typed_app(|c| c.query.typed_results = false).await;
    let id = succeeded(&app, &token, "SELECT id, name FROM typed ORDER BY id").await;
    let message = format!(
        "Query {id} has no typed copy of its result: it ran before typed results were kept, or \
         while this service kept none. Its result is available as CSV and as JSON pages; run the \
         query again for Arrow or Parquet."
    );
    let result = format!("{QUERY}/{id}/result");
    for (path, accept) in [
        (result.clone(), Some(PARQUET)),
        (result.clone(), Some(ARROW)),
        (format!("{QUERY}/{id}/csv?format=parquet"), None),
        (format!("{QUERY}/{id}/csv?format=arrow"), None),
    ] {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let (status, body) = read(get_with(&app, &token, &path, &headers).await).await;
        assert_eq!(
            (status, body),
            (StatusCode::CONFLICT, json!({ "message": message })),
            "{path}"
        );
    }
    // No file was written beside the CSV, nor made by asking.
    let csv_link = link(&app, &token, &id, Some("csv")).await;
    let csv_key = csv_link
        .split("/_results/")
        .nth(1)
        .unwrap()
        .split('?')
        .next()
        .unwrap();
    let csv_path = format!("_results/{csv_key}");
    assert!(app.lake_has(&csv_path).await);
    for extension in ["arrows", "parquet"] {
        let path = csv_path.replace(".csv", &format!(".{extension}"));
        assert!(!app.lake_has(&path).await, "{path}");
    }
    // CSV and pages as ever; `format=csv` is the spec's link.
    let csv = reqwest::get(&csv_link).await.unwrap().text().await.unwrap();
    assert_eq!(parse_csv(&csv).len(), ROWS + 1);
    assert_eq!(
        link(&app, &token, &id, None).await.split('?').next(),
        csv_link.split('?').next()
    );
    let (status, _) = app.result_page(ORG_HOST, &token, &id, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = read(get_with(&app, &token, &result, &[("Accept", NATIVE)]).await).await;
    assert_eq!(status, StatusCode::OK);
}

/// A result whose columns do not read back from its CSV (a timestamp) and
/// whose copy is gone answers the 409, makes nothing, and still serves its
/// CSV: it is never read back with the wrong type.
#[tokio::test]
async fn a_lost_copy_of_a_result_that_does_not_read_back_is_409_and_nothing_is_made() {
    let (app, token) = typed_app(|c| c.query.result_in_store_bytes = 0).await;
    let id = succeeded(&app, &token, "SELECT id, at FROM typed ORDER BY id").await;
    let csv_path = csv_path_of(&app, &token, &id).await;
    let lake = app.data_dir.join("lake");
    let arrow_file = lake.join(csv_path.replace(".csv", ".arrows"));
    std::fs::remove_file(&arrow_file).expect("the copy was written while it ran");
    let message = format!(
        "Query {id} has no typed copy of its result: it ran before typed results were kept, or \
         while this service kept none. Its result is available as CSV and as JSON pages; run the \
         query again for Arrow or Parquet."
    );
    let result = format!("{QUERY}/{id}/result");
    for accept in [ARROW, PARQUET] {
        let (status, body) =
            read(get_with(&app, &token, &result, &[("Accept", accept)]).await).await;
        assert_eq!(
            (status, body),
            (StatusCode::CONFLICT, json!({ "message": message })),
            "{accept}"
        );
    }
    assert!(!arrow_file.exists(), "nothing read back");
    assert!(!lake.join(csv_path.replace(".csv", ".parquet")).exists());
    let rows = csv_rows(&app, &token, &id).await;
    assert_eq!(rows.len(), ROWS + 1, "the CSV, header and rows");
}

#[tokio::test]
async fn typed_copies_are_read_back_or_written_as_the_columns_need_and_parquet_when_asked() {
    // Every result in the lake, however small (else this one's rows stay
    // in the store's row: the next test).
    let (app, token) = typed_app(|c| c.query.result_in_store_bytes = 0).await;
    let id = succeeded(&app, &token, "SELECT id FROM typed").await;
    let csv_path = csv_path_of(&app, &token, &id).await;
    let arrow_path = csv_path.replace(".csv", ".arrows");
    let parquet_path = csv_path.replace(".csv", ".parquet");
    // An integer column reads back from the CSV: its query wrote no typed
    // copy; the first Parquet request reads the Arrow copy back, then
    // makes the Parquet file from it.
    assert!(
        !app.lake_has(&arrow_path).await,
        "read back on first request only"
    );
    assert!(
        !app.lake_has(&parquet_path).await,
        "made on first request only"
    );
    link(&app, &token, &id, Some("parquet")).await;
    assert!(app.lake_has(&arrow_path).await);
    assert!(app.lake_has(&parquet_path).await);

    // A timestamp's CSV keeps milliseconds: its query writes the copy as it
    // runs.
    let id = succeeded(&app, &token, "SELECT id, at FROM typed").await;
    let arrow_path = csv_path_of(&app, &token, &id)
        .await
        .replace(".csv", ".arrows");
    assert!(app.lake_has(&arrow_path).await, "written while it ran");

    // An operator may have every read write its copy as it runs.
    let (app, token) = typed_app(|c| {
        c.query.result_in_store_bytes = 0;
        c.query.typed_results_while_running = true;
    })
    .await;
    let id = succeeded(&app, &token, "SELECT id FROM typed").await;
    let arrow_path = csv_path_of(&app, &token, &id)
        .await
        .replace(".csv", ".arrows");
    assert!(app.lake_has(&arrow_path).await, "written while it ran");

    // A statement's result (CREATE TABLE AS: its row count) has them too.
    let id = succeeded(
        &app,
        &token,
        "CREATE TABLE demo_sandbox.copy AS SELECT id, service_client_id FROM typed",
    )
    .await;
    let response = get_with(
        &app,
        &token,
        &format!("{QUERY}/{id}/result"),
        &[("Accept", PARQUET)],
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.bytes().await.unwrap().starts_with(b"PAR1"));

    // A query failing while its rows stream (a division by zero at the
    // last row) leaves no file of its result in any format.
    let (id, done) = app
        .run_sql(
            ORG_HOST,
            &token,
            &format!(
                "SELECT id, 1 / (id - {}) AS x FROM typed ORDER BY id",
                ROWS - 1
            ),
        )
        .await;
    assert_eq!(done["status"]["state"], "FAILED", "{done}");
    let left = result_files_of(&app, &id);
    assert!(left.is_empty(), "{left:?}");
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

/// A small result lives in its job's row (`query.result_in_store_bytes`):
/// no file until a link asks for one, and every format reads the same on
/// the replica that ran it and on another one, which reads the store.
#[tokio::test]
async fn a_small_result_kept_in_the_store_reads_the_same_in_every_format_on_every_replica() {
    small_result_on_two_replicas().await;
}

/// The links of a small result, written to the lake when asked for, read by
/// pyarrow, pandas and DuckDB as the CSV.
#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn a_small_results_links_read_by_pyarrow_pandas_and_duckdb_equal_the_csv() {
    let python = test_python();
    let small = small_result_on_two_replicas().await;
    let (app, token, id) = (&small.first, &small.token, &small.id);
    let types = sql_types(app, token, id).await;
    let read = result_client(&python, "read_arrow", &json!({ "url": small.arrow_link })).await;
    for reader in ["pyarrow", "pandas", "duckdb"] {
        assert_equals_csv(reader, &read["readers"][reader], &small.csv_rows, &types);
    }
    let read = result_client(
        &python,
        "read_parquet",
        &json!({ "url": small.parquet_link }),
    )
    .await;
    for reader in ["pyarrow", "pandas", "duckdb"] {
        assert_equals_csv(reader, &read["readers"][reader], &small.csv_rows, &types);
    }
}

/// A small result on two replicas of one store, read in every format on
/// both, its links asked of the replica that did not run it.
struct SmallResult {
    first: TestApp,
    token: String,
    id: String,
    csv_rows: Vec<Vec<Option<String>>>,
    arrow_link: String,
    parquet_link: String,
    /// Serves the links; the data directory both replicas share.
    _second: TestApp,
    _dir: tempfile::TempDir,
}

/// Runs a small query on one replica and reads it on both (the assertions
/// of the test above); what the readers' test needs of it.
async fn small_result_on_two_replicas() -> SmallResult {
    let dir = tempfile::tempdir().unwrap();
    let clock = lakehost::clock::ManualClock::new();
    let first = spawn_in(dir.path().to_path_buf(), clock.clone(), |_| {}).await;
    first
        .import(None, "demo_lake_v2", "typed", &[typed_batch()])
        .await;
    let token = first.token_for(&["ZoneAdmin"], "[0]");
    let id = succeeded(&first, &token, &format!("{TYPED_SQL} LIMIT 20")).await;
    assert_eq!(result_files_of(&first, &id), Vec::<String>::new());
    let second = spawn_in(dir.path().to_path_buf(), clock, |_| {}).await;
    let other_token = second.token_for(&["ZoneAdmin"], "[0]");

    let (status, page) = first.result_page(ORG_HOST, &token, &id, None).await;
    let (other_status, other_page) = second.result_page(ORG_HOST, &other_token, &id, None).await;
    assert_eq!((status, other_status), (StatusCode::OK, StatusCode::OK));
    assert_eq!(page, other_page);
    assert_eq!(page_rows(&page).len(), 21, "the header row and 20 rows");
    let csv = whole_result(&first, &token, &id, "text/csv").await;
    assert_eq!(
        csv,
        whole_result(&second, &other_token, &id, "text/csv").await
    );
    let csv_rows = parse_csv(std::str::from_utf8(&csv).unwrap());
    assert_eq!(&csv_rows[1..], &page_rows(&page)[1..]);
    let arrow = whole_result(&second, &other_token, &id, ARROW).await;
    let batches: Vec<RecordBatch> = datafusion::arrow::ipc::reader::StreamReader::try_new(
        std::io::Cursor::new(arrow.to_vec()),
        None,
    )
    .unwrap()
    .map(Result::unwrap)
    .collect();
    assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 20);
    assert_eq!(batches[0].schema().field(0).data_type(), &DataType::Int64);
    assert_eq!(result_files_of(&first, &id), Vec::<String>::new());

    // Links, from the replica that did not run it: each writes its file
    // to the lake first, then serves it as any other.
    let mut arrow_link = String::new();
    for (format, served) in [(None, &csv), (Some("arrow"), &arrow)] {
        let location = link(&second, &other_token, &id, format).await;
        let linked = reqwest::get(&location)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(&linked, served, "{format:?}");
        arrow_link = location;
    }
    let parquet_link = link(&second, &other_token, &id, Some("parquet")).await;
    let parquet = whole_result(&first, &token, &id, PARQUET).await;
    assert!(parquet.starts_with(b"PAR1"));
    let files = result_files_of(&first, &id);
    assert_eq!(files.len(), 3, "{files:?}");
    for extension in [".csv", ".arrows", ".parquet"] {
        assert!(files.iter().any(|f| f.ends_with(extension)), "{files:?}");
    }
    SmallResult {
        first,
        token,
        id,
        csv_rows,
        arrow_link,
        parquet_link,
        _second: second,
        _dir: dir,
    }
}

/// With the lake on S3 (moto's, `.ci/s3`), the typed copies are S3 objects
/// and their links S3's own presigned GETs, which readers (pyarrow, pandas,
/// DuckDB) range over as they do over the storage endpoint's.
#[tokio::test]
#[cfg_attr(
    not(all(lakehost_has_s3, lakehost_has_python)),
    ignore = "needs an S3 server and the Python clients: eval \"$(.ci/s3)\" and \"$(.ci/python)\" first (README, Tests)"
)]
async fn on_an_s3_lake_the_typed_links_are_s3_presigned_gets() {
    let endpoint = s3_endpoint();
    let bucket = format!("lakehost-test-{}", &lakehost::store::new_id()[..12]);
    let http = reqwest::Client::new();
    let created = http
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.status());
    let lake_url = format!("s3://{bucket}/lake");
    let (app, token) = typed_app(|c| c.storage.lake_url = Some(lake_url)).await;
    // A result in the lake, then one kept in the store's row, whose links
    // write it to the bucket first.
    for sql in [TYPED_SQL.to_string(), format!("{TYPED_SQL} LIMIT 20")] {
        s3_links_read_back(&app, &token, &endpoint, &bucket, &sql).await;
    }
}

/// Runs `sql` on `app`'s S3 lake and reads its typed result through S3's
/// presigned GETs.
async fn s3_links_read_back(app: &TestApp, token: &str, endpoint: &str, bucket: &str, sql: &str) {
    let http = reqwest::Client::new();
    let id = succeeded(app, token, sql).await;
    let location = link(app, token, &id, Some("parquet")).await;
    assert!(
        location.starts_with(&format!("{endpoint}/{bucket}/lake/_results/"))
            && location.contains(".parquet?"),
        "{location}"
    );
    let tail = http
        .get(&location)
        .header("Range", "bytes=-4")
        .send()
        .await
        .unwrap();
    assert_eq!(tail.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(&tail.bytes().await.unwrap()[..], b"PAR1");
    let python = test_python();
    let csv = csv_rows(app, token, &id).await;
    let types = sql_types(app, token, &id).await;
    let read = result_client(&python, "read_parquet", &json!({ "url": location })).await;
    for reader in ["pyarrow", "pandas", "duckdb"] {
        assert_equals_csv(reader, &read["readers"][reader], &csv, &types);
    }
    let arrow = link(app, token, &id, Some("arrow")).await;
    let read = result_client(&python, "read_arrow", &json!({ "url": arrow })).await;
    assert_equals_csv("pyarrow (S3)", &read["readers"]["pyarrow"], &csv, &types);
}
