//! The query API over HTTP: states, result pages, CSV links, errors, limits
//! and restarts, on the real server with real parquet in the catalog.

use datafusion::arrow::{
    array::{Int64Array, RecordBatch, StringArray},
    datatypes::{DataType, Field, Schema},
};
use lakehost::{
    clock::{Clock as _, ManualClock},
    store::{
        JobCaps,
        queries::{NewQuery, QueryState},
    },
};
use lakehost_tests::*;
use serde_json::{Value, json};

/// The 404 body of GET /query/{id} for an id the caller cannot see.
fn not_found(operation: &str, id: &str) -> Value {
    json!({
        "message": format!(
            "An error occurred (InvalidRequestException) when calling the {operation} operation: \
             QueryExecution {id} was not found"
        )
    })
}

fn invalid(message: &str) -> Value {
    json!({
        "message": format!(
            "An error occurred (InvalidRequestException) when calling the StartQueryExecution \
             operation: {message}"
        )
    })
}

fn csv_failure() -> Value {
    json!({ "message": "Internal Server Error" })
}

/// MM-DD-YYYY HH:MM:SS
fn is_spec_time(value: &Value) -> bool {
    let text = value.as_str().unwrap_or_default();
    chrono::NaiveDateTime::parse_from_str(text, "%m-%d-%Y %H:%M:%S").is_ok() && text.len() == 19
}

fn admin(app: &TestApp) -> String {
    app.token_for(&["ZoneAdmin"], "[0]")
}

/// `demo_lake_v2.big`: `n` rows of service client 1, ids 1..=n, a note that
/// is NULL on every seventh row and quoted text otherwise.
async fn seed_big(app: &TestApp, n: i64) {
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("note", DataType::Utf8, true),
        Field::new("service_client_id", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            std::sync::Arc::new(Int64Array::from_iter_values(1..=n)),
            std::sync::Arc::new(StringArray::from_iter(
                (1..=n).map(|i| (i % 7 != 0).then(|| format!("say \"{i}\", ok"))),
            )),
            std::sync::Arc::new(Int64Array::from(vec![1; n as usize])),
        ],
    )
    .unwrap();
    app.import(None, "demo_lake_v2", "big", &[batch]).await;
}

#[tokio::test]
async fn a_query_goes_from_submission_to_a_result_page() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let sql = "SELECT trip_id, fare, city, service_client_id FROM trips \
               WHERE service_client_id = 1 ORDER BY trip_id";
    let (status, body) = app.submit(ORG_HOST, &token, &json!({ "query": sql })).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let id = body["queryId"].as_str().unwrap().to_string();
    assert_eq!(body, json!({ "queryId": id }));

    let done = app.wait_for(ORG_HOST, &token, &id, Some("SUCCEEDED")).await;
    assert_eq!(done["query"], sql);
    assert_eq!(done["queryId"], id);
    assert_eq!(done["statementType"], "DML");
    assert!(
        is_spec_time(&done["status"]["submissionDateTime"]),
        "{done}"
    );
    assert!(
        is_spec_time(&done["status"]["completionDateTime"]),
        "{done}"
    );
    assert!(done["status"].get("stateChangeReason").is_none(), "{done}");

    let (status, page) = app.result_page(ORG_HOST, &token, &id, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        page["resultSet"]["Rows"],
        json!([
            { "Data": [
                { "VarCharValue": "trip_id" }, { "VarCharValue": "fare" },
                { "VarCharValue": "city" }, { "VarCharValue": "service_client_id" }
            ] },
            { "Data": [
                { "VarCharValue": "100" }, { "VarCharValue": "0.0" },
                { "VarCharValue": "city-0" }, { "VarCharValue": "1" }
            ] },
            { "Data": [
                { "VarCharValue": "101" }, { "VarCharValue": "1.5" },
                { "VarCharValue": "city-1" }, { "VarCharValue": "1" }
            ] },
        ])
    );
    let columns = &page["resultSet"]["ResultSetMetadata"]["ColumnInfo"];
    let described: Vec<(String, String, String, i64, i64, String, bool)> = columns
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["Name"].as_str().unwrap().into(),
                c["Label"].as_str().unwrap().into(),
                c["Type"].as_str().unwrap().into(),
                c["Precision"].as_i64().unwrap(),
                c["Scale"].as_i64().unwrap(),
                c["Nullable"].as_str().unwrap().into(),
                c["CaseSensitive"].as_bool().unwrap(),
            )
        })
        .collect();
    let col = |n: &str, t: &str, p, s, null: &str, cs| {
        (n.into(), n.into(), t.into(), p, s, null.into(), cs)
    };
    assert_eq!(
        described,
        vec![
            col("trip_id", "bigint", 19, 0, "NOT_NULL", false),
            col("fare", "double", 17, 0, "NULLABLE", false),
            col("city", "varchar", 2_147_483_647, 0, "NULLABLE", true),
            col("service_client_id", "bigint", 19, 0, "NOT_NULL", false),
        ]
    );
    assert!(page.get("nextToken").is_none(), "{page}");
}

#[tokio::test]
async fn nulls_omit_the_value_and_types_use_sql_names() {
    let app = spawn_app().await;
    let token = admin(&app);
    let (id, done) = app
        .run_sql(
            ORG_HOST,
            &token,
            "SELECT CAST(NULL AS VARCHAR) AS nothing, '' AS empty, CAST(12.5 AS DECIMAL(10, 2)) AS amount, \
             DATE '2024-02-29' AS day, TIMESTAMP '2024-02-29 13:14:15.5' AS at, true AS flag, \
             CAST(7 AS INT) AS small",
        )
        .await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
    let (_, page) = app.result_page(ORG_HOST, &token, &id, None).await;
    assert_eq!(
        page["resultSet"]["Rows"][1],
        json!({ "Data": [
            {},
            { "VarCharValue": "" },
            { "VarCharValue": "12.50" },
            { "VarCharValue": "2024-02-29" },
            { "VarCharValue": "2024-02-29 13:14:15.500" },
            { "VarCharValue": "true" },
            { "VarCharValue": "7" },
        ] })
    );
    let types: Vec<(&str, i64, i64)> = page["resultSet"]["ResultSetMetadata"]["ColumnInfo"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["Type"].as_str().unwrap(),
                c["Precision"].as_i64().unwrap(),
                c["Scale"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        types,
        vec![
            ("varchar", 2_147_483_647, 0),
            ("varchar", 2_147_483_647, 0),
            ("decimal", 10, 2),
            ("date", 0, 0),
            ("timestamp", 9, 0),
            ("boolean", 0, 0),
            ("integer", 10, 0),
        ]
    );
}

#[tokio::test]
async fn a_large_result_pages_by_next_token_and_downloads_as_csv() {
    let app = spawn_app().await;
    seed_big(&app, 2500).await;
    let token = admin(&app);
    let (id, done) = app
        .run_sql(ORG_HOST, &token, "SELECT id, note FROM big ORDER BY id")
        .await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");

    let (status, first) = app.result_page(ORG_HOST, &token, &id, None).await;
    assert_eq!(status, StatusCode::OK);
    let rows = page_rows(&first);
    assert_eq!(rows.len(), 1001, "header + 1,000 rows");
    assert_eq!(rows[0], vec![Some("id".into()), Some("note".into())]);
    assert_eq!(
        rows[1],
        vec![Some("1".into()), Some("say \"1\", ok".into())]
    );
    assert_eq!(rows[7], vec![Some("7".into()), None]);
    let token1 = first["nextToken"].as_str().expect("nextToken").to_string();

    let (status, second) = app.result_page(ORG_HOST, &token, &id, Some(&token1)).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    let rows = page_rows(&second);
    assert_eq!(rows.len(), 1000, "no header on later pages");
    assert_eq!(rows[0][0].as_deref(), Some("1001"));
    let token2 = second["nextToken"].as_str().expect("nextToken").to_string();
    let (_, third) = app.result_page(ORG_HOST, &token, &id, Some(&token2)).await;
    let rows = page_rows(&third);
    assert_eq!(rows.len(), 500);
    assert_eq!(rows[499][0].as_deref(), Some("2500"));
    assert!(third.get("nextToken").is_none());
    assert_eq!(
        third["resultSet"]["ResultSetMetadata"],
        first["resultSet"]["ResultSetMetadata"]
    );

    // A token that was not issued for this query is refused.
    let forged = token1.replace('.', "x.");
    let (status, body) = app.result_page(ORG_HOST, &token, &id, Some(&forged)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // CSV: 302 with Location = body.location: an S3-style presigned GET on
    // the storage endpoint (another origin than the API's, so clients that
    // follow the redirect drop their Authorization header).
    let response = app
        .request(reqwest::Method::GET, ORG_HOST, &format!("{QUERY}/{id}/csv"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let (_, body) = read(response).await;
    assert_eq!(body, json!({ "location": location }));
    let link = url::Url::parse(&location).unwrap();
    assert!(
        location.starts_with(&format!(
            "{}/lakehost-uploads/_results/demo/",
            app.upload_endpoint()
        )),
        "{location}"
    );
    // Links come from the configured storage endpoint alone: what a client
    // says of the host it reached never gets into them.
    let forwarded = app
        .request(reqwest::Method::GET, ORG_HOST, &format!("{QUERY}/{id}/csv"))
        .bearer_auth(&token)
        .header("X-Forwarded-Host", "evil.example")
        .header("X-Forwarded-Proto", "https")
        .header("Forwarded", "host=evil.example;proto=https")
        .send()
        .await
        .unwrap();
    assert_eq!(forwarded.status(), StatusCode::FOUND);
    let forwarded_location = forwarded.headers()["location"].to_str().unwrap();
    assert_eq!(
        url::Url::parse(forwarded_location).unwrap().origin(),
        link.origin(),
        "{forwarded_location}"
    );
    assert!(!forwarded_location.contains("evil"), "{forwarded_location}");
    let params: std::collections::BTreeMap<String, String> =
        link.query_pairs().into_owned().collect();
    assert_eq!(
        params.keys().collect::<Vec<_>>(),
        [
            "X-Amz-Algorithm",
            "X-Amz-Credential",
            "X-Amz-Date",
            "X-Amz-Expires",
            "X-Amz-Signature",
            "X-Amz-SignedHeaders"
        ]
    );
    assert_eq!(params["X-Amz-Algorithm"], "AWS4-HMAC-SHA256");
    assert_eq!(params["X-Amz-Expires"], "900");

    let response = app.http.get(link.clone()).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let length: usize = response.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let csv = response.text().await.unwrap();
    assert_eq!(csv.len(), length);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2501);
    assert_eq!(lines[0], "\"id\",\"note\"");
    assert_eq!(lines[1], "\"1\",\"say \"\"1\"\", ok\"");
    assert_eq!(lines[7], "\"7\",");
    assert_eq!(lines[2500], "\"2500\",\"say \"\"2500\"\", ok\"");

    // HEAD: the length without the body; a Range: 206 with exactly those bytes.
    let head = app.http.head(link.clone()).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(
        head.headers()["content-length"],
        length.to_string().as_str()
    );
    assert_eq!(head.headers()["accept-ranges"], "bytes");
    let partial = app
        .http
        .get(link.clone())
        .header("Range", "bytes=5-14")
        .send()
        .await
        .unwrap();
    assert_eq!(partial.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        partial.headers()["content-range"],
        format!("bytes 5-14/{length}").as_str()
    );
    assert_eq!(partial.text().await.unwrap(), csv[5..15]);
    let tail = app
        .http
        .get(link.clone())
        .header("Range", "bytes=-6")
        .send()
        .await
        .unwrap();
    assert_eq!(tail.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(tail.text().await.unwrap(), csv[length - 6..]);
    let beyond = app
        .http
        .get(link.clone())
        .header("Range", format!("bytes={length}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(beyond.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert!(
        beyond
            .text()
            .await
            .unwrap()
            .contains("<Code>InvalidRange</Code>")
    );

    // Refusals in S3's XML shape: a bearer token beside the signature, another
    // object under the same signature, a longer expiry, a changed signature.
    let s3_error = |code: &str| format!("<Code>{code}</Code>");
    let response = app
        .http
        .get(link.clone())
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains(&s3_error("InvalidArgument"))
    );
    let mut other_object = link.clone();
    other_object.set_path(&link.path().replace(&id, &uuid_like()));
    let mut longer = link.clone();
    longer.set_query(Some(
        &link
            .query()
            .unwrap()
            .replace("X-Amz-Expires=900", "X-Amz-Expires=800"),
    ));
    let mut resigned = link.clone();
    let signature = &params["X-Amz-Signature"];
    let flipped = format!(
        "{}{}",
        &signature[..63],
        if signature.ends_with('0') { "1" } else { "0" }
    );
    resigned.set_query(Some(
        &link.query().unwrap().replace(signature.as_str(), &flipped),
    ));
    for forged in [other_object, longer, resigned] {
        let response = app.http.get(forged.clone()).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{forged}");
        let body = response.text().await.unwrap();
        assert!(body.starts_with("<?xml"), "{body}");
        assert!(body.contains(&s3_error("SignatureDoesNotMatch")), "{body}");
    }

    // 15 minutes later the link has expired; a new call gives a new link.
    app.clock.advance(chrono::Duration::seconds(14 * 60 + 59));
    let response = app.http.get(link.clone()).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "still valid at 14:59");
    app.clock.advance(chrono::Duration::seconds(2));
    let response = app.http.get(link.clone()).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body = response.text().await.unwrap();
    assert!(body.contains(&s3_error("AccessDenied")), "{body}");
    assert!(
        body.contains("<Message>Request has expired</Message>"),
        "{body}"
    );
}

#[tokio::test]
async fn bodies_and_sql_that_cannot_run_get_400() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let token = admin(&app);
    let not_json = json!({ "message": "JSON not well formed." });
    for body in ["", "{", "not json", "[1, 2]", "\"SELECT 1\""] {
        let response = app
            .request(reqwest::Method::POST, ORG_HOST, QUERY)
            .bearer_auth(&token)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            read(response).await,
            (StatusCode::BAD_REQUEST, not_json.clone()),
            "{body:?}"
        );
    }
    let missing = json!({
        "message": "MissingParameterError: \"query\" parameter missing from request."
    });
    for body in [
        json!({}),
        json!({ "database": "demo_lake_v2" }),
        json!({ "query": null }),
    ] {
        assert_eq!(
            app.submit(ORG_HOST, &token, &body).await,
            (StatusCode::BAD_REQUEST, missing.clone()),
            "{body}"
        );
    }
    let (status, body) = app
        .submit(ORG_HOST, &token, &json!({ "query": "SELEC 1" }))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "An error occurred (InvalidRequestException) when calling the StartQueryExecution operation: "
        ),
        "{message}"
    );
    let (status, body) = app
        .submit(
            ORG_HOST,
            &token,
            &json!({ "query": "SELECT * FROM no_such_table" }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"].as_str().unwrap().contains("no_such_table"),
        "{body}"
    );
    assert_eq!(
        app.submit(
            ORG_HOST,
            &token,
            &json!({ "query": "SELECT 1", "database": "nope" })
        )
        .await,
        (
            StatusCode::BAD_REQUEST,
            invalid("Database 'nope' does not exist")
        )
    );
    assert_eq!(
        app.submit(ORG_HOST, &token, &json!({ "query": "SELECT 1; SELECT 2" }))
            .await,
        (
            StatusCode::BAD_REQUEST,
            invalid("exactly one SQL statement is allowed per query")
        )
    );
    // Another database than the default, by name.
    let rows = {
        let id = app
            .submit(
                ORG_HOST,
                &token,
                &json!({ "query": "SELECT count(*) FROM summary", "database": "demo_insights" }),
            )
            .await
            .1["queryId"]
            .as_str()
            .unwrap()
            .to_string();
        app.wait_for(ORG_HOST, &token, &id, Some("SUCCEEDED")).await;
        page_rows(&app.result_page(ORG_HOST, &token, &id, None).await.1)
    };
    assert_eq!(rows[1], vec![Some("3".to_string())]);
}

#[tokio::test]
async fn unknown_and_foreign_queries_are_not_found() {
    let app = spawn_app().await;
    let token = admin(&app);
    let unknown = "3f1e7c52-0000-4000-8000-000000000000";
    assert_eq!(
        app.query_status(ORG_HOST, &token, unknown).await,
        (
            StatusCode::NOT_FOUND,
            not_found("GetQueryExecution", unknown)
        )
    );
    let response = app
        .request(
            reqwest::Method::DELETE,
            ORG_HOST,
            &format!("{QUERY}/{unknown}"),
        )
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        read(response).await,
        (
            StatusCode::NOT_FOUND,
            not_found("StopQueryExecution", unknown)
        )
    );
    assert_eq!(
        app.result_page(ORG_HOST, &token, unknown, None).await,
        (StatusCode::NOT_FOUND, not_found("GetQueryResults", unknown))
    );
    assert_eq!(
        app.get(ORG_HOST, &format!("{QUERY}/{unknown}/csv"), Some(&token))
            .await,
        (StatusCode::INTERNAL_SERVER_ERROR, csv_failure())
    );

    // Another user's query: 404 everywhere, 500 for the CSV.
    let (id, _) = app.run_sql(ORG_HOST, &token, "SELECT 1 AS one").await;
    let stranger = app.token_of("user-2", &["ZoneAdmin"], "[0]");
    assert_eq!(
        app.query_status(ORG_HOST, &stranger, &id).await,
        (StatusCode::NOT_FOUND, not_found("GetQueryExecution", &id))
    );
    assert_eq!(
        app.result_page(ORG_HOST, &stranger, &id, None).await,
        (StatusCode::NOT_FOUND, not_found("GetQueryResults", &id))
    );
    let response = app
        .request(reqwest::Method::DELETE, ORG_HOST, &format!("{QUERY}/{id}"))
        .bearer_auth(&stranger)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        app.get(ORG_HOST, &format!("{QUERY}/{id}/csv"), Some(&stranger))
            .await,
        (StatusCode::INTERNAL_SERVER_ERROR, csv_failure())
    );
    // The owner still sees it; a zone's API does not.
    assert_eq!(
        app.query_status(ORG_HOST, &token, &id).await.0,
        StatusCode::OK
    );
    let zone_token = app.zone_token_for("lab", &["ZoneAdmin"], "[0]");
    assert_eq!(
        app.query_status("lab.demo.api.localhost", &zone_token, &id)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn results_are_tied_to_the_callers_roles_and_service_clients() {
    let app = spawn_app().await;
    seed_demo_lake(&app).await;
    let before = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    let (id, done) = app
        .run_sql(
            ORG_HOST,
            &before,
            "SELECT count(*) FROM trips WHERE service_client_id IN (1, 901)",
        )
        .await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
    assert_eq!(
        app.result_page(ORG_HOST, &before, &id, None).await.0,
        StatusCode::OK
    );
    for after in [
        app.token_for(&["OwnServiceClientAnalyst"], "[1 2]"),
        app.token_for(&["AllServiceClientAnalyst"], "[1]"),
    ] {
        // The query itself is still the caller's ...
        assert_eq!(
            app.query_status(ORG_HOST, &after, &id).await.0,
            StatusCode::OK
        );
        // ... but its result is out of reach.
        assert_eq!(
            app.result_page(ORG_HOST, &after, &id, None).await,
            (StatusCode::FORBIDDEN, json!({ "message": DATA_DENIED }))
        );
        assert_eq!(
            app.get(ORG_HOST, &format!("{QUERY}/{id}/csv"), Some(&after))
                .await,
            (StatusCode::INTERNAL_SERVER_ERROR, csv_failure())
        );
    }
}

#[tokio::test]
async fn result_and_csv_of_unfinished_or_failed_queries() {
    let app = spawn_app().await;
    let token = admin(&app);
    // Fails at run time (division by zero is found while executing).
    let (id, done) = app
        .run_sql(
            ORG_HOST,
            &token,
            "SELECT 1 / (value - value) FROM generate_series(1, 3)",
        )
        .await;
    assert_eq!(done["status"]["state"], "FAILED", "{done}");
    let reason = done["status"]["stateChangeReason"].as_str().unwrap();
    assert!(reason.to_lowercase().contains("divide by zero"), "{reason}");
    assert!(is_spec_time(&done["status"]["completionDateTime"]));
    let (status, body) = app.result_page(ORG_HOST, &token, &id, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        app.get(ORG_HOST, &format!("{QUERY}/{id}/csv"), Some(&token))
            .await,
        (StatusCode::INTERNAL_SERVER_ERROR, csv_failure())
    );
}

#[tokio::test]
async fn token_claims_a_query_endpoint_needs() {
    let app = spawn_app().await;
    // No service_client_id claim: 500 with the spec's message and a request code.
    let mut claims = app.valid_claims("demo");
    claims.as_object_mut().unwrap().remove("service_client_id");
    let token = app.sign("demo", &claims);
    let (status, body) = app
        .submit(ORG_HOST, &token, &json!({ "query": "SELECT 1" }))
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        body["message"].as_str().unwrap().starts_with(
            "An Internal Server Error occurred. Please contact support if this error persists."
        ),
        "{body}"
    );
    // Malformed claim: the same.
    claims["service_client_id"] = json!("1,2");
    let token = app.sign("demo", &claims);
    let (status, _) = app
        .submit(ORG_HOST, &token, &json!({ "query": "SELECT 1" }))
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    // Missing scope: 403 Forbidden; read scope cannot submit.
    let mut claims = app.valid_claims("demo");
    claims["scope"] = json!("query:read");
    let token = app.sign("demo", &claims);
    assert_eq!(
        app.submit(ORG_HOST, &token, &json!({ "query": "SELECT 1" }))
            .await,
        (StatusCode::FORBIDDEN, json!({ "message": "Forbidden" }))
    );
    // No token: 401.
    let response = app
        .request(reqwest::Method::POST, ORG_HOST, QUERY)
        .json(&json!({ "query": "SELECT 1" }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        read(response).await,
        (StatusCode::UNAUTHORIZED, unauthorized())
    );
}

/// A query that runs until it is stopped: ten billion joined rows.
const RUNAWAY: &str = "SELECT sum(a.value * b.value) FROM generate_series(1, 100000) a CROSS JOIN generate_series(1, 100000) b";

#[tokio::test]
async fn queued_running_cancelled_with_one_worker() {
    let app = spawn_app_with(|c| c.query.workers = 1).await;
    let token = admin(&app);
    let long = app.submit_sql(ORG_HOST, &token, RUNAWAY).await;
    app.wait_for(ORG_HOST, &token, &long, Some("RUNNING")).await;
    // The only worker is busy: the next query waits QUEUED.
    let next = app
        .submit_sql(ORG_HOST, &token, "SELECT 42 AS answer")
        .await;
    let (_, queued) = app.query_status(ORG_HOST, &token, &next).await;
    assert_eq!(queued["status"]["state"], "QUEUED", "{queued}");
    assert!(queued["status"].get("completionDateTime").is_none());
    // Cancelling a QUEUED query: it never runs.
    let third = app.submit_sql(ORG_HOST, &token, "SELECT 3").await;
    let response = app
        .request(
            reqwest::Method::DELETE,
            ORG_HOST,
            &format!("{QUERY}/{third}"),
        )
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "", "empty body");

    // DELETE stops the running query; the worker moves on to the queued one.
    let response = app
        .request(
            reqwest::Method::DELETE,
            ORG_HOST,
            &format!("{QUERY}/{long}"),
        )
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let cancelled = app.wait_for(ORG_HOST, &token, &long, None).await;
    assert_eq!(cancelled["status"]["state"], "CANCELLED");
    assert!(is_spec_time(&cancelled["status"]["completionDateTime"]));
    let answered = app
        .wait_for(ORG_HOST, &token, &next, Some("SUCCEEDED"))
        .await;
    assert_eq!(answered["status"]["state"], "SUCCEEDED");
    let (_, third_now) = app.query_status(ORG_HOST, &token, &third).await;
    assert_eq!(third_now["status"]["state"], "CANCELLED");
    // DELETE of a final query changes nothing.
    let response = app
        .request(
            reqwest::Method::DELETE,
            ORG_HOST,
            &format!("{QUERY}/{next}"),
        )
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        app.query_status(ORG_HOST, &token, &next).await.1["status"]["state"],
        "SUCCEEDED"
    );
}

#[tokio::test]
async fn a_runaway_query_fails_alone_and_the_server_keeps_answering() {
    let app = spawn_app_with(|c| c.query.time_limit_s = 2).await;
    let token = admin(&app);
    let runaway = app.submit_sql(ORG_HOST, &token, RUNAWAY).await;
    app.wait_for(ORG_HOST, &token, &runaway, Some("RUNNING"))
        .await;
    // While it burns CPU, other queries still run and answer.
    let rows = app.rows_of(ORG_HOST, &token, "SELECT 1 + 1 AS two").await;
    assert_eq!(rows, vec![vec![Some("2".to_string())]]);
    let done = app.wait_for(ORG_HOST, &token, &runaway, None).await;
    assert_eq!(done["status"]["state"], "FAILED", "{done}");
    assert_eq!(
        done["status"]["stateChangeReason"],
        "Query exhausted its time limit of 2 seconds."
    );
}

#[tokio::test]
async fn a_query_over_its_memory_limit_fails_alone() {
    let app = spawn_app_with(|c| c.query.memory_limit_bytes = 16 << 20).await;
    let token = admin(&app);
    let (_, done) = app
        .run_sql(
            ORG_HOST,
            &token,
            "SELECT array_agg(value) FROM generate_series(1, 20000000)",
        )
        .await;
    assert_eq!(done["status"]["state"], "FAILED", "{done}");
    let reason = done["status"]["stateChangeReason"].as_str().unwrap();
    assert!(reason.contains("Resources exhausted"), "{reason}");
    // A sort beyond the limit spills to disk and succeeds.
    let rows = app
        .rows_of(
            ORG_HOST,
            &token,
            "SELECT max(r) FROM (SELECT row_number() OVER (ORDER BY value DESC) AS r \
             FROM generate_series(1, 3000000))",
        )
        .await;
    assert_eq!(rows, vec![vec![Some("3000000".to_string())]]);
}

#[tokio::test]
async fn a_query_running_when_its_server_died_ends_failed_and_is_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let first = spawn_in(dir.path().to_path_buf(), clock.clone(), |_| {}).await;
    let token = admin(&first);
    seed_big(&first, 2500).await;
    let sql = "INSERT INTO demo_sandbox.copied SELECT id, service_client_id FROM big";
    // A table to insert into; the insert is the query that gets interrupted.
    first
        .rows_of(
            ORG_HOST,
            &token,
            "CREATE TABLE demo_sandbox.copied (id BIGINT, service_client_id BIGINT)",
        )
        .await;
    // Simulate a replica that claimed the insert and died: a RUNNING job whose
    // lease is held by a worker that no longer exists.
    let grant = json!({ "roles": ["ZoneAdmin"], "service_clients": [0] });
    let now = chrono::Utc::now().timestamp_micros();
    let job = NewQuery {
        id: "6b0e0f9e-dead-4000-8000-000000000001".into(),
        org: "demo".into(),
        zone: None,
        owner_sub: "user-1".into(),
        access_fingerprint: lakehost::auth::claims::access_fingerprint(&["ZoneAdmin".into()], &[0]),
        sql: sql.into(),
        database: "demo_lake_v2".into(),
        statement_type: "DML".into(),
        access_json: grant.to_string(),
        result_first: Default::default(),
    };
    first.stop_abruptly().await;
    let store = lakehost::store::Store::open_sqlite(&dir.path().join("lakehost.db"))
        .await
        .unwrap();
    let lease_end = clock.now().timestamp_micros() + 30_000_000;
    store.insert_query(&job, now).await.unwrap();
    let claimed = store
        .claim_query(
            "dead-worker",
            clock.now().timestamp_micros(),
            lease_end,
            JobCaps::NONE,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.state, QueryState::Running);

    // A new server: the job keeps its lease until it runs out ...
    let second = spawn_in(dir.path().to_path_buf(), clock.clone(), |_| {}).await;
    let token = admin(&second);
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let (_, still) = second.query_status(ORG_HOST, &token, &job.id).await;
    assert_eq!(still["status"]["state"], "RUNNING", "{still}");
    // ... then it ends FAILED, saying why, and is not run again (it may be
    // what killed its server).
    clock.advance(chrono::Duration::seconds(31));
    let done = second.wait_for(ORG_HOST, &token, &job.id, None).await;
    assert_eq!(done["status"]["state"], "FAILED", "{done}");
    assert_eq!(
        done["status"]["stateChangeReason"],
        lakehost::query::service::ABANDONED_QUERY,
        "{done}"
    );
    let rows = second
        .rows_of(ORG_HOST, &token, "SELECT count(*) FROM demo_sandbox.copied")
        .await;
    assert_eq!(rows, vec![vec![Some("0".into())]], "nothing inserted");
    let job_row = store.query_job(&job.id).await.unwrap().unwrap();
    assert_eq!(job_row.attempts, 1, "never claimed again");
    // A query queued before a restart is not lost either.
    let queued = NewQuery {
        id: "6b0e0f9e-dead-4000-8000-000000000002".into(),
        sql: "SELECT count(*) FROM big".into(),
        ..job.clone()
    };
    drop(second);
    store.insert_query(&queued, now).await.unwrap();
    let third = spawn_in(dir.path().to_path_buf(), clock.clone(), |_| {}).await;
    let token = admin(&third);
    let done = third.wait_for(ORG_HOST, &token, &queued.id, None).await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
    let (_, page) = third.result_page(ORG_HOST, &token, &queued.id, None).await;
    assert_eq!(page_rows(&page)[1], vec![Some("2500".to_string())]);
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_postgres),
    ignore = "needs Postgres: eval \"$(.ci/postgres)\" first (README, Tests)"
)]
async fn the_query_api_runs_on_a_postgres_store() {
    let url = fresh_postgres_url().await;
    let app = spawn_app_with(|c| c.storage.database_url = Some(url)).await;
    seed_demo_lake(&app).await;
    let analyst = app.token_for(&["OwnServiceClientAnalyst"], "[1]");
    assert_eq!(
        app.submit(
            ORG_HOST,
            &analyst,
            &json!({ "query": "SELECT count(*) FROM trips" })
        )
        .await,
        (StatusCode::FORBIDDEN, json!({ "message": DATA_DENIED }))
    );
    let rows = app
        .rows_of(
            ORG_HOST,
            &analyst,
            "SELECT count(*) FROM trips WHERE service_client_id IN (1, 901)",
        )
        .await;
    assert_eq!(rows, vec![vec![Some("4".to_string())]]);
    let rows = app
        .rows_of(
            ORG_HOST,
            &analyst,
            "CREATE TABLE demo_sandbox.mine AS SELECT trip_id, service_client_id FROM trips \
             WHERE service_client_id = 1",
        )
        .await;
    assert_eq!(rows, vec![vec![Some("2".to_string())]]);
    let rows = app
        .rows_of(
            ORG_HOST,
            &analyst,
            "INSERT INTO demo_sandbox.mine VALUES (7, 1)",
        )
        .await;
    assert_eq!(rows, vec![vec![Some("1".to_string())]]);
    let rows = app
        .rows_of(
            ORG_HOST,
            &analyst,
            "SELECT trip_id FROM demo_sandbox.mine WHERE service_client_id IN (1, 901) ORDER BY trip_id",
        )
        .await;
    assert_eq!(
        rows,
        vec![
            vec![Some("7".to_string())],
            vec![Some("100".to_string())],
            vec![Some("101".to_string())]
        ]
    );
}

#[tokio::test]
async fn another_replica_serves_the_same_pages_from_the_result_file() {
    // The replica that ran a query serves small results from memory; any
    // other replica reads the file. Both must give the same pages.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let first = spawn_in(dir.path().to_path_buf(), clock.clone(), |_| {}).await;
    seed_big(&first, 2500).await;
    let token = admin(&first);
    let (id, done) = first
        .run_sql(ORG_HOST, &token, "SELECT id, note FROM big ORDER BY id")
        .await;
    assert_eq!(done["status"]["state"], "SUCCEEDED", "{done}");
    let second = spawn_in(dir.path().to_path_buf(), clock.clone(), |_| {}).await;
    let other_token = admin(&second);
    let mut next: Option<String> = None;
    let mut pages = 0;
    loop {
        let (status, here) = first
            .result_page(ORG_HOST, &token, &id, next.as_deref())
            .await;
        let (other_status, there) = second
            .result_page(ORG_HOST, &other_token, &id, next.as_deref())
            .await;
        assert_eq!((status, other_status), (StatusCode::OK, StatusCode::OK));
        assert_eq!(here, there, "page {pages}");
        pages += 1;
        match here.get("nextToken").and_then(Value::as_str) {
            Some(token) => next = Some(token.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
}
