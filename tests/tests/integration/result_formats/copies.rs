//! When each typed copy is made (while the query runs, read back from the
//! CSV, or on a Parquet request), a result kept in its job's row, and a
//! result missing its copy (409, nothing made).

use super::*;

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
    let requests = [
        (result.clone(), Some(PARQUET)),
        (result.clone(), Some(ARROW)),
        (format!("{QUERY}/{id}/csv?format=parquet"), None),
        (format!("{QUERY}/{id}/csv?format=arrow"), None),
    ];
    each_answers_409(&app, &token, &requests, &message).await;
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
    let requests = [(result.clone(), Some(ARROW)), (result, Some(PARQUET))];
    each_answers_409(&app, &token, &requests, &message).await;
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
    // copy; the first Parquet request reads the CSV straight into the
    // Parquet file, with no Arrow copy on the way; Arrow is read back when
    // it is asked for.
    assert!(
        !app.lake_has(&arrow_path).await,
        "read back on first request only"
    );
    assert!(
        !app.lake_has(&parquet_path).await,
        "made on first request only"
    );
    link(&app, &token, &id, Some("parquet")).await;
    assert!(app.lake_has(&parquet_path).await);
    assert!(!app.lake_has(&arrow_path).await, "no Arrow copy made");
    link(&app, &token, &id, Some("arrow")).await;
    assert!(app.lake_has(&arrow_path).await);

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

/// A CSV in the lake that no longer reads back as its columns (altered on
/// disk) fails a first Parquet request as any internal failure answers, and
/// leaves no Parquet file (nor Arrow file) behind; asking again fails the
/// same way instead of serving half a file.
#[tokio::test]
async fn a_csv_that_no_longer_reads_back_fails_parquet_cleanly_and_makes_nothing() {
    let (app, token) = typed_app(|c| c.query.result_in_store_bytes = 0).await;
    let id = succeeded(&app, &token, "SELECT id, amount FROM typed ORDER BY id").await;
    let csv_path = csv_path_of(&app, &token, &id).await;
    let csv_file = app.data_dir.join("lake").join(&csv_path);
    let text = std::fs::read_to_string(&csv_file).unwrap();
    // The same length, so only the read-back can tell: an id that is no integer.
    std::fs::write(&csv_file, text.replacen("\"1\"", "\"x\"", 1)).unwrap();
    // The spec's unexpected-error 500 (the link's `format=` form and the
    // download are beyond the spec's CSV link, whose failures say less).
    let spec_500 =
        "An Internal Server Error occurred. Please contact support if this error persists.";
    for _ in 0..2 {
        for (path, accept) in [
            (format!("{QUERY}/{id}/csv?format=parquet"), None),
            (format!("{QUERY}/{id}/result"), Some(PARQUET)),
        ] {
            let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
            let (status, body) = read(get_with(&app, &token, &path, &headers).await).await;
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{path}");
            let message = body["message"].as_str().unwrap_or_default();
            assert!(
                message.starts_with(&format!("{spec_500} Request code: ")),
                "{path}: {body}"
            );
        }
        assert_eq!(result_files_of(&app, &id), [format!("{id}-1.csv")]);
    }
}
