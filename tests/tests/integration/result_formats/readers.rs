//! Typed results as their readers get them: pyarrow, pandas and DuckDB
//! over the signed links and the API, HEAD and ranges on the Parquet file,
//! and the links of a lake on S3.

use super::*;

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

/// A result whose columns all read back from its CSV (no timestamps) has
/// no Arrow copy; asked for Parquet first, it is read straight from the CSV
/// into the Parquet file (no Arrow file made), which pyarrow, pandas and
/// DuckDB read as the CSV, with the same types as the Arrow read-back.
#[tokio::test]
#[cfg_attr(
    not(lakehost_has_python),
    ignore = "needs the Python clients: eval \"$(.ci/python)\" first (README, Tests)"
)]
async fn parquet_asked_for_first_is_read_straight_from_the_csv_and_equals_it() {
    let python = test_python();
    let (app, token) = typed_app(|_| {}).await;
    let sql = "SELECT id, small, big, fare, ratio, amount, exact, name, flag, day, \
               service_client_id FROM typed ORDER BY id";
    let id = succeeded(&app, &token, sql).await;
    let csv = csv_rows(&app, &token, &id).await;
    assert_eq!(csv.len(), ROWS + 1);
    let types = sql_types(&app, &token, &id).await;
    let parquet_link = link(&app, &token, &id, Some("parquet")).await;
    assert_eq!(
        result_files_of(&app, &id)
            .iter()
            .map(|name| name.rsplit('.').next().unwrap().to_string())
            .collect::<Vec<_>>(),
        ["csv", "parquet"],
        "no Arrow copy on the way"
    );
    let read = result_client(&python, "read_parquet", &json!({ "url": parquet_link })).await;
    assert_eq!(read["row_groups"], 1);
    for reader in ["pyarrow", "pandas", "duckdb"] {
        assert_equals_csv(reader, &read["readers"][reader], &csv, &types);
    }
    // The Arrow copy read back afterwards has the Parquet file's types.
    let arrow_link = link(&app, &token, &id, Some("arrow")).await;
    let arrow = result_client(&python, "read_arrow", &json!({ "url": arrow_link })).await;
    let parquet_types = &read["readers"]["pyarrow"]["types"];
    assert_eq!(parquet_types, &arrow["readers"]["pyarrow"]["types"]);
    assert_eq!(parquet_types.as_array().map(Vec::len), Some(11), "{read}");
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
