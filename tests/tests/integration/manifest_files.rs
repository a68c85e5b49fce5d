//! Issue 45, finding 5: a manifest naming a huge, endless or outside
//! component file. The server reads a step's `.wasm` only from inside
//! `pipeline.dir` (symlinks resolved), only a regular file, and only up to
//! `pipeline.max_component_bytes`. A manifest naming anything else fails its
//! org's commits with InternalError naming the step, the file and the
//! reason, as any invalid manifest does, before any step runs (nothing is
//! written); the server goes on serving and another org's commit runs the
//! default pipeline meanwhile. `pipeline check` (the library door the
//! command prints) refuses the same files for the same reasons.

use std::{path::Path, sync::mpsc, time::Duration};

use lakehost::pipeline::{PipelineEngine, PipelineKind, check::check_manifest};
use lakehost_tests::*;
use serde_json::{Value, json};

/// The cap the server test configures: small, so a sparse file of a few
/// megabytes is over it.
const CAP: u64 = 1 << 20;

/// The example step (a real load component), as an operator's file.
fn guard() -> &'static [u8] {
    lakehost::pipeline::builtin::component("reject_columns")
        .unwrap()
        .1
}

/// The default load pipeline with a `guard` step (step 5) naming
/// `component`.
fn manifest_with_guard(component: &str) -> String {
    format!(
        "{}\n[[steps]]\nname = \"guard\"\ncomponent = \"{component}\"\n\
         grants = [\"staged-files\", \"log\"]\n[steps.config]\nforbidden = [\"no_such_column\"]\n",
        default_load_manifest()
    )
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// A sparse file of `bytes` (no disk used).
fn sparse(path: &Path, bytes: u64) {
    std::fs::File::create(path).unwrap().set_len(bytes).unwrap();
}

/// Commits two trips of service client 1 on `host`; the ended resource.
async fn commit_two_trips(app: &TestApp, host: &str, token: &str) -> Value {
    let id = app
        .start_commit_on(host, token, &trips_batch(&[1], 2), json!({"count(*)": 2}))
        .await;
    app.wait_for_load_on(host, token, &id).await
}

/// `pipelines/` (the server's `pipeline.dir`) beside `outside/`, which holds
/// a real component the manifests must not reach.
struct Layout {
    _root: tempfile::TempDir,
    pipelines: std::path::PathBuf,
    outside: std::path::PathBuf,
    org: std::path::PathBuf,
}

fn layout() -> Layout {
    let root = tempfile::tempdir().unwrap();
    let pipelines = root.path().join("pipelines");
    let outside = root.path().join("outside");
    let org = pipelines.join("orgs/demo");
    std::fs::create_dir_all(&org).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("guard.wasm"), guard()).unwrap();
    Layout {
        _root: root,
        pipelines,
        outside,
        org,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_naming_a_huge_endless_or_outside_file_fails_only_its_orgs_commits() {
    let files = layout();
    let dir = files.pipelines.clone();
    let app = spawn_app_with(|config| {
        config.pipeline.dir = dir;
        config.pipeline.max_component_bytes = CAP;
    })
    .await;
    let demo = app.token_for(&["ZoneAdmin"], "[0]");
    let other = app.org_token_for("other", &["ZoneAdmin"], "[0]");
    let org = &files.org;

    // What each case names, and the one message of its InternalError.
    // Cases that today's reader would follow out of the folder or read
    // come first; the ones it would block or run out of memory on last.
    let absolute = files.outside.join("guard.wasm").display().to_string();
    std::os::unix::fs::symlink(files.outside.join("guard.wasm"), org.join("link.wasm")).unwrap();
    std::os::unix::fs::symlink(&files.outside, org.join("elsewhere")).unwrap();
    std::fs::create_dir(org.join("folder.wasm")).unwrap();
    sparse(&org.join("big.wasm"), 3 << 20);
    mkfifo(&org.join("fifo.wasm"));
    sparse(&org.join("huge.wasm"), 2 << 30);
    std::os::unix::fs::symlink("/dev/zero", org.join("zero.wasm")).unwrap();
    let outside_folder = "it lies outside the pipeline folder (through a symlink or `..`)";
    let cases: Vec<(&str, String)> = vec![
        (
            "../../../outside/guard.wasm",
            "pipeline manifest: orgs/demo/load.toml: steps[5].component: \
             `../../../outside/guard.wasm` leaves the pipeline folder"
                .into(),
        ),
        (
            &absolute,
            "pipeline manifest: orgs/demo/load.toml: steps[5].component: absolute paths are \
             refused; name the file relative to the manifest, inside the pipeline folder"
                .into(),
        ),
        (
            "link.wasm",
            format!("step guard (link.wasm) could not be loaded: {outside_folder}"),
        ),
        (
            "elsewhere/guard.wasm",
            format!("step guard (guard.wasm) could not be loaded: {outside_folder}"),
        ),
        (
            "folder.wasm",
            "step guard (folder.wasm) could not be loaded: not a regular file but a directory"
                .into(),
        ),
        (
            "big.wasm",
            "step guard (big.wasm) could not be loaded: 3145728 bytes, more than \
             pipeline.max_component_bytes = 1048576"
                .into(),
        ),
        (
            "fifo.wasm",
            "step guard (fifo.wasm) could not be loaded: not a regular file but a FIFO".into(),
        ),
        (
            "huge.wasm",
            "step guard (huge.wasm) could not be loaded: 2147483648 bytes, more than \
             pipeline.max_component_bytes = 1048576"
                .into(),
        ),
        (
            "zero.wasm",
            format!("step guard (zero.wasm) could not be loaded: {outside_folder}"),
        ),
    ];

    let server_dirs = files.pipelines.display().to_string();
    for (component, message) in &cases {
        std::fs::write(org.join("load.toml"), manifest_with_guard(component)).unwrap();
        // A 2 GiB file (or an endless one) is refused by what it is, not
        // read: the process does not grow by anything near it.
        let (failed, grown) = rss_growth_while(commit_two_trips(&app, ORG_HOST, &demo)).await;
        assert_eq!(failed["LoadStatus"], "FAIL", "{component}: {failed}");
        assert_eq!(
            failed["ErrorType"], "InternalError",
            "{component}: {failed}"
        );
        assert_eq!(
            failed["ErrorMessages"],
            json!([message]),
            "{component}: {failed}"
        );
        assert!(
            !failed.to_string().contains(&server_dirs),
            "{component}: {failed}"
        );
        assert!(
            grown < 1 << 30,
            "{component}: the server grew {grown} bytes"
        );

        // The server goes on, and another org runs the default pipeline.
        let theirs = commit_two_trips(&app, OTHER_ORG_HOST, &other).await;
        assert_eq!(theirs["LoadStatus"], "SUCCESS", "{component}: {theirs}");
    }

    // The same step from inside the folder, within the cap, runs; none of
    // the refused commits wrote a row.
    std::fs::write(org.join("guard.wasm"), guard()).unwrap();
    std::fs::write(org.join("load.toml"), manifest_with_guard("guard.wasm")).unwrap();
    let done = commit_two_trips(&app, ORG_HOST, &demo).await;
    assert_eq!(done["LoadStatus"], "SUCCESS", "{done}");
    let rows = app
        .rows_of(ORG_HOST, &demo, "SELECT count(*) FROM trips")
        .await;
    assert_eq!(rows, [[Some("2".to_string())]]);
    let theirs = app
        .rows_of(OTHER_ORG_HOST, &other, "SELECT count(*) FROM trips")
        .await;
    assert_eq!(theirs, [[Some((2 * cases.len()).to_string())]]);
}

/// Runs `work` on its own thread; panics when it has not returned within a
/// minute, so a check that blocks on a FIFO fails instead of hanging.
fn within_a_minute<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, outcome) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(work());
    });
    outcome
        .recv_timeout(Duration::from_secs(60))
        .expect("the check returned instead of blocking")
}

/// `lakehost pipeline check` judges each step on its own: one manifest
/// names every kind of refused file, each with its reason, and the usable
/// step beside them passes. The tools read no config: the cap is the
/// default 64 MiB, the folder the one a server would hold the manifest in
/// (`<dir>` of `<dir>/orgs/<org>/load.toml`).
#[test]
fn pipeline_check_refuses_the_same_files_for_the_same_reasons() {
    let files = layout();
    let org = &files.org;
    std::fs::write(org.join("guard.wasm"), guard()).unwrap();
    std::fs::create_dir_all(files.pipelines.join("shared")).unwrap();
    std::fs::write(files.pipelines.join("shared/shared.wasm"), guard()).unwrap();
    sparse(&org.join("huge.wasm"), 2 << 30);
    std::os::unix::fs::symlink("/dev/zero", org.join("zero.wasm")).unwrap();
    mkfifo(&org.join("fifo.wasm"));
    std::os::unix::fs::symlink(files.outside.join("guard.wasm"), org.join("link.wasm")).unwrap();
    let step = |name: &str, component: &str| {
        format!(
            "[[steps]]\nname = \"{name}\"\ncomponent = \"{component}\"\n\
             grants = [\"staged-files\", \"log\"]\n"
        )
    };
    // The step that writes the rows, without which `check` refuses a load
    // manifest whatever its other steps.
    const INSERT: &str = "[[steps]]\nname = \"insert\"\ncomponent = \"builtin:insert\"\n\
                          grants = [\"staged-sql\", \"lake-append\", \"log\"]\n";
    let manifest = org.join("load.toml");
    std::fs::write(
        &manifest,
        format!(
            "version = 1\n{}{}{}{}{}{}{INSERT}",
            step("huge", "huge.wasm"),
            step("zero", "zero.wasm"),
            step("fifo", "fifo.wasm"),
            step("link", "link.wasm"),
            step("shared", "../../shared/shared.wasm"),
            step("guard", "guard.wasm"),
        ),
    )
    .unwrap();
    let check = |manifest: std::path::PathBuf| {
        within_a_minute(move || {
            let engine = PipelineEngine::shared().unwrap();
            check_manifest(&engine, PipelineKind::Load, &manifest)
        })
    };
    let outside_folder = "it lies outside the pipeline folder (through a symlink or `..`)";
    let verdicts: Vec<(String, String, Option<String>)> = check(manifest.clone())
        .unwrap()
        .into_iter()
        .map(|c| (c.step, c.component, c.problem))
        .collect();
    let expected = |step: &str, component: &str, problem: Option<&str>| {
        (step.into(), component.into(), problem.map(String::from))
    };
    assert_eq!(
        verdicts,
        [
            expected(
                "huge",
                "huge.wasm",
                Some("2147483648 bytes, more than pipeline.max_component_bytes = 67108864")
            ),
            expected("zero", "zero.wasm", Some(outside_folder)),
            expected("fifo", "fifo.wasm", Some("not a regular file but a FIFO")),
            expected("link", "link.wasm", Some(outside_folder)),
            expected("shared", "shared.wasm", None),
            expected("guard", "guard.wasm", None),
            expected("insert", "builtin:insert", None),
        ]
    );

    // Out of the folder by `..`, or by an absolute path: the manifest's own
    // error, naming the step's key.
    for (component, problem) in [
        (
            "../../../outside/guard.wasm".to_string(),
            "`../../../outside/guard.wasm` leaves the pipeline folder",
        ),
        (
            files.outside.join("guard.wasm").display().to_string(),
            "absolute paths are refused; name the file relative to the manifest, inside the \
             pipeline folder",
        ),
    ] {
        std::fs::write(
            &manifest,
            format!("version = 1\n{}", step("guard", &component)),
        )
        .unwrap();
        let refused = check(manifest.clone()).unwrap_err();
        assert_eq!(refused.key, "steps[0].component", "{refused}");
        assert_eq!(refused.problem, problem, "{refused}");
    }
}
