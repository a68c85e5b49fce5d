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

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio_util::sync::CancellationToken;

use super::{ComponentSource, Manifest};
use crate::pipeline::{PipelineEngine, PipelineKind};

/// How often the manifests are read.
pub const WATCH_EVERY: Duration = Duration::from_secs(5);

/// Every manifest file under `dir`, with its pipeline kind.
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
        .filter(|(_, path)| path.is_file())
        .collect()
}

/// What the last round found wrong, by manifest: a problem is logged when
/// it first appears (or changes), and once more as fixed when it goes.
#[derive(Debug, Default)]
pub struct Watch {
    problems: BTreeMap<PathBuf, String>,
}

impl Watch {
    /// One round over `dir`; blocks while components compile.
    pub fn round(&mut self, engine: &PipelineEngine, dir: &Path) {
        let mut now = BTreeMap::new();
        for (kind, path) in manifests_under(dir) {
            if let Some(problem) = problem_of(engine, kind, dir, &path) {
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
    dir: &Path,
    path: &Path,
) -> Option<String> {
    let shown = path.strip_prefix(dir).unwrap_or(path).display().to_string();
    let manifest = match Manifest::load(kind, path) {
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
            ComponentSource::Builtin(_) => None,
        })
}

/// Starts the watch over `dir` until `stop`.
pub fn start(engine: Arc<PipelineEngine>, dir: PathBuf, stop: CancellationToken) {
    let watch = Arc::new(Mutex::new(Watch::default()));
    crate::periodic::spawn_every(WATCH_EVERY, stop, move || {
        let (engine, dir, watch) = (engine.clone(), dir.clone(), watch.clone());
        async move {
            let _ = tokio::task::spawn_blocking(move || {
                watch
                    .lock()
                    .expect("manifest watch lock")
                    .round(&engine, &dir);
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
        watch.round(&engine, dir.path());
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
        watch.round(&engine, dir.path());
        let problems: Vec<&String> = watch.problems().values().collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "orgs/acme/load.toml: step guard (guard.wasm): not a usable component"
            ),
            "{problems:?}"
        );

        write(&dir.path().join("orgs/acme/guard.wasm"), reject);
        watch.round(&engine, dir.path());
        assert!(watch.problems().is_empty(), "{:?}", watch.problems());
    }
}
