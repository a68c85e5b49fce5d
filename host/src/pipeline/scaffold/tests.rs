//! Unit tests of the scaffold: what `lakehost pipeline new-step` writes,
//! kept in step with the plugins and the WIT.

use std::path::Path;

use super::*;
use crate::pipeline::manifest::{ComponentSource, Manifest};

fn request(name: &str, kind: PipelineKind, language: Language, dir: &Path) -> NewStep {
    NewStep {
        name: name.into(),
        kind,
        language,
        dir: dir.into(),
    }
}

fn every_request(dir: &Path) -> Vec<NewStep> {
    let mut all = Vec::new();
    for kind in [PipelineKind::Load, PipelineKind::Daily] {
        for language in [Language::Rust, Language::Python] {
            all.push(request("fare-guard", kind, language, dir));
        }
    }
    all
}

fn file<'a>(files: &'a [(PathBuf, Vec<u8>)], path: &str) -> &'a str {
    let bytes = &files
        .iter()
        .find(|(p, _)| p == Path::new(path))
        .unwrap_or_else(|| panic!("no {path}"))
        .1;
    std::str::from_utf8(bytes).unwrap()
}

#[test]
fn names_become_a_crate_a_step_and_a_type() {
    let names = Names::of("fare-guard_2").unwrap();
    assert_eq!(names.krate, "fare-guard_2");
    assert_eq!(names.step, "fare_guard_2");
    assert_eq!(names.type_name, "FareGuard2");
    for bad in [
        "",
        "Fare",
        "2fare",
        "fare guard",
        "fare.guard",
        "-fare",
        "färe",
    ] {
        assert!(
            matches!(Names::of(bad), Err(ScaffoldError::BadName(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn every_template_is_filled_in_and_every_manifest_parses_for_its_pipeline() {
    let dir = Path::new("/authors/fare-guard");
    for request in every_request(dir) {
        let names = Names::of(&request.name).unwrap();
        let files = project_files(&request, &names);
        for (path, bytes) in &files {
            if let Ok(text) = std::str::from_utf8(bytes) {
                assert!(!text.contains("{{"), "{path:?} of {request:?}");
            }
        }
        let manifest = Manifest::parse(
            request.kind,
            file(&files, "manifest.toml"),
            "manifest.toml",
            dir,
        )
        .unwrap_or_else(|e| panic!("{request:?}: {e}"));
        let ours = manifest
            .steps
            .iter()
            .find(|step| step.name == "fare_guard")
            .expect("the step is in its manifest");
        match &ours.component {
            ComponentSource::File(file) => assert_eq!(
                file.path(),
                dir.join(wasm_path(request.language, "fare_guard"))
            ),
            builtin => panic!("{request:?}: a file component, not {builtin:?}"),
        }
        let names: Vec<&str> = manifest.steps.iter().map(|s| s.name.as_str()).collect();
        match request.kind {
            PipelineKind::Load => assert_eq!(
                names,
                [
                    "validate_parquet",
                    "fare_guard",
                    "enforce_service_clients",
                    "verify_checksums",
                    "match_schema",
                    "insert"
                ]
            ),
            PipelineKind::Daily => assert_eq!(names, ["fare_guard"]),
        }
        // The folder's own WIT is the server's.
        for (name, text) in wit_package::FILES {
            assert_eq!(file(&files, &format!("wit/{name}")), *text);
        }
        let readme = file(&files, "README.md");
        assert!(readme.contains("lakehost pipeline dry-run"), "{readme}");
    }
}

#[test]
fn a_rust_project_uses_the_wit_bindgen_and_the_lock_of_the_built_in_steps() {
    let plugins = include_str!("../../../../plugins/Cargo.toml");
    let ours = plugins
        .lines()
        .find(|line| line.starts_with("wit-bindgen ="))
        .unwrap();
    assert!(CARGO_TOML.lines().any(|line| line == ours), "{ours}");
    let request = request(
        "fare-guard",
        PipelineKind::Load,
        Language::Rust,
        Path::new("x"),
    );
    let files = project_files(&request, &Names::of("fare-guard").unwrap());
    let cargo = file(&files, "Cargo.toml");
    assert!(cargo.contains("name = \"fare-guard\""), "{cargo}");
    assert!(cargo.contains("world = \"step\""), "{cargo}");
    assert!(file(&files, "src/lib.rs").contains("struct FareGuard;"));
    assert!(file(&files, "Cargo.lock").contains("name = \"wit-bindgen\""));
    assert!(file(&files, ".cargo/config.toml").contains("stack-size=65536"));
}

#[test]
fn the_samples_are_three_trips_and_one_has_a_forbidden_column() {
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    for (email, columns) in [(false, 3), (true, 4)] {
        let bytes = bytes::Bytes::from(sample_parquet(email));
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
        assert_eq!(batches[0].num_columns(), columns);
    }
}

#[test]
fn create_writes_into_a_new_or_empty_folder_only() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("fare-guard");
    let new = request("fare-guard", PipelineKind::Load, Language::Rust, &dir);
    let written = create(&new).unwrap();
    assert!(written.contains(&PathBuf::from("src/lib.rs")));
    assert!(dir.join("sample/trips_with_email.parquet").is_file());
    let before = std::fs::read(dir.join("src/lib.rs")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), b"// the author's work").unwrap();

    // A second run leaves the author's work alone.
    assert!(matches!(create(&new), Err(ScaffoldError::NotEmpty(_))));
    assert_eq!(
        std::fs::read(dir.join("src/lib.rs")).unwrap(),
        b"// the author's work"
    );
    assert_ne!(before, b"// the author's work");

    // An empty folder is fine; a file where the folder should be is not.
    let empty = root.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    create(&request("a", PipelineKind::Daily, Language::Python, &empty)).unwrap();
    assert!(empty.join("app.py").is_file());
    let taken = root.path().join("taken");
    std::fs::write(&taken, b"a file").unwrap();
    assert!(matches!(
        create(&request("a", PipelineKind::Load, Language::Rust, &taken)),
        Err(ScaffoldError::Io(..))
    ));
    assert!(matches!(
        create(&request(
            "A",
            PipelineKind::Load,
            Language::Rust,
            &root.path().join("b")
        )),
        Err(ScaffoldError::BadName(_))
    ));
    assert!(!root.path().join("b").exists());
}
