//! Golden tests of manifests: the shipped ones, valid ones and invalid ones
//! (each error naming the file and the key), and the org lookup with its
//! built-in fallback. Tests only; nothing here is compiled into the server.

use super::*;
use crate::pipeline::{
    builtin,
    files::{PipelineFiles, tests as files_tests},
};

fn parse(text: &str) -> Result<Manifest, ManifestError> {
    Manifest::parse(
        PipelineKind::Load,
        text,
        "test.toml",
        Path::new("/manifests"),
    )
}

#[test]
fn the_shipped_manifests_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines");
    let manifest = Manifest::load(PipelineKind::Load, &dir.join("load.toml")).unwrap();
    let names: Vec<&str> = manifest.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "validate_parquet",
            "enforce_service_clients",
            "verify_checksums",
            "match_schema",
            "insert"
        ]
    );
    let insert = manifest.steps.last().unwrap();
    assert!(insert.grants.contains(&Capability::LakeAppend));
    assert!(
        manifest.steps[..4]
            .iter()
            .all(|s| !s.grants.contains(&Capability::LakeAppend)),
        "only the insert step may append"
    );
    let daily = Manifest::load(PipelineKind::Daily, &dir.join("daily.toml")).unwrap();
    assert!(
        daily
            .steps
            .iter()
            .any(|s| s.component == ComponentSource::Builtin("sql_transform".into())),
        "the default daily run refreshes insights with SQL"
    );
}

#[test]
fn each_pipeline_takes_only_its_own_capabilities_and_builtins() {
    let daily_step_in_load =
        parse("version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:sql_transform\"\n")
            .unwrap_err();
    assert_eq!(daily_step_in_load.key, "steps[0].component");
    assert!(
        daily_step_in_load
            .problem
            .contains("not one of the built-in load steps"),
        "{daily_step_in_load}"
    );
    let lake_sql_in_load = parse(
        "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\ngrants = [\"log\", \"lake-sql\"]\n",
    )
    .unwrap_err();
    assert_eq!(lake_sql_in_load.key, "steps[0].grants[1]");
    assert!(
        lake_sql_in_load
            .problem
            .contains("`lake-sql` is not a capability of load steps"),
        "{lake_sql_in_load}"
    );
    let daily =
        |text: &str| Manifest::parse(PipelineKind::Daily, text, "daily.toml", Path::new("/m"));
    let append_in_daily = daily(
        "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:sql_transform\"\ngrants = [\"lake-append\"]\n",
    )
    .unwrap_err();
    assert!(
        append_in_daily.problem.contains("daily-run steps"),
        "{append_in_daily}"
    );
    let load_step_in_daily =
        daily("version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\n")
            .unwrap_err();
    assert!(
        load_step_in_daily.problem.contains("sql_transform"),
        "the message lists the daily built-ins: {load_step_in_daily}"
    );
    let good = daily(
        "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:sql_transform\"\ngrants = [\"lake-sql\", \"log\"]\n",
    )
    .unwrap();
    assert_eq!(good.kind, PipelineKind::Daily);
}

#[test]
fn a_valid_manifest_with_a_file_component_and_config() {
    let manifest = parse(
        r#"
        version = 1
        [[steps]]
        name = "reject_columns"
        component = "steps/reject.wasm"
        grants = ["staged-files", "log"]
        time_limit_ms = 500
        [steps.config]
        forbidden = ["ssn"]
        "#,
    )
    .unwrap();
    let step = &manifest.steps[0];
    let ComponentSource::File(file) = &step.component else {
        panic!("a file component: {:?}", step.component);
    };
    assert_eq!(file.path(), Path::new("/manifests/steps/reject.wasm"));
    assert_eq!(step.component.to_string(), "reject.wasm");
    assert_eq!(step.time_limit_ms, 500);
    assert_eq!(step.memory_limit_bytes, DEFAULT_MEMORY_LIMIT_BYTES);
    assert_eq!(step.config_json, r#"{"forbidden":["ssn"]}"#);
}

#[test]
fn invalid_manifests_name_the_file_and_the_key() {
    let cases = [
        (
            "version = 1\nsteps = []\nextra = 1\n",
            "extra",
            "unknown field `extra`",
        ),
        ("steps = []\n", "<root>", "missing field `version`"),
        ("version = 2\nsteps = []\n", "version", "not supported"),
        ("version = 1\nsteps = []\n", "steps", "at least one step"),
        (
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\ntimeout = 1\n",
            "steps[0].timeout",
            "unknown field `timeout`",
        ),
        (
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\ngrants = [\"network\"]\n",
            "steps[0].grants[0]",
            "unknown variant `network`",
        ),
        (
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:nope\"\n",
            "steps[0].component",
            "no built-in component `nope`",
        ),
        (
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"http://x/y\"\n",
            "steps[0].component",
            ".wasm",
        ),
        (
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\n",
            "steps[1].name",
            "listed twice",
        ),
        (
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:insert\"\nmemory_limit_bytes = 10\n",
            "steps[0].memory_limit_bytes",
            "at least",
        ),
        (
            "version = ",
            "<toml>",
            "not valid TOML at line 1, column 11",
        ),
        (
            "version = 1\n[[steps]\nname = \"a\"\n",
            "<toml>",
            "not valid TOML at line 2, column 8",
        ),
        (
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"sha256:00\"\n",
            "steps[0].component",
            "is named only in a version deployed over the API",
        ),
        // A component stays inside the pipeline folder: no absolute path,
        // no `..` above the manifest's folder (the parse's base here).
        (
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"/tmp/x.wasm\"\n",
            "steps[0].component",
            "absolute paths are refused; name the file relative to the manifest",
        ),
        (
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"../../../tmp/x.wasm\"\n",
            "steps[0].component",
            "`../../../tmp/x.wasm` leaves the pipeline folder",
        ),
        (
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"steps/../../x.wasm\"\n",
            "steps[0].component",
            "leaves the pipeline folder",
        ),
    ];
    for (text, key, problem) in cases {
        let error = parse(text).unwrap_err();
        assert_eq!(error.file, "test.toml", "{text}");
        assert_eq!(error.key, key, "{text}: {error}");
        assert!(error.problem.contains(problem), "{text}: {error}");
    }
}

#[test]
fn an_org_runs_its_own_manifest_else_the_shared_one_else_the_built_in() {
    let dir = tempfile::tempdir().unwrap();
    for kind in [PipelineKind::Load, PipelineKind::Daily] {
        let manifest = org_manifest(kind, &PipelineFiles::new(dir.path()), "demo", false).unwrap();
        assert_eq!(
            manifest.origin,
            format!("built-in pipelines/{}", kind.file_name())
        );
        assert_eq!(
            manifest.steps,
            Manifest::parse(kind, builtin::manifest(kind), "", Path::new("."))
                .unwrap()
                .steps
        );
    }

    let shared = "version = 1\n[[steps]]\nname = \"shared\"\ncomponent = \"builtin:insert\"\n";
    std::fs::write(dir.path().join("load.toml"), shared).unwrap();
    let own = dir.path().join("orgs/demo");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(
        own.join("load.toml"),
        "version = 1\n[[steps]]\nname = \"own\"\ncomponent = \"builtin:pause\"\n",
    )
    .unwrap();
    let names = |org: &str, test_steps: bool| {
        org_manifest(
            PipelineKind::Load,
            &PipelineFiles::new(dir.path()),
            org,
            test_steps,
        )
        .map(|m| m.steps.into_iter().map(|s| s.name).collect::<Vec<_>>())
        .map_err(|e| e.to_string())
    };
    assert_eq!(names("other", false), Ok(vec!["shared".to_string()]));
    assert_eq!(names("demo", true), Ok(vec!["own".to_string()]));
    // A test step is refused unless allowed; the message names the file
    // relative to the pipelines folder.
    assert_eq!(
        names("demo", false),
        Err("orgs/demo/load.toml: steps[0].component: `pause` is a test step; this server runs it only with pipeline.test_steps = true".to_string())
    );
}

#[test]
fn an_org_manifest_may_climb_to_the_pipeline_folder_and_no_further() {
    let files = PipelineFiles::new("/srv/pipelines");
    let parse = |component: &str| {
        Manifest::parse_in(
            PipelineKind::Load,
            &format!("version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"{component}\"\n"),
            "orgs/acme/load.toml",
            Path::new("/srv/pipelines/orgs/acme"),
            &files,
        )
    };
    let shared = parse("../../shared/./guard.wasm").unwrap();
    let ComponentSource::File(file) = &shared.steps[0].component else {
        panic!("a file component");
    };
    assert_eq!(
        file.path(),
        Path::new("/srv/pipelines/orgs/acme/../../shared/./guard.wasm")
    );
    let refused = parse("../../../guard.wasm").unwrap_err();
    assert_eq!(refused.key, "steps[0].component");
    assert_eq!(
        refused.problem,
        "`../../../guard.wasm` leaves the pipeline folder"
    );
}

/// A manifest is read as a component is: a regular file, bounded, inside
/// the folder; a FIFO named `load.toml` neither hangs the reader nor is
/// passed over (it is the org's manifest, refused).
#[test]
fn a_manifest_that_is_no_regular_file_or_too_big_or_outside_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let org = dir.path().join("orgs/demo");
    std::fs::create_dir_all(&org).unwrap();
    let files = PipelineFiles::new(dir.path());
    let load =
        |org: &str| org_manifest(PipelineKind::Load, &files, org, false).map_err(|e| e.to_string());

    let fifo = org.join("load.toml");
    files_tests::mkfifo(&fifo);
    let refused = files_tests::within_a_minute(move || load_fifo(&fifo));
    assert_eq!(
        refused,
        "orgs/demo/load.toml: <file>: cannot read: not a regular file but a FIFO"
    );
    std::fs::remove_file(org.join("load.toml")).unwrap();

    std::fs::File::create(org.join("load.toml"))
        .unwrap()
        .set_len(crate::pipeline::files::MAX_MANIFEST_BYTES + 1)
        .unwrap();
    assert_eq!(
        load("demo").unwrap_err(),
        "orgs/demo/load.toml: <file>: cannot read: 1048577 bytes, more than the manifest limit = 1048576"
    );
    std::fs::remove_file(org.join("load.toml")).unwrap();

    let elsewhere = outside.path().join("load.toml");
    std::fs::write(
        &elsewhere,
        "version = 1\n[[steps]]\nname = \"x\"\ncomponent = \"builtin:insert\"\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&elsewhere, org.join("load.toml")).unwrap();
    let refused = load("demo").unwrap_err();
    assert_eq!(
        refused,
        "orgs/demo/load.toml: <file>: cannot read: it lies outside the pipeline folder (through a symlink or `..`)"
    );
    assert!(!refused.contains(&dir.path().display().to_string()));
}

/// The FIFO case's reader, on its own thread (a hang fails the test).
fn load_fifo(fifo: &Path) -> String {
    let dir = fifo.parent().unwrap().parent().unwrap().parent().unwrap();
    org_manifest(PipelineKind::Load, &PipelineFiles::new(dir), "demo", false)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_deployed_manifest_names_stored_components_by_digest_and_nothing_by_path() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let text = |component: &str| {
        format!(
            "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"{component}\"\n\
             grants = [\"lake-append\"]\n"
        )
    };
    let parse = |component: &str| {
        Manifest::parse_naming(
            PipelineKind::Load,
            &text(component),
            "posted",
            ComponentNames::Stored,
        )
    };
    let manifest = parse(&digest).unwrap();
    assert_eq!(
        manifest.steps[0].component,
        ComponentSource::Stored(digest.clone())
    );
    assert_eq!(manifest.steps[0].component.to_string(), digest);
    assert!(manifest.check_appends().is_ok());
    for refused in [
        "guard.wasm",
        "sha256:AB",
        "sha256:abc",
        &format!("{digest}0"),
    ] {
        let error = parse(refused).unwrap_err();
        assert_eq!(error.key, "steps[0].component", "{refused}");
        assert!(
            error.problem.contains("sha256:<64 lowercase hex digits>"),
            "{error}"
        );
    }
    let no_append = parse(&digest).map(|mut m| {
        m.steps[0].grants.clear();
        m
    });
    assert_eq!(no_append.unwrap().check_appends().unwrap_err().key, "steps");
}

#[test]
fn the_capability_names_are_the_configs() {
    let names: Vec<&str> = [PipelineKind::Load, PipelineKind::Daily]
        .iter()
        .flat_map(|kind| Capability::of(*kind))
        .map(|c| c.name())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut configured = crate::config::CAPABILITY_NAMES.to_vec();
    configured.sort();
    assert_eq!(names, configured);
}
