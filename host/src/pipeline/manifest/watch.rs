//! Components compiled before a commit needs them: every few seconds each
//! manifest under `pipeline.dir` (the shared `load.toml` and `daily.toml`,
//! and every org's under `orgs/<org>/`) is read, and each step's `.wasm`
//! file is handed to the engine, which compiles it only when it is new or
//! its size or modification time changed (and keeps the result in memory
//! and on disk). An operator's swapped component is then compiled on this
//! background thread, not by the next commit.
//!
//! A manifest that does not parse, or a component that does not load, is
//! logged as a warning once per distinct problem, so an operator sees it
//! before a commit fails on it; commits still report it as before. The
//! watch itself never fails and never changes what a commit runs.
//!
//! It reads every file as a commit does, through `files.rs`, under the
//! server's `[pipeline]` folder and cap: a component that is too big, not
//! a regular file (a FIFO, a device) or outside the folder is a logged
//! problem like any other, found without reading it whole or waiting on it.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio_util::sync::CancellationToken;

use super::{ComponentSource, Manifest};
use crate::pipeline::{PipelineEngine, PipelineKind, files::PipelineFiles};

/// How often the manifests are read.
pub const WATCH_EVERY: Duration = Duration::from_secs(5);

/// Every manifest file under `dir`, with its pipeline kind: each name a
/// commit would read (`exists`, as `org::manifest_path` decides), so a FIFO
/// or a symlink to a device there is reported, not passed over.
pub fn manifests_under(dir: &Path) -> Vec<(PipelineKind, PathBuf)> {
    let mut folders = vec![dir.to_path_buf()];
    if let Ok(orgs) = std::fs::read_dir(dir.join("orgs")) {
        let mut orgs: Vec<PathBuf> = orgs
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.is_dir())
            .collect();
        orgs.sort();
        folders.extend(orgs);
    }
    folders
        .iter()
        .flat_map(|folder| {
            [PipelineKind::Load, PipelineKind::Daily]
                .map(|kind| (kind, folder.join(kind.file_name())))
        })
        .filter(|(_, path)| path.exists())
        .collect()
}

/// What the last round found wrong, by manifest: a problem is logged when
/// it first appears (or changes), and once more as fixed when it goes.
#[derive(Debug, Default)]
pub struct Watch {
    problems: BTreeMap<PathBuf, String>,
}

impl Watch {
    /// One round over `files.dir`; blocks while components compile.
    pub fn round(&mut self, engine: &PipelineEngine, files: &PipelineFiles) {
        let mut now = BTreeMap::new();
        for (kind, path) in manifests_under(&files.dir) {
            if let Some(problem) = problem_of(engine, kind, files, &path) {
                now.insert(path, problem);
            }
        }
        for (path, problem) in &now {
            if self.problems.get(path) != Some(problem) {
                tracing::warn!(manifest = %path.display(), problem, "a pipeline manifest is not usable; commits that use it fail");
            }
        }
        for path in self.problems.keys() {
            if !now.contains_key(path) {
                tracing::info!(manifest = %path.display(), "a pipeline manifest is usable again");
            }
        }
        self.problems = now;
    }

    /// The problems of the last round, by manifest.
    pub fn problems(&self) -> &BTreeMap<PathBuf, String> {
        &self.problems
    }
}

/// The first thing wrong with a manifest (as a commit would report it), or
/// `None` once every file component of it is compiled.
fn problem_of(
    engine: &PipelineEngine,
    kind: PipelineKind,
    files: &PipelineFiles,
    path: &Path,
) -> Option<String> {
    let shown = path
        .strip_prefix(&files.dir)
        .unwrap_or(path)
        .display()
        .to_string();
    let manifest = match Manifest::load_in(kind, path, files) {
        Ok(manifest) => manifest,
        Err(e) => return Some(format!("{shown}: {}: {}", e.key, e.problem)),
    };
    manifest
        .steps
        .iter()
        .find_map(|step| match &step.component {
            ComponentSource::File(_) => {
                engine
                    .check_step(kind, &step.component)
                    .err()
                    .map(|problem| {
                        format!(
                            "{shown}: step {} ({}): {problem}",
                            step.name, step.component
                        )
                    })
            }
            // Files never name stored components (`parse_naming`).
            ComponentSource::Builtin(_) | ComponentSource::Stored(_) => None,
        })
}

/// Starts the watch over `files.dir`, under its caps, until `stop`.
pub fn start(engine: Arc<PipelineEngine>, files: PipelineFiles, stop: CancellationToken) {
    let watch = Arc::new(Mutex::new(Watch::default()));
    crate::periodic::spawn_every(WATCH_EVERY, stop, move || {
        let (engine, files, watch) = (engine.clone(), files.clone(), watch.clone());
        async move {
            let _ = tokio::task::spawn_blocking(move || {
                watch
                    .lock()
                    .expect("manifest watch lock")
                    .round(&engine, &files);
            })
            .await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn every_manifest_is_found_and_a_problem_is_reported_until_it_is_fixed() {
        let dir = tempfile::tempdir().unwrap();
        let engine = PipelineEngine::shared().unwrap();
        let reject = crate::pipeline::builtin::component("reject_columns")
            .unwrap()
            .1;
        write(
            &dir.path().join("load.toml"),
            b"version = 1\n[[steps]]\nname = \"insert\"\ncomponent = \"builtin:insert\"\n",
        );
        write(&dir.path().join("orgs/acme/guard.wasm"), reject);
        write(
            &dir.path().join("orgs/acme/load.toml"),
            b"version = 1\n[[steps]]\nname = \"guard\"\ncomponent = \"guard.wasm\"\n",
        );
        write(
            &dir.path().join("orgs/zeta/daily.toml"),
            b"version = 1\n[[steps]]\nname = \"x\"\ncomponent = \"builtin:insert\"\n",
        );
        let found: Vec<(PipelineKind, PathBuf)> = manifests_under(dir.path())
            .into_iter()
            .map(|(kind, path)| (kind, path.strip_prefix(dir.path()).unwrap().to_path_buf()))
            .collect();
        assert_eq!(
            found,
            [
                (PipelineKind::Load, PathBuf::from("load.toml")),
                (PipelineKind::Load, PathBuf::from("orgs/acme/load.toml")),
                (PipelineKind::Daily, PathBuf::from("orgs/zeta/daily.toml")),
            ]
        );

        let mut watch = Watch::default();
        let files = PipelineFiles::new(dir.path());
        watch.round(&engine, &files);
        // A load step named in a daily manifest; acme's file compiles.
        let problems: Vec<&String> = watch.problems().values().collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("orgs/zeta/daily.toml: steps[0].component:"),
            "{problems:?}"
        );
        assert!(
            !problems[0].contains(&dir.path().display().to_string()),
            "{problems:?}"
        );

        // acme's component swapped for one that is not: found at the next round.
        write(&dir.path().join("orgs/acme/guard.wasm"), b"\0asm broken");
        std::fs::remove_file(dir.path().join("orgs/zeta/daily.toml")).unwrap();
        watch.round(&engine, &files);
        let problems: Vec<&String> = watch.problems().values().collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "orgs/acme/load.toml: step guard (guard.wasm): not a usable component"
            ),
            "{problems:?}"
        );

        write(&dir.path().join("orgs/acme/guard.wasm"), reject);
        watch.round(&engine, &files);
        assert!(watch.problems().is_empty(), "{:?}", watch.problems());
    }

    /// What the attacker of issue 45 named: a sparse file far past the
    /// cap, a symlink to /dev/zero, a FIFO, a path out of the folder and a
    /// symlink out of it. Each is a problem of its manifest, found without
    /// reading it whole or waiting on it; the round ends.
    #[test]
    fn components_too_big_endless_or_outside_are_problems_found_without_reading_them() {
        use crate::pipeline::files::tests::{mkfifo, within_a_minute};
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("pipelines");
        let outside = root.path().join("outside");
        let reject = crate::pipeline::builtin::component("reject_columns")
            .unwrap()
            .1;
        write(&outside.join("guard.wasm"), reject);
        let manifest = |org: &str, component: &str| {
            write(
                &dir.join("orgs").join(org).join("load.toml"),
                format!("version = 1\n[[steps]]\nname = \"guard\"\ncomponent = \"{component}\"\n")
                    .as_bytes(),
            );
        };
        manifest("big", "big.wasm");
        std::fs::File::create(dir.join("orgs/big/big.wasm"))
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
        manifest("zero", "zero.wasm");
        std::os::unix::fs::symlink("/dev/zero", dir.join("orgs/zero/zero.wasm")).unwrap();
        manifest("fifo", "fifo.wasm");
        mkfifo(&dir.join("orgs/fifo/fifo.wasm"));
        manifest("climb", "../../../outside/guard.wasm");
        manifest("link", "guard.wasm");
        std::os::unix::fs::symlink(outside.join("guard.wasm"), dir.join("orgs/link/guard.wasm"))
            .unwrap();
        // A manifest that is itself a FIFO is the org's manifest, refused.
        std::fs::create_dir_all(dir.join("orgs/pipe")).unwrap();
        mkfifo(&dir.join("orgs/pipe/load.toml"));

        let files = PipelineFiles {
            dir: dir.clone(),
            max_component_bytes: 1 << 20,
        };
        let problems = within_a_minute(move || {
            let mut watch = Watch::default();
            watch.round(&PipelineEngine::shared().unwrap(), &files);
            watch.problems().clone()
        });
        let problems: Vec<&String> = problems.values().collect();
        assert_eq!(
            problems,
            [
                "orgs/big/load.toml: step guard (big.wasm): 2147483648 bytes, more than pipeline.max_component_bytes = 1048576",
                "orgs/climb/load.toml: steps[0].component: `../../../outside/guard.wasm` leaves the pipeline folder",
                "orgs/fifo/load.toml: step guard (fifo.wasm): not a regular file but a FIFO",
                "orgs/link/load.toml: step guard (guard.wasm): it lies outside the pipeline folder (through a symlink or `..`)",
                "orgs/pipe/load.toml: <file>: cannot read: not a regular file but a FIFO",
                "orgs/zero/load.toml: step guard (zero.wasm): it lies outside the pipeline folder (through a symlink or `..`)",
            ]
        );
    }
}
