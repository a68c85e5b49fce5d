//! JSON pages of typed results (`Accept: application/json; types=native`),
//! the default page unchanged, and refusals: bad `Accept` and `format`,
//! other callers.

use super::*;

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
