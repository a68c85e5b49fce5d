//! Results written Arrow or Parquet first (`Prefer: result-format=arrow`
//! or `parquet`, issue 50): the query writes that file alone (and the CSV
//! only while small); the pages, the CSV link and the other typed format
//! are then made from it on first request and are the very bytes and rows a
//! CSV-first run gives; a reused result keeps its way; bad preferences are
//! refused, and a service without typed results runs the query CSV first.

use datafusion::{
    arrow::{compute::concat_batches, ipc::reader::StreamReader},
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder,
};

use super::*;

/// Runs `sql` Arrow first to SUCCEEDED; its id.
async fn succeeded_arrow_first(app: &TestApp, token: &str, sql: &str) -> String {
    succeeded_first(app, token, sql, "arrow").await
}

/// Runs `sql` with `Prefer: result-format=<format>` to SUCCEEDED; its id.
async fn succeeded_first(app: &TestApp, token: &str, sql: &str, format: &str) -> String {
    let prefer = format!("result-format={format}");
    let (status, applied, body) =
        submit_preferring(app, token, &prefer, &json!({ "query": sql })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(applied, Some(prefer));
    let id = body["queryId"].as_str().unwrap().to_string();
    let resource = app.wait_for(ORG_HOST, token, &id, None).await;
    assert_eq!(resource["status"]["state"], "SUCCEEDED", "{resource}");
    id
}

/// The extensions of query `id`'s result files in the lake.
fn kinds_of(app: &TestApp, id: &str) -> Vec<String> {
    result_files_of(app, id)
        .iter()
        .map(|name| name.rsplit('.').next().unwrap().to_string())
        .collect()
}

/// Every batch of a Parquet file, as one.
fn parquet_rows(bytes: bytes::Bytes) -> RecordBatch {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
    let schema = builder.schema().clone();
    let reader = builder.build().unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    concat_batches(&schema, &batches).unwrap()
}

/// Every batch of an Arrow IPC stream, as one.
fn arrow_rows(bytes: bytes::Bytes) -> RecordBatch {
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let schema = reader.schema();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    concat_batches(&schema, &batches).unwrap()
}

#[tokio::test]
async fn arrow_first_writes_the_arrow_file_alone_and_every_other_form_equals_csv_first() {
    let (app, token) = typed_app(|_| {}).await;
    let csv_first = succeeded(&app, &token, TYPED_SQL).await;
    let id = succeeded_arrow_first(&app, &token, TYPED_SQL).await;
    assert_eq!(
        kinds_of(&app, &id),
        ["arrows"],
        "the query wrote its Arrow file alone"
    );
    // The resource is the spec's, whichever way the result was written.
    let (_, ours) = app.query_status(ORG_HOST, &token, &id).await;
    let (_, theirs) = app.query_status(ORG_HOST, &token, &csv_first).await;
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&ours), keys(&theirs));

    // The first page is made from the Arrow file, and is the CSV-first one.
    let (status, page) = app.result_page(ORG_HOST, &token, &id, None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let (_, expected) = app.result_page(ORG_HOST, &token, &csv_first, None).await;
    assert_eq!(page["resultSet"], expected["resultSet"]);
    assert_eq!(
        page_rows(&page).len(),
        1001,
        "the header row and 1,000 rows"
    );
    assert_eq!(kinds_of(&app, &id), ["arrows", "csv"], "the CSV made once");
    // The next page follows its token to the same rows.
    let next = page["nextToken"].as_str().unwrap();
    let (_, second) = app.result_page(ORG_HOST, &token, &id, Some(next)).await;
    let expected_next = expected["nextToken"].as_str().unwrap();
    let (_, theirs) = app
        .result_page(ORG_HOST, &token, &csv_first, Some(expected_next))
        .await;
    assert_eq!(page_rows(&second), page_rows(&theirs));

    // The CSV link serves the query's CSV byte for byte.
    let csv = |id: String| {
        let (app, token) = (&app, &token);
        async move {
            let location = link(app, token, &id, None).await;
            reqwest::get(location).await.unwrap().bytes().await.unwrap()
        }
    };
    let (made, written) = (csv(id.clone()).await, csv(csv_first.clone()).await);
    assert_eq!(made.len(), written.len());
    assert!(made == written, "the CSV made from the Arrow file differs");

    // Arrow (the file the query wrote) and Parquet hold the same rows.
    let arrow = arrow_rows(whole_result(&app, &token, &id, ARROW).await);
    let expected = arrow_rows(whole_result(&app, &token, &csv_first, ARROW).await);
    assert_eq!(arrow.num_rows(), ROWS);
    assert_eq!(arrow, expected);
    let parquet = whole_result(&app, &token, &id, PARQUET).await;
    assert_eq!(&parquet[..4], b"PAR1");
    assert_eq!(kinds_of(&app, &id), ["arrows", "csv", "parquet"]);
}

#[tokio::test]
async fn parquet_first_writes_the_parquet_file_alone_and_every_other_form_equals_csv_first() {
    let (app, token) = typed_app(|_| {}).await;
    let csv_first = succeeded(&app, &token, TYPED_SQL).await;
    let id = succeeded_first(&app, &token, TYPED_SQL, "parquet").await;
    assert_eq!(
        kinds_of(&app, &id),
        ["parquet"],
        "the query wrote its Parquet file alone"
    );
    // The file the query wrote holds the rows a CSV-first result's Parquet
    // copy does, with the same types.
    let parquet = parquet_rows(whole_result(&app, &token, &id, PARQUET).await);
    let expected = parquet_rows(whole_result(&app, &token, &csv_first, PARQUET).await);
    assert_eq!(parquet.num_rows(), ROWS);
    assert_eq!(parquet, expected);
    // Its pages and CSV are made from it: the CSV-first ones.
    let (status, page) = app.result_page(ORG_HOST, &token, &id, None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let (_, theirs) = app.result_page(ORG_HOST, &token, &csv_first, None).await;
    assert_eq!(page["resultSet"], theirs["resultSet"]);
    let made = reqwest::get(link(&app, &token, &id, None).await)
        .await
        .unwrap();
    let written = reqwest::get(link(&app, &token, &csv_first, None).await)
        .await
        .unwrap();
    let (made, written) = (made.bytes().await.unwrap(), written.bytes().await.unwrap());
    assert!(
        made == written,
        "the CSV made from the Parquet file differs"
    );
    // And its Arrow copy, from the Parquet file.
    let arrow = arrow_rows(whole_result(&app, &token, &id, ARROW).await);
    let expected = arrow_rows(whole_result(&app, &token, &csv_first, ARROW).await);
    assert_eq!(arrow, expected);
    assert_eq!(kinds_of(&app, &id), ["arrows", "csv", "parquet"]);
}

#[tokio::test]
async fn a_small_arrow_first_result_is_kept_as_any_small_result_and_reuse_keeps_its_way() {
    let (app, token) = typed_app(|_| {}).await;
    // Small: answered within the wait, both forms in the job's row.
    let sql = "SELECT id, name, at_utc FROM typed WHERE id < 3 ORDER BY id";
    let (status, applied, body) = submit_preferring(
        &app,
        &token,
        "wait=10, result-format=arrow",
        &json!({ "query": sql }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(applied.as_deref(), Some("wait=10, result-format=arrow"));
    let id = body["queryId"].as_str().unwrap().to_string();
    assert_eq!(
        page_rows(&body).len(),
        4,
        "the header row and 3 rows: {body}"
    );
    assert!(result_files_of(&app, &id).is_empty(), "kept in the row");
    let arrow = arrow_rows(whole_result(&app, &token, &id, ARROW).await);
    assert_eq!(arrow.num_rows(), 3);

    // A big result reused by a CSV-first caller is served from the Arrow
    // file it has: its CSV is made on that caller's first request.
    let big = succeeded_arrow_first(&app, &token, TYPED_SQL).await;
    let (status, applied, body) =
        submit_preferring(&app, &token, "reuse=3600", &json!({ "query": TYPED_SQL })).await;
    assert_eq!(
        (status, applied.as_deref()),
        (StatusCode::ACCEPTED, Some("reuse=3600"))
    );
    let reused = body["queryId"].as_str().unwrap().to_string();
    let resource = app
        .wait_for(ORG_HOST, &token, &reused, Some("SUCCEEDED"))
        .await;
    assert_eq!(kinds_of(&app, &big), ["arrows"], "{resource}");
    let rows = csv_rows(&app, &token, &reused).await;
    assert_eq!(rows.len(), ROWS + 1);
    let csv_first = succeeded(&app, &token, &format!("{TYPED_SQL} LIMIT {ROWS}")).await;
    assert_eq!(rows, csv_rows(&app, &token, &csv_first).await);
}

#[tokio::test]
async fn a_bad_result_format_is_refused_and_without_typed_results_the_csv_comes_first() {
    let (app, token) = typed_app(|_| {}).await;
    for bad in [
        "result-format=orc",
        "result-format",
        "wait=1, result-format=json",
    ] {
        let (status, _, body) =
            submit_preferring(&app, &token, bad, &json!({ "query": TYPED_SQL })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        let message = "InvalidParameterError: Prefer result-format must be csv, arrow or parquet.";
        assert_eq!(body, json!({ "message": message }));
    }
    // Unauthenticated, the preference changes nothing: the spec's 401.
    let response = app
        .request(reqwest::Method::POST, ORG_HOST, QUERY)
        .header("Prefer", "result-format=arrow")
        .json(&json!({ "query": TYPED_SQL }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        read(response).await,
        (StatusCode::UNAUTHORIZED, unauthorized())
    );

    // Columns Parquet has no type for: written CSV first, not applied.
    let sql = "SELECT id, INTERVAL '1 day' AS span FROM typed";
    let (status, applied, body) = submit_preferring(
        &app,
        &token,
        "result-format=parquet",
        &json!({ "query": sql }),
    )
    .await;
    assert_eq!((status, applied), (StatusCode::ACCEPTED, None), "{body}");
    let id = body["queryId"].as_str().unwrap().to_string();
    app.wait_for(ORG_HOST, &token, &id, Some("SUCCEEDED")).await;
    assert!(
        kinds_of(&app, &id).is_empty(),
        "a small CSV-first result, in its row"
    );
    assert_eq!(csv_rows(&app, &token, &id).await.len(), ROWS + 1);
    // Nor is it written as Parquet when asked later: a 409 that says why
    // (its writer would fail on the first interval), as Arrow it is served.
    let message = format!(
        "Query {id} has columns Parquet cannot hold (intervals with nanoseconds, unions or times \
         of day in seconds). Its result is available as CSV, as JSON pages and as Arrow."
    );
    let result = format!("{QUERY}/{id}/result");
    let requests = [
        (result, Some(PARQUET)),
        (format!("{QUERY}/{id}/csv?format=parquet"), None),
    ];
    each_answers_409(&app, &token, &requests, &message).await;
    let arrow = whole_result(&app, &token, &id, ARROW).await;
    assert_eq!(arrow_rows(arrow).num_rows(), ROWS);

    let (plain, token) = typed_app(|config| config.query.typed_results = false).await;
    let (status, applied, body) = submit_preferring(
        &plain,
        &token,
        "result-format=arrow",
        &json!({ "query": TYPED_SQL }),
    )
    .await;
    assert_eq!(
        (status, applied),
        (StatusCode::ACCEPTED, None),
        "not honoured"
    );
    let id = body["queryId"].as_str().unwrap().to_string();
    plain
        .wait_for(ORG_HOST, &token, &id, Some("SUCCEEDED"))
        .await;
    assert_eq!(kinds_of(&plain, &id), ["csv"]);
}

/// The Arrow file a query wrote first (lz4 by default) is what pyarrow,
/// pandas and DuckDB read from its link: the CSV's rows and types.
#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn an_arrow_first_link_read_by_pyarrow_pandas_and_duckdb_equals_the_csv() {
    let python = test_python();
    let (app, token) = typed_app(|_| {}).await;
    let id = succeeded_arrow_first(&app, &token, TYPED_SQL).await;
    let arrow_link = link(&app, &token, &id, Some("arrow")).await;
    let read = result_client(&python, "read_arrow", &json!({ "url": arrow_link })).await;
    assert_eq!(read["content_type"], ARROW);
    assert_eq!(
        kinds_of(&app, &id),
        ["arrows"],
        "nothing made for an Arrow link"
    );
    let csv = csv_rows(&app, &token, &id).await;
    assert_eq!(csv.len(), ROWS + 1);
    let types = sql_types(&app, &token, &id).await;
    for reader in ["pyarrow", "pandas", "duckdb"] {
        assert_equals_csv(reader, &read["readers"][reader], &csv, &types);
    }
}
