//! The default load pipeline (the real WebAssembly steps in the real engine)
//! over a load's real staged parquet files, read by DataFusion: what the
//! commit will run. The commit endpoint and its durable job are not built
//! yet, so the test records the insert step's files in the catalog itself and
//! then reads them back over HTTP.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use lakehost::{
    auth::ServiceClientScope,
    load::staged::{StagedLoad, StagedTarget},
    pipeline::{
        PipelineEngine, PipelineKind, PipelineOutcome, RunControl, StepContext, manifest::Manifest,
    },
};
use lakehost_tests::*;
use serde_json::json;

/// A load of `table` whose file `part_1` holds `batch` in staging.
async fn staged_load(app: &TestApp, table: &str, batch: &RecordBatch) -> String {
    let token = app.token_for(&["ZoneAdmin"], "[0]");
    let load_id = app
        .create_load(
            &token,
            &json!({"load_type": "APPEND_ONLY", "table_name": table}),
        )
        .await;
    app.stage_file(&token, &load_id, "part_1", batch).await;
    load_id
}

async fn run(
    app: &TestApp,
    load_id: &str,
    check_sum: &[(&str, &str)],
) -> (
    PipelineOutcome,
    Option<lakehost::load::staged::PendingAppend>,
) {
    let record = app.store.load(load_id).await.unwrap().unwrap();
    let files = app.store.load_files(load_id).await.unwrap();
    let context = StepContext {
        load_id: load_id.to_string(),
        org: "demo".into(),
        table_name: record.load.table_name.clone(),
        check_sum: check_sum
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        any_service_client: true,
        ..StepContext::default()
    };
    let data = Arc::new(StagedLoad::new(
        app.store.clone(),
        app.lake.clone(),
        StagedTarget {
            record,
            files,
            database: "demo_lake_v2".into(),
        },
        ServiceClientScope::All,
        0,
    ));
    let manifest = Manifest::load(
        PipelineKind::Load,
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines/load.toml"),
    )
    .unwrap();
    let runner = data.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        let engine = PipelineEngine::shared().unwrap();
        let control = RunControl::detached().unwrap();
        engine.run_pipeline(&manifest, &context, runner, &control)
    })
    .await
    .unwrap()
    .unwrap();
    (outcome, data.take_pending())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_pipeline_checks_and_writes_a_loads_rows() {
    let app = spawn_app().await;
    let batch = trips_batch(&[1, 2, 5], 10);
    let load_id = staged_load(&app, "loaded_trips", &batch).await;
    let (outcome, pending) = run(
        &app,
        &load_id,
        &[
            ("count(*)", "30"),
            ("sum(fare)", "202.5"),
            ("max(city)", "\"city-9\""),
        ],
    )
    .await;
    assert_eq!(outcome, PipelineOutcome::Passed);
    let pending = pending.expect("the insert step wrote files");
    assert_eq!(pending.rows, 30);
    assert_eq!(pending.files.len(), 3, "one file per service client");
    let table = pending.new_table.expect("a new table");
    assert_eq!(
        table.partition_columns,
        ["service_client_id", "svc$load_id"]
    );

    // Recorded in the catalog (the commit's job, once built), the rows are
    // in queries with their svc$load_id.
    let created = app
        .store
        .create_table(
            &table.database_id,
            &table.name,
            &table.schema_json,
            &table.partition_columns,
            2,
        )
        .await
        .unwrap();
    app.store
        .commit_files(&created.id, &pending.files, 3)
        .await
        .unwrap();
    let admin = app.token_for(&["ZoneAdmin"], "[0]");
    let rows = app
        .rows_of(
            ORG_HOST,
            &admin,
            "SELECT count(*), count(DISTINCT \"svc$load_id\"), min(\"svc$load_id\") FROM loaded_trips",
        )
        .await;
    assert_eq!(
        rows,
        [[
            Some("30".to_string()),
            Some("1".into()),
            Some(load_id.clone())
        ]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksums_that_differ_or_are_no_aggregates_fail_the_load() {
    let app = spawn_app().await;
    let load_id = staged_load(&app, "trips_x", &trips_batch(&[1], 10)).await;
    let (outcome, pending) = run(&app, &load_id, &[("count(*)", "11"), ("trip_id", "1")]).await;
    assert!(pending.is_none(), "nothing written");
    let PipelineOutcome::Failed {
        step,
        error_type,
        items,
    } = outcome
    else {
        panic!("expected a failure, got {outcome:?}");
    };
    assert_eq!(
        (step.as_str(), error_type.as_str()),
        ("verify_checksums", "CheckSumError")
    );
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[0].error_message,
        "Checksum mismatch for count(*): expected 11, actual 10"
    );
    assert_eq!(items[0].check_result.as_deref(), Some("FAIL"));
    assert!(
        items[1]
            .error_message
            .contains("only aggregate expressions over the staged rows"),
        "{}",
        items[1].error_message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_load_with_other_columns_fails_schema_matching() {
    let app = spawn_app().await;
    app.import(None, "demo_lake_v2", "fixed_trips", &[trips_batch(&[1], 2)])
        .await;
    // Same table, but `fare` is text and `city` is gone.
    use datafusion::arrow::{
        array::{Int64Array, StringArray},
        datatypes::{DataType, Field, Schema},
    };
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("trip_id", DataType::Int64, false),
            Field::new("fare", DataType::Utf8, true),
            Field::new("tip", DataType::Utf8, true),
            Field::new("service_client_id", DataType::Int64, false),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![1])),
            Arc::new(StringArray::from(vec!["1.5"])),
            Arc::new(StringArray::from(vec!["0.5"])),
            Arc::new(Int64Array::from(vec![1])),
        ],
    )
    .unwrap();
    let load_id = staged_load(&app, "fixed_trips", &batch).await;
    let (outcome, pending) = run(&app, &load_id, &[("count(*)", "1")]).await;
    assert!(pending.is_none());
    let PipelineOutcome::Failed {
        error_type, items, ..
    } = outcome
    else {
        panic!("expected a failure, got {outcome:?}");
    };
    assert_eq!(error_type, "ValidationError");
    let kinds: Vec<&str> = items.iter().map(|i| i.error_type.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "COLUMN_TYPE_MISMATCH",
            "MISSING_COLUMN",
            "UNEXPECTED_COLUMN"
        ],
        "{items:?}"
    );
}
