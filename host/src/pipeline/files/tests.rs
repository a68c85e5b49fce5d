//! The one reader's refusals, each on a real file of a real folder: sizes
//! (sparse files cost no disk), FIFOs and devices (never blocked on),
//! symlinks and `..` (never followed out of the folder). Tests only.

use std::{path::Path, sync::mpsc, time::Duration};

use super::*;

/// Runs `work` on its own thread; panics when it has not returned within
/// a minute, so a reader that blocks fails its test instead of hanging it.
pub(crate) fn within_a_minute<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, outcome) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(work());
    });
    outcome
        .recv_timeout(Duration::from_secs(60))
        .expect("the reader returned instead of blocking")
}

/// Makes a FIFO at `path` (the `mkfifo` program: no unsafe code in tests).
pub(crate) fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

fn rules(dir: &Path, max: u64) -> PipelineFiles {
    PipelineFiles {
        dir: dir.to_path_buf(),
        max_component_bytes: max,
    }
}

/// `written` as a manifest in `dir` names it, under a cap of `max` bytes.
fn component(dir: &Path, written: &str, max: u64) -> ComponentFile {
    ComponentFile::resolve(written, dir, &rules(dir, max)).unwrap()
}

fn refusal(file: &ComponentFile) -> FileRefused {
    let file = file.clone();
    within_a_minute(move || file.open().unwrap_err())
}

#[test]
fn a_regular_file_within_its_cap_is_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let bytes: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    std::fs::write(dir.path().join("step.wasm"), &bytes).unwrap();
    let opened = component(dir.path(), "step.wasm", 1000).open().unwrap();
    let (real, len, modified) = opened.identity();
    assert_eq!(
        real,
        std::fs::canonicalize(dir.path().join("step.wasm")).unwrap()
    );
    assert_eq!(len, 1000);
    assert!(modified.is_some());
    assert_eq!(opened.read().unwrap(), bytes);
}

#[test]
fn a_file_over_the_cap_is_refused_by_its_size_and_never_read() {
    let dir = tempfile::tempdir().unwrap();
    // 2 GiB, sparse: refused by the opened file's size in an instant.
    let huge = std::fs::File::create(dir.path().join("huge.wasm")).unwrap();
    huge.set_len(2 << 30).unwrap();
    let refused = refusal(&component(dir.path(), "huge.wasm", 64 << 20));
    assert!(
        matches!(
            refused,
            FileRefused::TooLarge {
                size: 2147483648,
                max: 67108864,
                limit: "pipeline.max_component_bytes"
            }
        ),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        "2147483648 bytes, more than pipeline.max_component_bytes = 67108864"
    );
    // The cap is inclusive: one byte more is refused.
    std::fs::File::create(dir.path().join("edge.wasm"))
        .unwrap()
        .set_len(4096)
        .unwrap();
    assert_eq!(
        component(dir.path(), "edge.wasm", 4096)
            .open()
            .unwrap()
            .read()
            .unwrap()
            .len(),
        4096
    );
    assert!(matches!(
        refusal(&component(dir.path(), "edge.wasm", 4095)),
        FileRefused::TooLarge { size: 4096, .. }
    ));
}

#[test]
fn a_file_that_grows_after_the_check_is_refused_one_byte_past_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("growing.wasm");
    std::fs::write(&path, b"\0asm").unwrap();
    let opened = component(dir.path(), "growing.wasm", 100).open().unwrap();
    // After the check, it becomes 2 GiB (sparse).
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let refused = within_a_minute(move || opened.read().unwrap_err());
    assert_eq!(
        refused.to_string(),
        "it grew past pipeline.max_component_bytes = 100 while it was read"
    );
}

/// The bound itself: an endless source yields the cap and one byte, then
/// the refusal (without the bound this never returns).
#[test]
fn an_endless_source_is_read_one_byte_past_the_cap_and_no_further() {
    let refused = within_a_minute(|| {
        read_bounded(std::io::repeat(7), 0, 1 << 20, COMPONENT_LIMIT).unwrap_err()
    });
    assert!(
        matches!(refused, FileRefused::GrewPastLimit { max, .. } if max == 1 << 20),
        "{refused:?}"
    );
    let exact = read_bounded(&[7u8; 16][..], 16, 16, COMPONENT_LIMIT).unwrap();
    assert_eq!(exact, [7u8; 16]);
}

#[test]
fn fifos_directories_and_devices_are_refused_without_being_opened_or_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join("fifo.wasm"));
    let refused = refusal(&component(dir.path(), "fifo.wasm", 1 << 20));
    assert_eq!(refused.to_string(), "not a regular file but a FIFO");

    std::fs::create_dir(dir.path().join("folder.wasm")).unwrap();
    let refused = refusal(&component(dir.path(), "folder.wasm", 1 << 20));
    assert_eq!(refused.to_string(), "not a regular file but a directory");

    // A symlink to /dev/zero, in a pipeline folder that holds /dev (the
    // root): inside the folder, and still no regular file.
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.wasm")).unwrap();
    let zero =
        ComponentFile::resolve("zero.wasm", dir.path(), &rules(Path::new("/"), 1 << 20)).unwrap();
    assert_eq!(
        refusal(&zero).to_string(),
        "not a regular file but a character device"
    );
    // In its own folder, it leads outside first.
    assert!(matches!(
        refusal(&component(dir.path(), "zero.wasm", 1 << 20)),
        FileRefused::OutsideFolder
    ));
}

#[test]
fn symlinks_may_move_within_the_folder_but_never_out_of_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("pipelines");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(dir.join("steps")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(dir.join("steps/guard.wasm"), b"\0asm inside").unwrap();
    std::fs::write(outside.join("guard.wasm"), b"\0asm outside").unwrap();
    let symlink = |target: &Path, link: &str| std::os::unix::fs::symlink(target, dir.join(link));

    symlink(Path::new("steps/guard.wasm"), "inside.wasm").unwrap();
    let read = component(&dir, "inside.wasm", 1 << 20)
        .open()
        .unwrap()
        .read()
        .unwrap();
    assert_eq!(read, b"\0asm inside");

    symlink(&outside.join("guard.wasm"), "out.wasm").unwrap();
    symlink(&outside, "elsewhere").unwrap();
    symlink(Path::new("../outside/guard.wasm"), "relative.wasm").unwrap();
    for written in ["out.wasm", "elsewhere/guard.wasm", "relative.wasm"] {
        let refused = refusal(&component(&dir, written, 1 << 20));
        assert_eq!(
            refused.to_string(),
            "it lies outside the pipeline folder (through a symlink or `..`)",
            "{written}"
        );
    }

    // The pipeline folder itself may be a symlink.
    let link = root.path().join("pipelines-link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let read = component(&link, "steps/guard.wasm", 1 << 20)
        .open()
        .unwrap()
        .read()
        .unwrap();
    assert_eq!(read, b"\0asm inside");
}

#[test]
fn absolute_paths_and_dot_dots_out_of_the_folder_are_refused_before_any_file_is_touched() {
    let files = rules(Path::new("/srv/pipelines"), 1 << 20);
    let org = Path::new("/srv/pipelines/orgs/acme");
    let resolve = |written: &str| ComponentFile::resolve(written, org, &files);
    assert_eq!(
        resolve("/etc/x.wasm").unwrap_err().to_string(),
        "absolute paths are refused; name the file relative to the manifest, inside the pipeline folder"
    );
    for escaping in [
        "../../../tmp/x.wasm",
        "../../../pipelines/x.wasm",
        "a/../../../../x.wasm",
    ] {
        assert_eq!(
            resolve(escaping).unwrap_err().to_string(),
            format!("`{escaping}` leaves the pipeline folder")
        );
    }
    for inside in [
        "x.wasm",
        "./steps/x.wasm",
        "../../shared/x.wasm",
        "a/../x.wasm",
    ] {
        assert_eq!(
            resolve(inside).unwrap().path(),
            org.join(inside),
            "{inside}"
        );
    }
}

#[test]
fn a_missing_file_says_so_without_the_servers_folders() {
    let dir = tempfile::tempdir().unwrap();
    let refused = refusal(&component(dir.path(), "missing.wasm", 1 << 20));
    assert!(matches!(refused, FileRefused::Io(_)), "{refused:?}");
    assert!(
        refused.to_string().starts_with("No such file or directory"),
        "{refused}"
    );
    assert!(
        !refused
            .to_string()
            .contains(&dir.path().display().to_string())
    );
}

#[test]
fn a_manifest_is_read_bounded_and_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("load.toml");
    std::fs::write(&path, "version = 1\n").unwrap();
    assert_eq!(read_manifest(&path, dir.path()).unwrap(), "version = 1\n");
    std::fs::write(&path, b"\xff\xfe").unwrap();
    assert!(matches!(
        read_manifest(&path, dir.path()),
        Err(FileRefused::NotText)
    ));
    std::fs::File::create(&path)
        .unwrap()
        .set_len(MAX_MANIFEST_BYTES + 1)
        .unwrap();
    assert_eq!(
        read_manifest(&path, dir.path()).unwrap_err().to_string(),
        "1048577 bytes, more than the manifest limit = 1048576"
    );
}

#[test]
fn the_tools_read_a_manifest_within_the_folder_a_server_would_hold_it_in() {
    let dir = |manifest: &str| PipelineFiles::around(Path::new(manifest)).dir;
    assert_eq!(dir("pipelines/orgs/acme/load.toml"), Path::new("pipelines"));
    assert_eq!(dir("orgs/acme/load.toml"), Path::new("."));
    assert_eq!(dir("/srv/p/orgs/acme/daily.toml"), Path::new("/srv/p"));
    assert_eq!(
        dir("/home/ada/fare-guard/manifest.toml"),
        Path::new("/home/ada/fare-guard")
    );
    assert_eq!(dir("load.toml"), Path::new("."));
    assert_eq!(
        PipelineFiles::around(Path::new("load.toml")).max_component_bytes,
        64 << 20
    );
}
