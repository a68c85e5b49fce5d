//! Load commits over HTTP (spec "POST /load/{load_id}/commit", "Load
//! states", "Load failures"): the request errors, the pipeline's verdicts
//! with their ErrorType and ErrorMessages, the rows in queries after SUCCESS,
//! nothing after FAIL, and the limits of misbehaving steps.

use std::sync::Arc;

use datafusion::arrow::{
    array::{Int64Array, RecordBatch, StringArray},
    datatypes::{DataType, Field, Schema},
};
use lakehost_tests::*;
use serde_json::{Value, json};

fn message(text: &str) -> Value {
    json!({ "message": text })
}

async fn new_load(app: &TestApp, token: &str, body: Value) -> String {
    let mut request = json!({"load_type": "APPEND_ONLY", "table_name": "trips"});
    request
        .as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    app.create_load(token, &request).await
}

/// A batch of non-null bigint columns.
fn bigint_batch(columns: &[(&str, &[i64])]) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, _)| Field::new(*name, DataType::Int64, false))
        .collect();
    let arrays = columns
        .iter()
        .map(|(_, values)| Arc::new(Int64Array::from(values.to_vec())) as _)
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
}

/// Commits and waits for the end; returns the final Load resource.
async fn commit_and_wait(app: &TestApp, token: &str, load_id: &str, check_sum: Value) -> Value {
    let (status, body) = app
        .commit(
            token,
            load_id,
            &json!({ "check_sum": check_sum }).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body, message("Load commit initiated."));
    app.wait_for_load(token, load_id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_load_is_queryable_with_its_load_id_and_its_staging_is_gone() {
    let app = spawn_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let id = new_load(&app, &admin, json!({})).await;
    app.stage_file(&admin, &id, "part_1", &trips_batch(&[1, 2], 5))
        .await;
    app.stage_file(&admin, &id, "part_2", &trips_batch(&[5], 5))
        .await;
    let (status, body) = app
        .get(ORG_HOST, &format!("{LOAD}/{id}"), Some(&admin))
        .await;
    assert_eq!(
        (status, &body["LoadStatus"]),
        (StatusCode::OK, &json!("OPEN"))
    );

    let done = commit_and_wait(
        &app,
        &admin,
        &id,
        json!({"count(*)": 15, "sum(fare)": 45.0, "min(city)": "city-0"}),
    )
    .await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    assert!(done.get("ErrorType").is_none());
    let rows = app
        .rows_of(
            ORG_HOST,
            &admin,
            "SELECT service_client_id, count(*), min(\"svc$load_id\") FROM trips \
             GROUP BY service_client_id ORDER BY service_client_id",
        )
        .await;
    let expected: Vec<Vec<Option<String>>> = [1, 2, 5]
        .iter()
        .map(|c| vec![Some(c.to_string()), Some("5".into()), Some(id.clone())])
        .collect();
    assert_eq!(rows, expected);
    let staged = app
        .staged_object(&json!({"path": format!("demo/-/{id}/part_1.parquet")}))
        .await;
    assert!(staged.is_none(), "staging of an ended load is removed");

    // A second commit, or another file, is refused.
    let (status, body) = app
        .commit(&admin, &id, r#"{"check_sum": {"count(*)": 15}}"#)
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            message("InvalidParameter: Load Already Committed.")
        )
    );
    let (status, body) = app
        .post_raw(ORG_HOST, &format!("{LOAD}/{id}/file"), &admin, "")
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            message("InvalidParameter: Load Already Committed.")
        )
    );

    // A second load appends to the same table.
    let second = new_load(&app, &admin, json!({})).await;
    app.stage_file(&admin, &second, "part_1", &trips_batch(&[3], 4))
        .await;
    let done = commit_and_wait(&app, &admin, &second, json!({"count(*)": 4})).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let rows = app
        .rows_of(
            ORG_HOST,
            &admin,
            "SELECT count(*), count(DISTINCT \"svc$load_id\") FROM trips",
        )
        .await;
    assert_eq!(rows, [[Some("19".to_string()), Some("2".into())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_request_errors_have_the_specs_messages() {
    let app = spawn_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let id = new_load(&app, &admin, json!({})).await;
    let missing =
        "MissingParameter: missing check_sum parameter. At least one check_sum is required";
    let invalid = "Invalid checksum data provided.";
    for (body, expected) in [
        (r#"{"check_sum": {}}"#, missing),
        ("{}", missing),
        ("", missing),
        (r#"{"check_sum": null}"#, missing),
        (r#"{"check_sum": []}"#, invalid),
        (r#"{"check_sum": "count(*)"}"#, invalid),
        (r#"{"check_sum": {"count(*)": true}}"#, invalid),
        (r#"{"check_sum": {"count(*)": null}}"#, invalid),
        (r#"{"check_sum": {"count(*)": {"a": 1}}}"#, invalid),
        (r#"{"check_sum": {"count(*)": [1]}}"#, invalid),
        ("{oops", "JSON not well formed."),
    ] {
        let (status, reply) = app.commit(&admin, &id, body).await;
        assert_eq!(
            (status, reply),
            (StatusCode::BAD_REQUEST, message(expected)),
            "{body}"
        );
    }
    let (_, body) = app
        .get(ORG_HOST, &format!("{LOAD}/{id}"), Some(&admin))
        .await;
    assert_eq!(body["LoadStatus"], "OPEN", "nothing changed");

    let not_found = message("NotFound: load_id does not exist for this user.");
    let (status, reply) = app
        .commit(&admin, "no-such-load", r#"{"check_sum": {"count(*)": 1}}"#)
        .await;
    assert_eq!((status, reply), (StatusCode::NOT_FOUND, not_found.clone()));
    let other = app.token_of("bob", &["ZoneAdmin"], "[0]");
    let (status, reply) = app
        .commit(&other, &id, r#"{"check_sum": {"count(*)": 1}}"#)
        .await;
    assert_eq!((status, reply), (StatusCode::NOT_FOUND, not_found));
}

/// Commits `batch` as one file of a new load and returns the ended resource.
async fn commit_batch(
    app: &TestApp,
    token: &str,
    load: Value,
    batch: &RecordBatch,
    check_sum: Value,
) -> Value {
    let id = new_load(app, token, load).await;
    app.stage_file(token, &id, "part_1", batch).await;
    commit_and_wait(app, token, &id, check_sum).await
}

/// Commits two trips of service client 1 (count(*) 2) as a new load; returns
/// the ended resource.
async fn commit_two_trips(app: &TestApp, token: &str) -> Value {
    commit_batch(
        app,
        token,
        json!({}),
        &trips_batch(&[1], 2),
        json!({"count(*)": 2}),
    )
    .await
}

/// A FAIL of `error_type` whose items are all of the recap's `item_type`:
/// `ErrorDetails` holds them as objects, `ErrorMessages` as the spec shows
/// them (objects for CheckSumError, the messages as strings otherwise).
fn assert_failed(resource: &Value, error_type: &str, item_type: &str) {
    assert_eq!(resource["LoadStatus"], "FAIL", "{resource}");
    assert_eq!(resource["ErrorType"], error_type, "{resource}");
    let details = resource["ErrorDetails"].as_array().expect("ErrorDetails");
    assert!(!details.is_empty(), "{resource}");
    assert!(
        details.iter().all(|i| i["ErrorType"] == item_type),
        "{resource}"
    );
    let expected: Vec<Value> = if error_type == "CheckSumError" {
        details.clone()
    } else {
        details.iter().map(|i| i["ErrorMessage"].clone()).collect()
    };
    assert_eq!(resource["ErrorMessages"], json!(expected), "{resource}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_has_its_error_type_and_nothing_is_written() {
    let app = spawn_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");

    let failed = commit_batch(
        &app,
        &admin,
        json!({}),
        &trips_batch(&[1], 3),
        json!({"count(*)": 4, "max(trip_id)": 102}),
    )
    .await;
    assert_failed(&failed, "CheckSumError", "CHECKSUM_MISMATCH");
    assert_eq!(
        failed["ErrorMessages"],
        json!([{
            "ErrorType": "CHECKSUM_MISMATCH",
            "ErrorMessage": "Checksum mismatch for count(*): expected 4, actual 3",
            "CheckResult": "FAIL"
        }])
    );

    // No files at all.
    let id = new_load(&app, &admin, json!({})).await;
    let failed = commit_and_wait(&app, &admin, &id, json!({"count(*)": 0})).await;
    assert_failed(&failed, "NoFilesUploaded", "MISSING_FILE");

    // Not parquet.
    let id = new_load(&app, &admin, json!({})).await;
    let descriptor = app.file_descriptor(&admin, &id, Some("junk")).await;
    {
        use object_store::ObjectStoreExt as _;
        let path = lakehost::load::staging_path(descriptor["path"].as_str().unwrap());
        app.lake
            .object_store()
            .put(&path, b"not parquet".to_vec().into())
            .await
            .unwrap();
        app.store.record_upload(&id, "junk", 11, 1).await.unwrap();
    }
    let failed = commit_and_wait(&app, &admin, &id, json!({"count(*)": 1})).await;
    assert_failed(&failed, "ParquetValidation", "INVALID_PARQUET");

    // The files' service_client_id and load_as_service_client_id together.
    let failed = commit_batch(
        &app,
        &admin,
        json!({"load_as_service_client_id": "3"}),
        &trips_batch(&[1], 2),
        json!({"count(*)": 2}),
    )
    .await;
    assert_failed(&failed, "ServiceClientError", "SERVICE_CLIENT_MISMATCH");

    // An own-client analyst (clients 1 and 2) loading rows of client 5, and
    // loading as client 7.
    let own = app.token_for(&["OwnServiceClientAnalyst"], "[1 2]");
    let failed = commit_batch(
        &app,
        &own,
        json!({}),
        &trips_batch(&[1, 5], 2),
        json!({"count(*)": 4}),
    )
    .await;
    assert_failed(&failed, "ServiceClientError", "SERVICE_CLIENT_MISMATCH");
    assert!(failed["ErrorMessages"][0].as_str().unwrap().contains('5'));
    let without_column = bigint_batch(&[("trip_id", &[1, 2])]);
    let failed = commit_batch(
        &app,
        &own,
        json!({"load_as_service_client_id": "7"}),
        &without_column,
        json!({"count(*)": 2}),
    )
    .await;
    assert_failed(&failed, "PermissionsError", "SERVICE_CLIENT_MISMATCH");
    // ... and as one of theirs it goes through.
    let done = commit_batch(
        &app,
        &own,
        json!({"load_as_service_client_id": "2", "table_name": "own_trips"}),
        &without_column,
        json!({"count(*)": 2}),
    )
    .await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");

    // More than 100 partition value combinations.
    let failed = commit_batch(
        &app,
        &admin,
        json!({"partitions": ["trip_id"]}),
        &trips_batch(&[1, 2], 60),
        json!({"count(*)": 120}),
    )
    .await;
    assert_failed(&failed, "TooManyPartitions", "TooManyPartitions");

    // None of these wrote a row: the table does not exist.
    let (status, _) = app
        .submit(
            ORG_HOST,
            &admin,
            &json!({"query": "SELECT count(*) FROM trips"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_partitions_and_a_schema_mismatch_on_a_second_load() {
    let app = spawn_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let with_day = |days: &[&str]| {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("trip_id", DataType::Int64, false),
                Field::new("day", DataType::Utf8, false),
                Field::new("service_client_id", DataType::Int64, false),
            ])),
            vec![
                Arc::new(Int64Array::from((0..days.len() as i64).collect::<Vec<_>>())),
                Arc::new(StringArray::from(days.to_vec())),
                Arc::new(Int64Array::from(vec![1; days.len()])),
            ],
        )
        .unwrap()
    };
    let done = commit_batch(
        &app,
        &admin,
        json!({"partitions": ["day"]}),
        &with_day(&["2026-11-01", "2026-11-02", "2026-11-02"]),
        json!({"count(*)": 3}),
    )
    .await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let rows = app
        .rows_of(
            ORG_HOST,
            &admin,
            "SELECT day, count(*) FROM trips GROUP BY day ORDER BY day",
        )
        .await;
    assert_eq!(
        rows,
        [
            [Some("2026-11-01".to_string()), Some("1".into())],
            [Some("2026-11-02".to_string()), Some("2".into())]
        ]
    );

    // The same table from files with another shape.
    let failed = commit_two_trips(&app, &admin).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    assert_eq!(failed["ErrorType"], "ValidationError", "{failed}");
    let kinds: Vec<&str> = failed["ErrorDetails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["ErrorType"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["MISSING_COLUMN", "UNEXPECTED_COLUMN", "UNEXPECTED_COLUMN"],
        "{failed}"
    );
}

/// Starts a commit of two trips on the demo org, then runs a `SELECT 1` of
/// the org `other` (token `other`) to its end while the commit goes on or
/// ends; the commit's loadId.
async fn commit_beside_another_orgs_query(app: &TestApp, admin: &str, other: &str) -> String {
    let id = app
        .start_commit_on(
            ORG_HOST,
            admin,
            &trips_batch(&[1], 2),
            json!({"count(*)": 2}),
        )
        .await;
    let theirs = app.submit_sql(OTHER_ORG_HOST, other, "SELECT 1").await;
    app.wait_for(OTHER_ORG_HOST, other, &theirs, Some("SUCCEEDED"))
        .await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orgs_own_manifest_runs_its_steps_within_their_limits() {
    let pipelines = tempfile::tempdir().unwrap();
    let org_dir = pipelines.path().join("orgs/demo");
    std::fs::create_dir_all(&org_dir).unwrap();
    let manifest = |step: &str, limits: &str| {
        format!(
            "version = 1\n[[steps]]\nname = \"validate_parquet\"\ncomponent = \"builtin:validate_parquet\"\ngrants = [\"staged-files\"]\n\
             [[steps]]\nname = \"extra\"\ncomponent = \"builtin:{step}\"\n{limits}\n\
             [[steps]]\nname = \"insert\"\ncomponent = \"builtin:insert\"\ngrants = [\"staged-sql\", \"lake-append\"]\n"
        )
    };
    let dir = pipelines.path().to_path_buf();
    let app = spawn_app_with(|config| config.pipeline.dir = dir).await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let other = app.org_token_for("other", &["ZoneAdmin"], "[0]");

    for (step, limits, expected) in [
        (
            "loop_forever",
            "time_limit_ms = 300",
            "ran past its time limit of 300 ms",
        ),
        (
            "grow_memory",
            "memory_limit_bytes = 16777216",
            "needed more than its memory limit",
        ),
        ("ungranted_import", "grants = []", "not granted"),
        (
            "misbehave",
            "[steps.config]\nhow = \"recurse\"",
            "step extra trapped",
        ),
        (
            "misbehave",
            "[steps.config]\nhow = \"panic\"",
            // The trap names the step, and the panic's message (its stderr).
            "this step panics on purpose",
        ),
        (
            "misbehave",
            "[steps.config]\nhow = \"unknown_error_type\"",
            "step extra failed the load with ErrorType \\\"TotallyFine\\\", which is not one of the spec's",
        ),
    ] {
        // Changing the org's manifest needs no restart.
        std::fs::write(org_dir.join("load.toml"), manifest(step, limits)).unwrap();
        let id = commit_beside_another_orgs_query(&app, &admin, &other).await;
        let failed = app.wait_for_load(&admin, &id).await;
        assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
        let text = failed["ErrorMessages"].to_string();
        assert!(text.contains(expected), "{step}: {failed}");
        // The server keeps answering.
        let (status, _) = app.get(ORG_HOST, SECURITY_METADATA, Some(&admin)).await;
        assert_eq!(status, StatusCode::OK);
    }
    // A report of five thousand 10 KB items is cut to a hundred short ones
    // and a note of how many there were.
    std::fs::write(
        org_dir.join("load.toml"),
        manifest("misbehave", "[steps.config]\nhow = \"huge_report\""),
    )
    .unwrap();
    let failed = commit_two_trips(&app, &admin).await;
    assert_eq!(failed["ErrorType"], "ValidationError", "{failed}");
    let items = failed["ErrorMessages"].as_array().unwrap();
    assert_eq!(items.len(), 101);
    assert!(items.iter().all(|i| i.as_str().unwrap().len() <= 4096 + 6));
    assert_eq!(
        items[100],
        "step extra reported 5000 items; the first 100 are shown"
    );

    // While one org's step spins to its time limit, another org is served.
    std::fs::write(
        org_dir.join("load.toml"),
        manifest("loop_forever", "time_limit_ms = 10000"),
    )
    .unwrap();
    let id = commit_beside_another_orgs_query(&app, &admin, &other).await;
    let (_, spinning) = app
        .get(ORG_HOST, &format!("{LOAD}/{id}"), Some(&admin))
        .await;
    assert_eq!(spinning["LoadStatus"], "PROCESSING", "{spinning}");
    let failed = app.wait_for_load(&admin, &id).await;
    assert!(
        failed["ErrorMessages"]
            .to_string()
            .contains("ran past its time limit of 10000 ms"),
        "{failed}"
    );

    assert_eq!(
        app.submit(
            ORG_HOST,
            &admin,
            &json!({"query": "SELECT count(*) FROM trips"})
        )
        .await
        .0,
        StatusCode::BAD_REQUEST,
        "no rows were written"
    );

    // A broken manifest fails the commit with a message naming file and key.
    std::fs::write(
        org_dir.join("load.toml"),
        "version = 1\n[[steps]]\nname = \"x\"\ncomponent = \"builtin:insert\"\ntimeout = 3\n",
    )
    .unwrap();
    let failed = commit_two_trips(&app, &admin).await;
    assert_eq!(failed["ErrorType"], "InternalError");
    // It names the file as the pipelines folder does, never the server's
    // own directories.
    let message = failed["ErrorMessages"][0].as_str().unwrap();
    assert!(
        message.contains("orgs/demo/load.toml: steps[0].timeout"),
        "{failed}"
    );
    let server_dir = pipelines.path().display().to_string();
    assert!(!failed.to_string().contains(&server_dir), "{failed}");

    // A component file that is not there: named, without its directory.
    std::fs::write(
        org_dir.join("load.toml"),
        "version = 1\n[[steps]]\nname = \"x\"\ncomponent = \"plugins/missing.wasm\"\n",
    )
    .unwrap();
    let failed = commit_two_trips(&app, &admin).await;
    assert!(failed.to_string().contains("missing.wasm"), "{failed}");
    assert!(!failed.to_string().contains(&server_dir), "{failed}");

    // Megabytes of log lines from a step are cut; the load goes on to its end.
    std::fs::write(
        org_dir.join("load.toml"),
        manifest("misbehave", "[steps.config]\nhow = \"flood_logs\""),
    )
    .unwrap();
    let done = commit_two_trips(&app, &admin).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");

    // Without its own manifest the org gets the default one again.
    std::fs::remove_file(org_dir.join("load.toml")).unwrap();
    let done = commit_two_trips(&app, &admin).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_org_adds_its_own_step_from_a_wasm_file() {
    let pipelines = tempfile::tempdir().unwrap();
    let org_dir = pipelines.path().join("orgs/demo");
    std::fs::create_dir_all(org_dir.join("steps")).unwrap();
    // The example step, as a plugin author's own .wasm file next to the
    // manifest, after the default steps: a failure there still writes nothing.
    std::fs::write(
        org_dir.join("steps/reject_columns.wasm"),
        lakehost::pipeline::builtin::component("reject_columns")
            .unwrap()
            .1,
    )
    .unwrap();
    let default = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines/load.toml"),
    )
    .unwrap();
    std::fs::write(
        org_dir.join("load.toml"),
        format!(
            "{default}\n[[steps]]\nname = \"reject_columns\"\ncomponent = \"steps/reject_columns.wasm\"\n\
             grants = [\"staged-files\", \"log\"]\n[steps.config]\nforbidden = [\"city\"]\n"
        )
        ,
    )
    .unwrap();
    let dir = pipelines.path().to_path_buf();
    let app = spawn_app_with(|config| config.pipeline.dir = dir).await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");

    let failed = commit_two_trips(&app, &admin).await;
    assert_failed(&failed, "ValidationError", "UNEXPECTED_COLUMN");
    assert!(
        failed["ErrorMessages"][0]
            .as_str()
            .unwrap()
            .contains("city"),
        "{failed}"
    );

    let without_city = bigint_batch(&[("trip_id", &[1, 2]), ("service_client_id", &[1, 1])]);
    let done = commit_batch(
        &app,
        &admin,
        json!({"table_name": "clean_trips"}),
        &without_city,
        json!({"count(*)": 2}),
    )
    .await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
}

/// An org's manifest and a step's `.wasm` replaced while a commit runs: the
/// commit ends with the manifest and the components it began with, the next
/// commit takes the new ones (here a file that is no component: an
/// InternalError naming it), and the server goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_swapped_while_a_commit_runs_changes_only_the_commits_after_it() {
    let pipelines = tempfile::tempdir().unwrap();
    let org_dir = pipelines.path().join("orgs/demo");
    std::fs::create_dir_all(&org_dir).unwrap();
    let guard = lakehost::pipeline::builtin::component("reject_columns")
        .unwrap()
        .1;
    std::fs::write(org_dir.join("guard.wasm"), guard).unwrap();
    let manifest = |pause_ms: u64, forbidden: &str| {
        format!(
            "version = 1\n\
             [[steps]]\nname = \"pause\"\ncomponent = \"builtin:pause\"\n[steps.config]\nms = {pause_ms}\n\
             [[steps]]\nname = \"guard\"\ncomponent = \"guard.wasm\"\ngrants = [\"staged-files\", \"log\"]\n\
             [steps.config]\nforbidden = [{forbidden}]\n\
             [[steps]]\nname = \"insert\"\ncomponent = \"builtin:insert\"\ngrants = [\"staged-sql\", \"lake-append\"]\n"
        )
    };
    std::fs::write(org_dir.join("load.toml"), manifest(3000, "\"trip_id\"")).unwrap();
    let dir = pipelines.path().to_path_buf();
    let app = spawn_app_with(|config| {
        config.pipeline.dir = dir;
        config.pipeline.test_steps = true;
    })
    .await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");

    // The first commit, held in its pause step.
    let first = new_load(&app, &admin, json!({})).await;
    app.stage_file(&admin, &first, "part_1", &trips_batch(&[1], 2))
        .await;
    let (status, body) = app
        .commit(
            &admin,
            &first,
            &json!({"check_sum": {"count(*)": 2}}).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let record = app.store.load(&first).await.unwrap().unwrap();
        if record.running_step.as_deref() == Some("pause") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never reached its pause step"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Meanwhile: a manifest that pauses less and forbids nothing, and a
    // guard that is no component at all.
    std::fs::write(org_dir.join("guard.wasm"), b"\0asm no longer a component").unwrap();
    std::fs::write(org_dir.join("load.toml"), manifest(0, "")).unwrap();

    // The first commit's guard was the one it began with, with its config.
    let ended = app.wait_for_load(&admin, &first).await;
    assert_failed(&ended, "ValidationError", "UNEXPECTED_COLUMN");
    assert!(ended.to_string().contains("trip_id"), "{ended}");

    // The next one takes the new files, and the broken component is named.
    let next = commit_two_trips(&app, &admin).await;
    assert_eq!(next["LoadStatus"], "FAIL", "{next}");
    assert_eq!(next["ErrorType"], "InternalError", "{next}");
    assert!(next.to_string().contains("guard.wasm"), "{next}");
    assert!(
        !next
            .to_string()
            .contains(&pipelines.path().display().to_string()),
        "{next}"
    );

    // A good component again: the server kept serving, and it loads.
    std::fs::write(org_dir.join("guard.wasm"), guard).unwrap();
    let done = commit_two_trips(&app, &admin).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_load_lands_in_the_zones_lake() {
    let app = spawn_app().await;
    let zone_host = "lab.demo.api.localhost";
    let token = app.zone_token_for("lab", &["ZoneAdmin"], "[0]");
    let (status, reply) = app
        .post_raw(
            zone_host,
            LOAD,
            &token,
            r#"{"load_type": "APPEND_ONLY", "table_name": "zone_trips"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    let id = reply["loadId"].as_str().unwrap().to_string();
    app.stage_file_on(zone_host, &token, &id, "part_1", &trips_batch(&[1, 3], 2))
        .await;
    let (status, _) = app
        .post_raw(
            zone_host,
            &format!("{LOAD}/{id}/commit"),
            &token,
            r#"{"check_sum": {"count(*)": 4}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (_, body) = app
            .get(zone_host, &format!("{LOAD}/{id}"), Some(&token))
            .await;
        if body["LoadStatus"] == "SUCCESS" {
            break;
        }
        assert_ne!(body["LoadStatus"], "FAIL", "{body}");
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let rows = app
        .rows_of(
            zone_host,
            &token,
            "SELECT count(*) FROM lab_lake.zone_trips",
        )
        .await;
    assert_eq!(rows, [[Some("4".to_string())]]);
    // Not in the org's lake.
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let (status, _) = app
        .submit(
            ORG_HOST,
            &admin,
            &json!({"query": "SELECT count(*) FROM zone_trips"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// A check_sum key deep enough to overflow a stack (issue: it crashed the
/// commit worker, and every replica that took the commit over after it)
/// fails the load with CheckSumError; one at the cap is computed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_sum_key_past_the_expression_cap_fails_the_load_and_one_at_the_cap_passes() {
    use lakehost::engine::expression_limits::MAX_EXPRESSION_DEPTH;
    let app = spawn_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let deep = format!("count(*){}", "+1".repeat(1500));
    let failed = commit_batch(
        &app,
        &admin,
        json!({}),
        &trips_batch(&[1], 2),
        json!({ deep.clone(): 1502 }),
    )
    .await;
    assert_failed(&failed, "CheckSumError", "CHECKSUM_MISMATCH");
    let text = failed["ErrorMessages"][0]["ErrorMessage"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("Checksum {deep} could not be computed: refused: the statement's expressions nest more than {MAX_EXPRESSION_DEPTH} levels deep")),
        "{text}"
    );

    // The step asks `SELECT <key>, arrow_typeof(<key>) FROM staged`: SELECT,
    // arrow_typeof and count(*) take three levels, each added term one more.
    let at_cap = format!("count(*){}", "+1".repeat(MAX_EXPRESSION_DEPTH - 3));
    let passed = commit_batch(
        &app,
        &admin,
        json!({}),
        &trips_batch(&[1], 2),
        json!({ at_cap: 2 + MAX_EXPRESSION_DEPTH - 3 }),
    )
    .await;
    assert_eq!(passed["LoadStatus"], "SUCCESS", "{passed}");
    // Only the passing load's rows are in the table.
    assert_eq!(
        app.rows_of(ORG_HOST, &admin, "SELECT count(*) FROM trips")
            .await,
        vec![vec![Some("2".into())]]
    );
}

/// The Comotion CLI sends every check_sum value as a string: a string that
/// parses as a number is compared as one when the aggregate is numeric (with
/// the float tolerance), as a string otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_sum_values_sent_as_strings_compare_as_numbers_for_numeric_aggregates() {
    let app = spawn_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let batch = trips_batch(&[1, 2], 5);
    let passed = commit_batch(
        &app,
        &admin,
        json!({}),
        &batch,
        json!({"count(*)": "10", "sum(fare)": "30.000000000000004", "min(city)": "city-0"}),
    )
    .await;
    assert_eq!(passed["LoadStatus"], "SUCCESS", "{passed}");

    let failed = commit_batch(
        &app,
        &admin,
        json!({}),
        &batch,
        json!({"count(*)": "11", "max(trip_id)": "0204", "min(city)": "0"}),
    )
    .await;
    assert_failed(&failed, "CheckSumError", "CHECKSUM_MISMATCH");
    let messages: Vec<&str> = failed["ErrorMessages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["ErrorMessage"].as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        [
            "Checksum mismatch for count(*): expected 11, actual 10",
            "Checksum mismatch for min(city): expected 0, actual city-0",
        ],
        "{failed}"
    );
}

/// `pipeline.error_messages = "strings"` (deployment-wide or per org) makes
/// every ErrorMessages item a string, CheckSumError's included, for the
/// Comotion SDK; the objects stay in ErrorDetails; an org can keep the spec's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_messages_are_all_strings_where_the_deployment_or_org_asks_for_them() {
    use lakehost::config::ErrorMessagesShape;
    let detail = json!({
        "ErrorType": "CHECKSUM_MISMATCH",
        "ErrorMessage": "Checksum mismatch for count(*): expected 4, actual 3",
        "CheckResult": "FAIL"
    });
    for (deployment, org, strings) in [
        (ErrorMessagesShape::Strings, None, true),
        (
            ErrorMessagesShape::Spec,
            Some(ErrorMessagesShape::Strings),
            true,
        ),
        (
            ErrorMessagesShape::Strings,
            Some(ErrorMessagesShape::Spec),
            false,
        ),
    ] {
        let app = spawn_app_with(|c| {
            c.pipeline.error_messages = deployment;
            c.orgs[0].error_messages = org;
        })
        .await;
        let admin = app.token_for(&["ZoneAdmin"], "[0]");
        let failed = commit_batch(
            &app,
            &admin,
            json!({}),
            &trips_batch(&[1], 3),
            json!({"count(*)": 4}),
        )
        .await;
        let expected = if strings {
            json!(["Checksum mismatch for count(*): expected 4, actual 3 (CheckResult: FAIL)"])
        } else {
            json!([detail.clone()])
        };
        assert_eq!(failed["ErrorType"], "CheckSumError", "{failed}");
        assert_eq!(failed["ErrorMessages"], expected, "{deployment:?} {org:?}");
        assert_eq!(failed["ErrorDetails"], json!([detail.clone()]));
    }
}

#[tokio::test]
async fn files_of_a_load_may_order_their_columns_differently() {
    let app = spawn_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let id = new_load(&app, &admin, json!({})).await;
    let first = bigint_batch(&[("trip_id", &[1]), ("service_client_id", &[1])]);
    let second = bigint_batch(&[("service_client_id", &[2]), ("trip_id", &[2])]);
    app.stage_file(&admin, &id, "part_1", &first).await;
    app.stage_file(&admin, &id, "part_2", &second).await;
    let done = commit_and_wait(&app, &admin, &id, json!({"count(*)": 2, "sum(trip_id)": 3})).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");

    // Different column names are still refused.
    let id = new_load(&app, &admin, json!({})).await;
    let other = bigint_batch(&[("trip", &[3]), ("service_client_id", &[1])]);
    app.stage_file(&admin, &id, "part_1", &first).await;
    app.stage_file(&admin, &id, "part_2", &other).await;
    let failed = commit_and_wait(&app, &admin, &id, json!({"count(*)": 2})).await;
    assert_failed(&failed, "ParquetValidation", "INVALID_PARQUET");
}

/// The default load steps with a pause of `ms` before the insert.
fn paused_before_insert(ms: u64) -> String {
    let default_manifest = default_load_manifest();
    let paused = default_manifest.replace(
        "[[steps]]\nname = \"insert\"",
        &format!(
            "[[steps]]\nname = \"pause\"\ncomponent = \"builtin:pause\"\n[steps.config]\nms = {ms}\n\n\
             [[steps]]\nname = \"insert\""
        ),
    );
    assert_ne!(paused, default_manifest);
    paused
}

/// An object put into staging while the commit runs (its bytes land on the
/// staged object the steps already checked, past the upload endpoint) fails
/// the commit, and nothing is written: no unchecked row reaches the lake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_replaced_during_the_commit_fails_it_and_writes_nothing() {
    use object_store::ObjectStoreExt as _;
    let pipelines = demo_load_pipelines(&paused_before_insert(4000));
    let dir = pipelines.path().to_path_buf();
    let app = spawn_app_with(|c| c.pipeline.dir = dir).await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");

    let id = app
        .start_commit_on(
            ORG_HOST,
            &admin,
            &trips_batch(&[1], 2),
            json!({"count(*)": 2}),
        )
        .await;
    // Into the pause: the checks passed on two rows; a late upload lands.
    // It would pass the checks too (two rows), so whenever it lands after
    // the commit began, only the version check can tell.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let late = parquet_bytes(&trips_batch(&[2], 2));
    let files = app.store.load_files(&id).await.unwrap();
    let path = lakehost::load::staging_path(&files[0].object_key);
    app.lake
        .object_store()
        .put(&path, late.into())
        .await
        .unwrap();

    let failed = app.wait_for_load(&admin, &id).await;
    assert_eq!(failed["ErrorType"], "InternalError", "{failed}");
    assert!(
        failed["ErrorMessages"][0]
            .as_str()
            .unwrap()
            .contains("file part_1 was replaced while the commit ran"),
        "{failed}"
    );
    let (status, _) = app
        .submit(
            ORG_HOST,
            &admin,
            &json!({"query": "SELECT count(*) FROM trips"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "no table, no rows");
}

/// An upload through the upload endpoint that began while the load was
/// OPEN and ends while its commit runs is refused before it replaces the
/// staged file, and the commit goes on with the file it validated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_ending_during_the_commit_is_refused_and_the_commit_keeps_its_file() {
    use lakehost_tests::{raw_http, s3_signing};
    let pipelines = demo_load_pipelines(&paused_before_insert(4000));
    let dir = pipelines.path().to_path_buf();
    let app = spawn_app_with(|c| c.pipeline.dir = dir).await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let (status, created) = app
        .post_raw(
            ORG_HOST,
            LOAD,
            &admin,
            &json!({"load_type": "APPEND_ONLY", "table_name": "trips"}).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{created}");
    let id = created["loadId"].as_str().unwrap().to_string();
    let descriptor = app
        .file_descriptor_on(ORG_HOST, &admin, &id, Some("part_1"))
        .await;
    let sts = &descriptor["sts_credentials"];
    let credentials = s3_signing::SigningCredentials {
        access_key_id: sts["AccessKeyId"].as_str().unwrap().into(),
        secret_access_key: sts["SecretAccessKey"].as_str().unwrap().into(),
        session_token: sts["SessionToken"].as_str().unwrap().into(),
    };
    let put = |rows: i64| {
        let target = format!(
            "/{}/{}",
            descriptor["bucket"].as_str().unwrap(),
            descriptor["path"].as_str().unwrap()
        );
        let host = format!("localhost:{}", app.upload_addr.port());
        let mut request = raw_http::RawRequest::new("PUT", &target, &host);
        request.body = parquet_bytes(&trips_batch(&[1], rows));
        s3_signing::sign_v4(&mut request, &credentials, chrono::Utc::now());
        request
    };
    let first = raw_http::send(app.upload_addr, &put(2)).await;
    assert_eq!(first.status, 200, "{}", first.text());

    // A second upload of the file begins (its credentials checked while the
    // load is OPEN) and stops halfway until the commit is in its pause.
    let (resume, resumed) = tokio::sync::oneshot::channel::<()>();
    let late = put(3);
    let upload_addr = app.upload_addr;
    let late = tokio::spawn(async move {
        let half = late.body.len() / 2;
        raw_http::send_with_pause(upload_addr, &late, half, async {
            let _ = resumed.await;
        })
        .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let (status, reply) = app
        .commit(
            &admin,
            &id,
            &json!({"check_sum": {"count(*)": 2}}).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    resume.send(()).unwrap();
    let refused = late.await.unwrap();
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert_eq!(refused.xml("Code").as_deref(), Some("AccessDenied"));
    assert_eq!(
        refused.xml("Message").as_deref(),
        Some("The load of these credentials no longer takes files.")
    );

    let done = app.wait_for_load(&admin, &id).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let count = app
        .submit_sql(ORG_HOST, &admin, "SELECT count(*) AS n FROM trips")
        .await;
    app.wait_for(ORG_HOST, &admin, &count, Some("SUCCEEDED"))
        .await;
    let (_, page) = app.result_page(ORG_HOST, &admin, &count, None).await;
    assert_eq!(
        page["resultSet"]["Rows"][1]["Data"][0]["VarCharValue"], "2",
        "{page}"
    );
}

/// Uploaded files may carry `service_client_id` as text, which the default
/// pipeline accepts: a load of them creates its table and reads back as
/// numbers; a value that is not a number fails the load and writes nothing.
#[tokio::test]
async fn a_text_service_client_id_loads_into_a_new_table() {
    let app = spawn_app().await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let cells = |rows: &[&[&str]]| -> Vec<Vec<Option<String>>> {
        rows.iter()
            .map(|row| row.iter().map(|c| Some(c.to_string())).collect())
            .collect()
    };
    let batch = |owners: Vec<&str>| {
        let schema = Arc::new(Schema::new(vec![
            Field::new("trip_id", DataType::Int64, false),
            Field::new("service_client_id", DataType::Utf8, false),
        ]));
        let ids: Vec<i64> = (0..owners.len() as i64).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(owners)),
            ],
        )
        .unwrap()
    };
    let id = app
        .start_commit_on(
            ORG_HOST,
            &admin,
            &batch(vec!["1", "2", "2"]),
            json!({"count(*)": 3}),
        )
        .await;
    let done = app.wait_for_load(&admin, &id).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    assert_eq!(
        app.rows_of(
            ORG_HOST,
            &admin,
            "SELECT service_client_id, count(*) AS n FROM trips GROUP BY 1 ORDER BY 1"
        )
        .await,
        cells(&[&["1", "1"], &["2", "2"]])
    );

    let id = app
        .start_commit_on(
            ORG_HOST,
            &admin,
            &batch(vec!["3", "three"]),
            json!({"count(*)": 2}),
        )
        .await;
    let failed = app.wait_for_load(&admin, &id).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    assert_eq!(
        app.rows_of(ORG_HOST, &admin, "SELECT count(*) AS n FROM trips")
            .await,
        cells(&[&["3"]]),
        "nothing of the failed load is visible"
    );
}

/// The default manifest with `verify_checksums` given `time_limit_ms`.
fn checksums_limited_to(time_limit_ms: u64) -> tempfile::TempDir {
    demo_load_pipelines(&default_load_manifest().replace(
        "component = \"builtin:verify_checksums\"\n",
        &format!("component = \"builtin:verify_checksums\"\ntime_limit_ms = {time_limit_ms}\n"),
    ))
}

/// A load of sixteen million staged rows committed with a check_sum key the
/// per-call bounds allow that would run for minutes over them (a 2,000-value
/// list sorted per row); its loadId.
async fn commit_with_a_slow_check_sum(app: &TestApp, token: &str) -> String {
    let trips: Vec<i64> = (0..8192).map(|i| i % 7).collect();
    let batch = bigint_batch(&[("trip_id", &trips), ("service_client_id", &[1; 8192])]);
    let id = new_load(app, token, json!({})).await;
    app.stage_bytes_on(
        ORG_HOST,
        token,
        &id,
        "part_1",
        parquet_bytes_repeated(&batch, 2000),
    )
    .await;
    let key = "sum(cardinality(array_sort(range(trip_id + 2000, 0, -1))))";
    let (status, body) = app
        .commit(token, &id, &json!({ "check_sum": { key: 1 } }).to_string())
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    id
}

/// The step's time limit ends a slow check_sum key in the middle of its SQL:
/// the load fails with the step's time-limit reason, another org is served
/// meanwhile, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_sum_key_running_past_its_steps_time_limit_fails_the_load_at_the_limit() {
    let pipelines = checksums_limited_to(500);
    let dir = pipelines.path().to_path_buf();
    let app = spawn_app_with(|config| config.pipeline.dir = dir).await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let id = commit_with_a_slow_check_sum(&app, &admin).await;

    let other = app.org_token_for("other", &["ZoneAdmin"], "[0]");
    let theirs = app.submit_sql(OTHER_ORG_HOST, &other, "SELECT 1").await;
    app.wait_for(OTHER_ORG_HOST, &other, &theirs, Some("SUCCEEDED"))
        .await;
    let failed = app.wait_for_load(&admin, &id).await;
    assert_eq!(failed["LoadStatus"], "FAIL", "{failed}");
    assert_eq!(failed["ErrorType"], "InternalError", "{failed}");
    assert_eq!(
        failed["ErrorMessages"],
        json!(["step verify_checksums ran past its time limit of 500 ms"]),
        "{failed}"
    );
    app.assert_no_table(&admin, "trips").await;
}

/// A commit taken over by another worker after its lease lapsed stops in the
/// middle of its check_sum SQL (its step's time limit is ten minutes): the
/// replica's only commit worker is free at once and runs the next commit,
/// and the first is left to the worker that took it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_taken_over_elsewhere_stops_its_sql_and_frees_its_worker() {
    use lakehost::{clock::Clock as _, store::JobCaps};

    let pipelines = checksums_limited_to(600_000);
    let dir = pipelines.path().to_path_buf();
    let app = spawn_app_with(|config| {
        config.pipeline.dir = dir;
        config.pipeline.commit_workers = 1;
        config.pipeline.lease_s = 3;
    })
    .await;
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let id = commit_with_a_slow_check_sum(&app, &admin).await;
    while app.store.load(&id).await.unwrap().unwrap().attempts == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Its lease lapses on the server's clock; another worker takes it (a
    // renewal landing first moves the lease on, so the clock moves again).
    let taken = loop {
        app.clock.advance(chrono::Duration::seconds(10));
        let now = app.clock.now().timestamp_micros();
        let until = now + 3_600_000_000;
        let claimed = app
            .store
            .claim_load_commit("elsewhere", now, until, JobCaps::NONE);
        if let Some(taken) = claimed.await.unwrap() {
            break taken;
        }
    };
    assert_eq!(taken.load.id, id);

    let next = app
        .start_commit_on(
            ORG_HOST,
            &admin,
            &trips_batch(&[1], 2),
            json!({"count(*)": 2}),
        )
        .await;
    let done = app.wait_for_load(&admin, &next).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let (_, first) = app
        .get(ORG_HOST, &format!("{LOAD}/{id}"), Some(&admin))
        .await;
    assert_eq!(first["LoadStatus"], "PROCESSING", "{first}");
}
