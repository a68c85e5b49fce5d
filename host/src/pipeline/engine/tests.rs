//! The engine against the real built-in components, with a fixed
//! `LoadData` standing in for a load (the data side has its own tests).
//! Tests only: nothing here is compiled into the server.

use std::sync::{Mutex, OnceLock};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::{imports::LOG_BUDGET_BYTES, *};
use crate::pipeline::{ColumnInfo, DataError, ErrorItem, StagedFileInfo, TextRows};

/// What a fixed load's columns answer when they are not given.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("{0}")]
struct NoColumns(&'static str);

/// A load of two uploaded files whose columns and SQL answers are given.
struct FixedLoad {
    files: Vec<StagedFileInfo>,
    columns: Result<Vec<ColumnInfo>, NoColumns>,
    answer: Vec<Vec<Option<String>>>,
    /// Whether `query` never answers (SQL slower than any time limit),
    /// after cancelling this token when there is one.
    query_stalls: Option<Option<CancellationToken>>,
    appended: Mutex<u32>,
}

impl FixedLoad {
    fn new() -> Self {
        Self {
            files: vec![StagedFileInfo {
                file_key: "part_1".into(),
                size_bytes: 10,
                uploaded: true,
            }],
            columns: Ok(vec![
                column("trip_id", "bigint"),
                column("service_client_id", "bigint"),
            ]),
            answer: vec![vec![Some("100".into())]],
            query_stalls: None,
            appended: Mutex::new(0),
        }
    }
}

fn column(name: &str, sql_type: &str) -> ColumnInfo {
    ColumnInfo {
        name: name.into(),
        sql_type: sql_type.into(),
        nullable: true,
    }
}

#[async_trait]
impl LoadData for FixedLoad {
    fn list_files(&self) -> Result<Vec<StagedFileInfo>, DataError> {
        Ok(self.files.clone())
    }
    async fn parquet_columns(&self, _file_key: &str) -> Result<Vec<ColumnInfo>, DataError> {
        self.columns.clone().map_err(DataError::new)
    }
    async fn query(&self, _sql: &str, _max_rows: u32) -> Result<TextRows, DataError> {
        if let Some(stop) = &self.query_stalls {
            if let Some(run) = stop {
                run.cancel();
            }
            std::future::pending::<()>().await;
        }
        Ok(self.answer.clone())
    }
    async fn table_columns(&self) -> Result<Option<Vec<ColumnInfo>>, DataError> {
        Ok(None)
    }
    async fn append_staged(&self) -> Result<u64, DataError> {
        *self.appended.lock().unwrap() += 1;
        Ok(100)
    }
}

/// A run nothing stops, on a runtime shared by the tests.
fn control() -> &'static RunControl {
    static CONTROL: OnceLock<RunControl> = OnceLock::new();
    CONTROL.get_or_init(|| RunControl::detached().expect("a runtime"))
}

fn step(component: &str, grants: &[&str], extra: &str) -> Step {
    let grants = grants
        .iter()
        .map(|g| format!("\"{g}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        "version = 1\n[[steps]]\nname = \"s\"\ncomponent = \"builtin:{component}\"\ngrants = [{grants}]\n{extra}"
    );
    Manifest::parse(
        PipelineKind::Load,
        &text,
        "test.toml",
        std::path::Path::new("."),
    )
    .unwrap()
    .steps
    .remove(0)
}

fn engine() -> Arc<PipelineEngine> {
    PipelineEngine::shared().expect("engine")
}

fn context() -> StepContext {
    StepContext {
        load_id: "l1".into(),
        table_name: "trips".into(),
        check_sum: vec![("count(*)".into(), "100".into())],
        any_service_client: true,
        ..StepContext::default()
    }
}

#[test]
fn a_step_that_loops_forever_is_stopped_by_its_time_limit() {
    let result = engine().run_step(
        &step("loop_forever", &[], "time_limit_ms = 200\n"),
        &context(),
        Arc::new(FixedLoad::new()),
        control(),
    );
    assert_eq!(
        result,
        Err(StepError::TimeLimit {
            step: "s".into(),
            limit_ms: 200
        })
    );
}

#[test]
fn a_step_that_grows_without_bound_is_stopped_by_its_memory_limit() {
    let result = engine().run_step(
        &step("grow_memory", &[], "memory_limit_bytes = 33554432\n"),
        &context(),
        Arc::new(FixedLoad::new()),
        control(),
    );
    assert_eq!(
        result,
        Err(StepError::MemoryLimit {
            step: "s".into(),
            limit_bytes: 32 << 20
        })
    );
}

/// A step writing 64 lines of a megabyte each leaves at most its log
/// budget in the server's log.
#[test]
fn a_step_flooding_the_log_is_held_to_its_budget() {
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let verdict = tracing::subscriber::with_default(subscriber, || {
        engine().run_step(
            &step(
                "misbehave",
                &["log"],
                "[steps.config]\nhow = \"flood_logs\"\n",
            ),
            &context(),
            Arc::new(FixedLoad::new()),
            control(),
        )
    });
    assert!(matches!(verdict, Ok(None)), "{verdict:?}");
    let logged = captured.0.lock().unwrap().len();
    assert!(
        (LOG_BUDGET_BYTES..LOG_BUDGET_BYTES + 8 * 1024).contains(&logged),
        "{logged} bytes logged"
    );
}

#[test]
fn an_ungranted_import_answers_an_error_and_no_data() {
    let load = Arc::new(FixedLoad::new());
    let (_, items) = engine()
        .run_step(
            &step("ungranted_import", &[], ""),
            &context(),
            load.clone(),
            control(),
        )
        .unwrap()
        .expect("the test step always reports");
    for item in &items {
        assert!(
            item.error_message.contains("not granted"),
            "{}",
            item.error_message
        );
    }
    assert_eq!(*load.appended.lock().unwrap(), 0, "append never ran");

    // Granted, the same calls reach the data.
    let (_, items) = engine()
        .run_step(
            &step(
                "ungranted_import",
                &["staged-files", "staged-sql", "lake-schema", "lake-append"],
                "",
            ),
            &context(),
            load.clone(),
            control(),
        )
        .unwrap()
        .unwrap();
    assert!(
        items.iter().all(|i| i.error_message.contains(": data ")),
        "{items:?}"
    );
    assert_eq!(*load.appended.lock().unwrap(), 1);
}

#[test]
fn validate_parquet_reports_missing_files_and_bad_columns() {
    let validate = |load: FixedLoad| {
        engine().run_step(
            &step("validate_parquet", &["staged-files"], ""),
            &context(),
            Arc::new(load),
            control(),
        )
    };
    let mut load = FixedLoad::new();
    load.files[0].uploaded = false;
    let (error_type, items) = validate(load).unwrap().unwrap();
    assert_eq!(error_type, "NoFilesUploaded");
    assert!(items.iter().all(|i| i.error_type == "MISSING_FILE"));

    let mut load = FixedLoad::new();
    load.columns = Ok(vec![column("Trip-Id", "bigint")]);
    let (error_type, items) = validate(load).unwrap().unwrap();
    assert_eq!(error_type, "ParquetValidation");
    assert_eq!(items[0].error_type, "INVALID_PARQUET");

    let mut load = FixedLoad::new();
    load.columns = Err(NoColumns("not a parquet file"));
    let (error_type, _) = validate(load).unwrap().unwrap();
    assert_eq!(error_type, "ParquetValidation");

    assert_eq!(validate(FixedLoad::new()), Ok(None));
}

#[test]
fn verify_checksums_names_the_aggregate_and_both_values() {
    let mut context = context();
    context.check_sum = vec![("count(*)".into(), "99".into())];
    let (error_type, items) = engine()
        .run_step(
            &step("verify_checksums", &["staged-sql"], ""),
            &context,
            Arc::new(FixedLoad::new()),
            control(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(error_type, "CheckSumError");
    assert_eq!(
        items,
        [ErrorItem {
            error_type: "CHECKSUM_MISMATCH".into(),
            error_message: "Checksum mismatch for count(*): expected 99, actual 100".into(),
            check_result: Some("FAIL".into()),
        }]
    );
}

#[test]
fn the_default_pipeline_passes_a_good_load_and_appends_once() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines");
    let manifest = Manifest::load(PipelineKind::Load, &dir.join("load.toml")).unwrap();
    let load = Arc::new(FixedLoad::new());
    let outcome = engine()
        .run_pipeline(&manifest, &context(), load.clone(), control())
        .unwrap();
    assert_eq!(outcome, PipelineOutcome::Passed);
    assert_eq!(*load.appended.lock().unwrap(), 1);
}

#[test]
fn a_capability_call_running_past_the_time_limit_ends_the_step_with_it() {
    let mut load = FixedLoad::new();
    load.query_stalls = Some(None);
    let result = engine().run_step(
        &step("verify_checksums", &["staged-sql"], "time_limit_ms = 200\n"),
        &context(),
        Arc::new(load),
        control(),
    );
    assert_eq!(
        result,
        Err(StepError::TimeLimit {
            step: "s".into(),
            limit_ms: 200
        })
    );
}

#[test]
fn a_stopped_run_ends_its_step_in_a_capability_call_or_in_its_own_code() {
    let runtime = control().runtime.clone();
    // The query stops the run, then never answers: the step ends stopped,
    // long before its hour.
    let stop = CancellationToken::new();
    let mut load = FixedLoad::new();
    load.query_stalls = Some(Some(stop.clone()));
    let result = engine().run_step(
        &step(
            "verify_checksums",
            &["staged-sql"],
            "time_limit_ms = 3600000\n",
        ),
        &context(),
        Arc::new(load),
        &RunControl::new(runtime.clone(), stop),
    );
    assert_eq!(result, Err(StepError::Stopped { step: "s".into() }));

    // A run stopped already: a step that loops ends at the first tick.
    let stop = CancellationToken::new();
    stop.cancel();
    let result = engine().run_step(
        &step("loop_forever", &[], "time_limit_ms = 3600000\n"),
        &context(),
        Arc::new(FixedLoad::new()),
        &RunControl::new(runtime, stop),
    );
    assert_eq!(result, Err(StepError::Stopped { step: "s".into() }));
}

#[test]
fn a_restart_loads_the_compiled_steps_and_they_run_as_compiled_ones() {
    let dir = tempfile::tempdir().unwrap();
    let counts = |engine: &PipelineEngine| {
        (
            engine.compiled.load(std::sync::atomic::Ordering::Relaxed),
            engine.loaded.load(std::sync::atomic::Ordering::Relaxed),
        )
    };
    let first = PipelineEngine::new().unwrap();
    first.keep_compiled_in(dir.path().to_path_buf());
    first.precompile_builtins().unwrap();
    let builtins = builtin::names().count();
    assert_eq!(counts(&first), (builtins, 0));
    // The next process: the same folder, nothing compiled.
    let next = PipelineEngine::new().unwrap();
    next.keep_compiled_in(dir.path().to_path_buf());
    next.precompile_builtins().unwrap();
    assert_eq!(counts(&next), (0, builtins));
    let mut context = context();
    context.check_sum = vec![("count(*)".into(), "99".into())];
    let verify = step("verify_checksums", &["staged-sql"], "");
    let (error_type, items) = next
        .run_step(&verify, &context, Arc::new(FixedLoad::new()), control())
        .unwrap()
        .unwrap();
    assert_eq!(error_type, "CheckSumError");
    assert_eq!(
        items[0].error_message,
        "Checksum mismatch for count(*): expected 99, actual 100"
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines");
    let manifest = Manifest::load(PipelineKind::Load, &dir.join("load.toml")).unwrap();
    let load = Arc::new(FixedLoad::new());
    let outcome = next
        .run_pipeline(&manifest, &self::context(), load.clone(), control())
        .unwrap();
    assert_eq!(outcome, PipelineOutcome::Passed);
    assert_eq!(*load.appended.lock().unwrap(), 1);
}

/// A measurement, not a check: what a step costs the host beyond its own
/// work (a fresh store and WASI context, instantiation from the
/// `InstancePre`, the call, the verdict, the drop), for a step that ends at
/// once (`misbehave` answering an unknown misbehaviour). Prints p50 and p99:
/// `cargo test -p lakehost --lib --features test-steps -- --ignored
/// step_overhead --nocapture` (optimised dependencies, as the dev profile
/// builds them).
#[test]
#[ignore = "a measurement: prints figures and asserts no time"]
fn step_overhead() {
    let engine = engine();
    let step = step("misbehave", &[], "config = { how = \"nothing\" }");
    let load: Arc<dyn LoadData> = Arc::new(FixedLoad::new());
    let run = || engine.run_step(&step, &context(), load.clone(), control());
    assert!(
        matches!(run(), Err(StepError::Reported { ref message, .. }) if message.contains("unknown misbehaviour")),
        "the step ends at once with its own error"
    );
    let mut micros: Vec<f64> = (0..20_000)
        .map(|_| {
            let began = std::time::Instant::now();
            let _ = std::hint::black_box(run());
            began.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q) as usize];
    println!(
        "step instantiate + run + drop: p50 {:.1} µs, p99 {:.1} µs, min {:.1} µs ({} runs)",
        at(0.5),
        at(0.99),
        micros[0],
        micros.len()
    );
}

/// A step built against `lakehost:pipeline@0.1.0` and kept as it was built
/// (`host/tests/fixtures/reject_columns@0.1.0.wasm`, the example step of
/// this release) loads and runs on this host. While 0.1.0 is the current
/// world this is any step; once `wit/` moves on it is the compatibility
/// policy's test (`wit/README.md`): a step built against an older `0.1.x`
/// keeps loading. Never rebuild the fixture.
#[test]
fn a_step_built_against_lakehost_pipeline_0_1_0_keeps_loading_and_running() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/reject_columns@0.1.0.wasm");
    let bytes = std::fs::read(&fixture).unwrap();
    let import = b"lakehost:pipeline/staged-files@0.1.0";
    assert!(
        bytes.windows(import.len()).any(|w| w == import),
        "the fixture imports the 0.1.0 interfaces"
    );
    let text = "version = 1\n[[steps]]\nname = \"old\"\ncomponent = \"reject_columns@0.1.0.wasm\"\n\
         grants = [\"staged-files\", \"log\"]\n[steps.config]\nforbidden = [\"trip_id\"]\n";
    let step = Manifest::parse(
        PipelineKind::Load,
        text,
        "test.toml",
        fixture.parent().unwrap(),
    )
    .unwrap()
    .steps
    .remove(0);
    engine()
        .check_step(PipelineKind::Load, &step.component)
        .unwrap();
    let (error_type, items) = engine()
        .run_step(&step, &context(), Arc::new(FixedLoad::new()), control())
        .unwrap()
        .expect("it fails the load: trip_id is forbidden");
    assert_eq!(error_type, "ValidationError");
    assert_eq!(items[0].error_type, "UNEXPECTED_COLUMN");
    assert!(items[0].error_message.contains("trip_id"), "{items:?}");
}

#[test]
fn a_component_not_had_names_its_step_and_no_step_runs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines");
    let mut manifest = Manifest::load(PipelineKind::Load, &dir.join("load.toml")).unwrap();
    let digest = format!("sha256:{}", "0".repeat(64));
    manifest.steps[2].component = ComponentSource::Stored(digest);
    let load = Arc::new(FixedLoad::new());
    let (outcome, judged) =
        engine().run_pipeline_judged(&manifest, &context(), load.clone(), control());
    assert!(
        matches!(outcome, Err(StepError::Component { ref step, .. }) if step == "verify_checksums")
    );
    let outcomes: Vec<&str> = judged.iter().map(|j| j.outcome.as_str()).collect();
    assert_eq!(
        outcomes,
        ["not run", "not run", "error", "not run", "not run"]
    );
    assert!(
        judged[2]
            .message
            .as_deref()
            .unwrap()
            .contains("was not made ready")
    );
    assert_eq!(*load.appended.lock().unwrap(), 0);
}
