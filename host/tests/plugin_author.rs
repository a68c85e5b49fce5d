//! A plugin author outside this repository, as "Writing a step"
//! (docs/writing-a-step.md) walks them: `lakehost pipeline new-step` in an
//! empty folder of their own, a build with their own tools (cargo for
//! wasm32-wasip2, cargo component, componentize-py for Python), then
//! `pipeline check` and `pipeline dry-run`, then the steps copied next to an
//! org's manifest on a running server, where real commits run them.
//!
//! cargo component comes from `LAKEHOST_TEST_CARGO_COMPONENT` (`eval
//! "$(.ci/cargo-component)"`), componentize-py from the venv of
//! `LAKEHOST_TEST_PYTHON` (`eval "$(.ci/python)"`): the test that needs them
//! is reported ignored unless the build saw both (host/build.rs), and in
//! CI it must run.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

mod common;

use common::{author, lakehost, serve};

/// A tool of the author's, which the build saw (`lakehost_has_cargo_component`
/// and `lakehost_has_python`, or `CI`): a missing one fails the test.
fn author_tool(what: &str, found: Option<PathBuf>, how: &str) -> PathBuf {
    found
        .filter(|path| path.is_file())
        .unwrap_or_else(|| panic!("{what} is missing: {how}"))
}

fn cargo_component() -> PathBuf {
    author_tool(
        "cargo component",
        std::env::var_os("LAKEHOST_TEST_CARGO_COMPONENT").map(PathBuf::from),
        "eval \"$(.ci/cargo-component)\" first",
    )
}

fn componentize_py() -> PathBuf {
    author_tool(
        "componentize-py",
        std::env::var_os("LAKEHOST_TEST_PYTHON")
            .map(|python| PathBuf::from(python).with_file_name("componentize-py")),
        "eval \"$(.ci/python)\" first",
    )
}

/// Runs it; its output, asserting it succeeded.
fn succeeds(command: &mut Command, what: &str) -> Output {
    let output = command.stderr(Stdio::piped()).output().unwrap();
    assert!(
        output.status.success(),
        "{what}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `lakehost pipeline <args>` in `dir`: exit code and standard output.
fn pipeline(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let output = lakehost()
        .arg("pipeline")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    (output.status.code(), format!("{stdout}{stderr}"))
}

/// What the README of every load project runs: the check, then a dry run
/// over each sample (the second fails at the step, naming the column).
fn check_and_dry_run_a_load_step(project: &Path, step: &str) {
    let (code, out) = pipeline(project, &["check", "manifest.toml"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!("step {step} ({step}.wasm): ok")),
        "{out}"
    );
    let dry_run = |sample: &str| {
        pipeline(
            project,
            &[
                "dry-run",
                "--manifest",
                "manifest.toml",
                "--table",
                "trips",
                "--check-sum",
                r#"{"count(*)": 3}"#,
                sample,
            ],
        )
    };
    let (code, out) = dry_run("sample/trips.parquet");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("step {step}: PASS")), "{out}");
    assert!(out.contains("rows appended: 3"), "{out}");
    // Its log line and the engine's line on it, with its name.
    assert!(out.contains("no forbidden columns"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("step ran") && l.contains(step) && l.contains("peak_memory_bytes")),
        "{out}"
    );
    let (code, out) = dry_run("sample/trips_with_email.parquet");
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "step {step}: FAIL ValidationError\n  UNEXPECTED_COLUMN: File file_0 has the column email, which may not be loaded into trips."
        )),
        "{out}"
    );
    assert!(!out.contains("step insert"), "{out}");
}

/// GET /v2/load/{id} until it is no longer PROCESSING.
async fn load_outcome(http: &reqwest::Client, base: &str, token: &str, id: &str) -> Value {
    for _ in 0..600 {
        let status =
            common::json_of(http.get(format!("{base}/v2/load/{id}")).bearer_auth(token)).await;
        if status["LoadStatus"] != "PROCESSING" {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("load {id} still PROCESSING after a minute");
}

/// A Rust load step: scaffolded in `home`, built with cargo, checked,
/// dry-run; then a daily-run step, dry-run over a scratch lake seeded from
/// the sample; then the load step on a server, in an org's commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_written_outside_the_repository_runs_in_an_orgs_commits() {
    let home = tempfile::tempdir().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    // A Rust load step: scaffolded, built with cargo, checked, dry-run.
    let (code, out) = pipeline(home.path(), &["new-step", "fare-guard"]);
    assert_eq!(code, Some(0), "{out}");
    let rust = home.path().join("fare-guard");
    succeeds(
        author(&cargo, &rust).args(["build", "--release", "--target", "wasm32-wasip2"]),
        "cargo build of the scaffolded step",
    );
    check_and_dry_run_a_load_step(&rust, "fare_guard");

    // A Rust daily-run step, dry-run over a scratch lake seeded from the sample.
    let (code, out) = pipeline(home.path(), &["new-step", "trip-counts", "--daily"]);
    assert_eq!(code, Some(0), "{out}");
    let daily = home.path().join("trip-counts");
    succeeds(
        author(&cargo, &daily).args(["build", "--release", "--target", "wasm32-wasip2"]),
        "cargo build of the scaffolded daily step",
    );
    let (code, out) = pipeline(&daily, &["check", "--daily", "manifest.toml"]);
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = pipeline(
        &daily,
        &[
            "dry-run",
            "--daily",
            "--manifest",
            "manifest.toml",
            "--seed",
            "trips=sample/trips.parquet",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("step trip_counts: PASS"), "{out}");
    assert!(
        out.contains("insights table trips_per_client: 2 rows"),
        "{out}"
    );
    // Without its source table the step fails the run, as it would on a server.
    let (code, out) = pipeline(
        &daily,
        &["dry-run", "--daily", "--manifest", "manifest.toml"],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("step trip_counts: FAIL TransformError"),
        "{out}"
    );
    // A load step is not a daily one.
    let (code, out) = pipeline(&rust, &["check", "--daily", "manifest.toml"]);
    assert_eq!(code, Some(1), "{out}");

    runs_in_an_orgs_commits(home.path(), &rust, None).await;
}

/// The author's other tools: the same Rust project built with cargo
/// component, and a Python load step built with componentize-py, checked,
/// dry-run, then both on a server, in an org's commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(lakehost_has_cargo_component, lakehost_has_python)),
    ignore = "needs cargo component and componentize-py: eval \"$(.ci/cargo-component)\" and \"$(.ci/python)\" first (README, Tests)"
)]
async fn steps_built_with_cargo_component_and_componentize_py_run_in_an_orgs_commits() {
    let home = tempfile::tempdir().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let cargo_component = cargo_component();
    let componentize_py = componentize_py();

    // The Rust project with cargo component, from a clean target folder.
    let (code, out) = pipeline(home.path(), &["new-step", "fare-guard"]);
    assert_eq!(code, Some(0), "{out}");
    let rust = home.path().join("fare-guard");
    let path = std::env::join_paths(
        std::iter::once(cargo_component.parent().unwrap().to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    succeeds(
        author(&cargo, &rust).env("PATH", path).args([
            "component",
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
        ]),
        "cargo component build of the scaffolded step",
    );
    let built = rust.join("target/wasm32-wasip2/release/fare_guard.wasm");
    assert!(built.is_file(), "cargo component wrote {}", built.display());
    check_and_dry_run_a_load_step(&rust, "fare_guard");

    // A Python load step: scaffolded, built with componentize-py.
    let (code, out) = pipeline(home.path(), &["new-step", "py-guard", "--lang", "python"]);
    assert_eq!(code, Some(0), "{out}");
    let project = home.path().join("py-guard");
    succeeds(
        author(&componentize_py, &project).args([
            "-d",
            "wit",
            "-w",
            "step",
            "componentize",
            "app",
            "-o",
            "py_guard.wasm",
        ]),
        "componentize-py of the scaffolded step",
    );
    check_and_dry_run_a_load_step(&project, "py_guard");

    runs_in_an_orgs_commits(home.path(), &rust, Some(&project.join("py_guard.wasm"))).await;
}

/// The org's manifest on a server in `home`: the default steps with the
/// author's Rust step (built in `rust`) after validate_parquet, and the
/// Python one (`python_step`) when given, their components copied beside
/// it; real commits run them.
async fn runs_in_an_orgs_commits(home: &Path, rust: &Path, python_step: Option<&Path>) {
    let built = rust.join("target/wasm32-wasip2/release/fare_guard.wasm");
    let server_dir = home.join("server");
    let org_dir = server_dir.join("pipelines/orgs/demo");
    std::fs::create_dir_all(&org_dir).unwrap();
    std::fs::copy(&built, org_dir.join("fare_guard.wasm")).unwrap();
    let manifest = std::fs::read_to_string(rust.join("manifest.toml"))
        .unwrap()
        .replace(
            "target/wasm32-wasip2/release/fare_guard.wasm",
            "fare_guard.wasm",
        );
    let manifest = match python_step {
        Some(wasm) => {
            std::fs::copy(wasm, org_dir.join("py_guard.wasm")).unwrap();
            manifest.replacen(
                "[[steps]]\nname = \"enforce_service_clients\"",
                "[[steps]]\nname = \"py_guard\"\ncomponent = \"py_guard.wasm\"\n\
                 grants = [\"staged-files\", \"log\"]\n[steps.config]\nforbidden = [\"fare\"]\n\n\
                 [[steps]]\nname = \"enforce_service_clients\"",
                1,
            )
        }
        None => manifest,
    };
    std::fs::write(org_dir.join("load.toml"), &manifest).unwrap();
    let (code, out) = pipeline(&org_dir, &["check", "load.toml"]);
    assert_eq!(code, Some(0), "{out}");

    // A broken manifest of another org: the server's watch names it in
    // the log at startup, before any commit needs it.
    let broken_org = server_dir.join("pipelines/orgs/acme");
    std::fs::create_dir_all(&broken_org).unwrap();
    std::fs::write(broken_org.join("load.toml"), "version = 1\n[[steps]]\n").unwrap();

    let log_path = server_dir.join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let (server, output, base) = serve(&server_dir, &[("RUST_LOG", "info")], log.into());
    std::thread::spawn(move || output.for_each(drop));
    let http = reqwest::Client::new();
    let token = common::demo_admin_token(&http, &base).await;
    let samples = rust.join("sample");
    let commit = |file: &str, table: &'static str| {
        let parquet = std::fs::read(samples.join(file)).unwrap();
        common::commit_parquet(&http, &base, &token, table, parquet, json!({"count(*)": 3}))
    };

    // The Rust step fails a load with a forbidden column.
    let with_email = commit("trips_with_email.parquet", "trips").await;
    let status = load_outcome(&http, &base, &token, &with_email).await;
    assert_eq!(status["LoadStatus"], "FAIL", "{status}");
    assert_eq!(status["ErrorType"], "ValidationError", "{status}");
    assert!(
        status.to_string().contains("has the column email"),
        "{status}"
    );

    // The Python step forbids `fare` (the Rust one only `email`): the sample
    // passes the first and fails at the second; with the Rust step alone it loads.
    let trips = commit("trips.parquet", "trips").await;
    let status = load_outcome(&http, &base, &token, &trips).await;
    if python_step.is_some() {
        assert_eq!(status["LoadStatus"], "FAIL", "{status}");
        assert!(
            status.to_string().contains("has the column fare"),
            "{status}"
        );
    } else {
        assert_eq!(status["LoadStatus"], "SUCCESS", "{status}");
    }
    drop(server);

    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        logged
            .lines()
            .any(|line| line.contains("a pipeline manifest is not usable")
                && line.contains("orgs/acme/load.toml")),
        "{logged}"
    );
    // Each step's log line is in the server's log with its load and name.
    assert!(
        logged
            .lines()
            .any(|line| line.contains("no forbidden columns")
                && line.contains("fare_guard")
                && line.contains(&trips)),
        "{logged}"
    );
    assert!(
        logged.lines().any(|line| line.contains("step ran")
            && line.contains("fare_guard")
            && line.contains(&with_email)),
        "{logged}"
    );
}
