//! The lake on S3 (`storage.lake_url = "s3://bucket/prefix"`): data files,
//! results and CSV links live in a real S3-compatible server (moto's, started
//! by `.ci/s3`; credentials and endpoint from the standard `AWS_*` variables).

use lakehost_tests::*;
use serde_json::json;

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_s3),
    ignore = "needs an S3 server: eval \"$(.ci/s3)\" first (README, Tests)"
)]
async fn queries_read_and_write_a_lake_on_s3_and_csv_links_are_presigned() {
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
    let app = spawn_app_with(|c| c.storage.lake_url = Some(lake_url)).await;
    seed_demo_lake(&app).await;
    let listing = http
        .get(format!(
            "{endpoint}/{bucket}?list-type=2&prefix=lake/demo_lake_v2/trips/"
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        listing.contains("service_client_id=1/") && listing.contains(".parquet"),
        "{listing}"
    );
    assert!(
        !app.data_dir.join("lake").join("demo_lake_v2").exists(),
        "nothing on local disk"
    );

    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    assert_eq!(
        app.submit(
            ORG_HOST,
            &analyst,
            &json!({ "query": "SELECT * FROM trips" })
        )
        .await,
        (StatusCode::FORBIDDEN, json!({ "message": DATA_DENIED }))
    );
    let rows = app
        .rows_of(
            ORG_HOST,
            &analyst,
            "CREATE TABLE demo_sandbox.mine AS SELECT trip_id, service_client_id FROM trips \
             WHERE service_client_id IN (1, 901)",
        )
        .await;
    assert_eq!(rows, vec![vec![Some("4".to_string())]]);
    let (id, done) = app
        .run_sql(
            ORG_HOST,
            &analyst,
            "SELECT trip_id FROM demo_sandbox.mine WHERE service_client_id IN (1, 901) ORDER BY trip_id",
        )
        .await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
    let (_, page) = app.result_page(ORG_HOST, &analyst, &id, None).await;
    assert_eq!(
        page_rows(&page),
        vec![
            vec![Some("trip_id".to_string())],
            vec![Some("100".to_string())],
            vec![Some("101".to_string())],
            vec![Some("90100".to_string())],
            vec![Some("90101".to_string())],
        ]
    );

    // The CSV link is S3's own presigned GET, valid 15 minutes.
    let response = app
        .request(reqwest::Method::GET, ORG_HOST, &format!("{QUERY}/{id}/csv"))
        .bearer_auth(&analyst)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let (_, body) = read(response).await;
    assert_eq!(body, json!({ "location": location }));
    let link = url::Url::parse(&location).unwrap();
    assert!(location.starts_with(&endpoint), "{location}");
    let params: std::collections::BTreeMap<String, String> =
        link.query_pairs().into_owned().collect();
    assert_eq!(params.get("X-Amz-Expires").map(String::as_str), Some("900"));
    assert!(params.contains_key("X-Amz-Signature"), "{location}");
    let csv = http.get(location).send().await.unwrap();
    assert_eq!(csv.status(), StatusCode::OK);
    assert_eq!(
        csv.text().await.unwrap(),
        "\"trip_id\"\n\"100\"\n\"101\"\n\"90100\"\n\"90101\"\n"
    );
}
