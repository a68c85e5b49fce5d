//! Compiled components kept across restarts, in `<data_dir>/compiled-steps`:
//! a restart loads what the last run compiled instead of compiling it again.
//!
//! A file is named by the SHA-256 of the engine's compatibility hash (the
//! wasmtime version, its settings and the host's CPU features) and of the
//! component's bytes, so a changed `.wasm`, another wasmtime or another
//! engine setting never finds an old file. The file holds the SHA-256 of
//! the compiled form, then the form (`Component::serialize`); a file whose
//! digest does not match (cut short, damaged) is removed and compiled again.
//! Files are written under a temporary name (`.<uuid>.partial`) and renamed
//! into place, so a reader never sees half of one.
//!
//! Bounded: the folder's `.cwasm` files are kept under a budget
//! (`pipeline.compiled_cache_bytes`, 2 GiB by default; 0 keeps none on disk
//! and empties the folder at start), least recently used evicted first. A
//! file's modification time is its last use: written, or touched when a
//! start loads it, so files of an old wasmtime or of a version no longer
//! deployed age out first. The prune lists the folder once after each file
//! written and once when a process starts using the folder, never on a
//! load; it never removes the file just written, and it also removes the
//! temporary files of writes cut short (older than a day). Replicas and
//! tools may share the folder: a file another process removed first is
//! counted as gone, and a prune that fails is logged, never a compile's
//! failure. An eviction costs one compile when that step is next needed.
//! Modification times are the file system's, so the prune reads the wall
//! clock, not the server's injected one.
//!
//! Trust: loading a compiled form runs its machine code, so it must come
//! from this server. The folder is the server's own, as trusted as its
//! SQLite store beside it; the digest catches damage, not an attacker who
//! can already write the server's data folder.
//!
//! The command-line tools (`pipeline check`, `pipeline dry-run`) keep theirs
//! in the user's cache folder instead (`tool_cache_dir`), as trusted as the
//! user's own `~/.cargo`: a step author's second run loads what the first
//! compiled. That folder is bound to a fixed [`TOOL_CACHE_BYTES`] (1 GiB,
//! about 30 compiled Python steps), pruned the same way. They write nothing
//! else that lasts: steps are built by the author's own cargo or
//! componentize-py, and a dry run's scratch folder is deleted after it.

use std::{
    hash::{Hash as _, Hasher as _},
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use sha2::{Digest as _, Sha256};
use wasmtime::{Engine, component::Component};

use super::PipelineEngine;
use crate::observability::retention::{self as figures, Swept};

/// The bound of the command-line tools' folder of compiled steps.
pub(super) const TOOL_CACHE_BYTES: u64 = 1 << 30;

/// A temporary file this old is a write cut short (a write takes seconds).
const PARTIAL_MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// The folder where the command-line tools keep compiled components:
/// `$LAKEHOST_CACHE_DIR/compiled-steps`, else
/// `$XDG_CACHE_HOME/lakehost/compiled-steps`, else
/// `$HOME/.cache/lakehost/compiled-steps`. `None` when `LAKEHOST_CACHE_DIR`
/// is set but empty (no cache), or when none of them is an absolute path.
pub(super) fn tool_cache_dir(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let absolute = |value: std::ffi::OsString| {
        let path = PathBuf::from(value);
        path.is_absolute().then_some(path)
    };
    if let Some(dir) = var("LAKEHOST_CACHE_DIR") {
        return absolute(dir).map(|dir| dir.join("compiled-steps"));
    }
    var("XDG_CACHE_HOME")
        .and_then(absolute)
        .or_else(|| {
            var("HOME")
                .and_then(absolute)
                .map(|home| home.join(".cache"))
        })
        .map(|cache| cache.join("lakehost").join("compiled-steps"))
}

impl PipelineEngine {
    /// For the command-line tools: keeps compiled components in the user's
    /// cache folder (`tool_cache_dir`), made when missing, within
    /// `TOOL_CACHE_BYTES`. Without one (or when it cannot be made) every
    /// run compiles again.
    pub fn keep_compiled_for_tools(&self) {
        let Some(dir) = tool_cache_dir(|name| std::env::var_os(name)) else {
            return;
        };
        if let Some(parent) = dir.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            tracing::warn!(dir = %parent.display(), error = %e, "no cache of compiled steps: every run compiles them again");
            return;
        }
        self.keep_compiled_within(dir, TOOL_CACHE_BYTES);
    }

    /// Keeps compiled components in `dir` within the default budget
    /// (`pipeline.compiled_cache_bytes`'s): [`Self::keep_compiled_within`].
    pub fn keep_compiled_in(&self, dir: PathBuf) {
        let budget = crate::config::PipelineConfig::default().compiled_cache_bytes;
        self.keep_compiled_within(dir, budget);
    }

    /// Keeps compiled components in `dir`, so the next start loads them
    /// instead of compiling, and the folder under `budget_bytes` (0: none
    /// kept); prunes it now. One engine serves the whole process: the first
    /// server to call this chooses the folder and its budget.
    pub fn keep_compiled_within(&self, dir: PathBuf, budget_bytes: u64) {
        let on_disk = CompiledOnDisk::new(&self.engine, dir, budget_bytes);
        if self.compiled_on_disk.set(on_disk).is_ok()
            && let Some(on_disk) = self.compiled_on_disk.get()
        {
            on_disk.prune_logged(None);
        }
    }
}

/// How a component was made ready: compiled now, or loaded from the folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Readied {
    Compiled,
    Loaded,
}

/// The folder of compiled components for one engine.
pub(super) struct CompiledOnDisk {
    dir: PathBuf,
    engine_hash: [u8; 8],
    /// The most its `.cwasm` files may hold together, in bytes; 0: none.
    budget: u64,
}

/// A compiled form in the folder, as one listing saw it.
#[derive(Debug)]
struct Entry {
    path: PathBuf,
    bytes: u64,
    last_used: SystemTime,
}

/// What one prune did.
#[derive(Debug, Default, PartialEq, Eq)]
struct Pruned {
    /// Compiled forms removed, and their bytes.
    evicted: usize,
    evicted_bytes: u64,
    /// Temporary files of writes cut short, removed.
    partials: usize,
    /// Files that could not be removed (each logged).
    failed: usize,
    /// What the compiled forms left hold (those removed by another
    /// process meanwhile not counted).
    kept_bytes: u64,
}

const DIGEST_LEN: usize = 32;
const ENTRY_SUFFIX: &str = ".cwasm";
const PARTIAL_SUFFIX: &str = ".partial";

impl CompiledOnDisk {
    pub(super) fn new(engine: &Engine, dir: PathBuf, budget: u64) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            dir,
            engine_hash: hasher.finish().to_le_bytes(),
            budget,
        }
    }

    /// The file that holds `wasm` compiled by this engine.
    fn file_of(&self, wasm: &[u8]) -> PathBuf {
        let mut key = Sha256::new();
        key.update(b"lakehost compiled step v1\0");
        key.update(self.engine_hash);
        key.update(wasm);
        self.dir
            .join(format!("{}{ENTRY_SUFFIX}", hex::encode(key.finalize())))
    }

    /// `wasm` compiled: loaded from the folder when a sound file is there,
    /// else compiled now and written there for the next start.
    pub(super) fn component(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> wasmtime::Result<(Component, Readied)> {
        if self.budget == 0 {
            return Ok((Component::new(engine, wasm)?, Readied::Compiled));
        }
        let file = self.file_of(wasm);
        if let Some(component) = self.load(engine, &file) {
            mark_used(&file);
            return Ok((component, Readied::Loaded));
        }
        let component = Component::new(engine, wasm)?;
        match self.write(&component, &file) {
            Ok(()) => self.prune_logged(Some(&file)),
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "a compiled step was not kept for the next start");
            }
        }
        Ok((component, Readied::Compiled))
    }

    fn load(&self, engine: &Engine, file: &Path) -> Option<Component> {
        let bytes = match std::fs::read(file) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "a compiled step could not be read; compiling it again");
                return None;
            }
        };
        let sound = bytes.len() > DIGEST_LEN
            && Sha256::digest(&bytes[DIGEST_LEN..])[..] == bytes[..DIGEST_LEN];
        if !sound {
            tracing::warn!(file = %file.display(), "a compiled step is damaged; compiling it again");
            let _ = std::fs::remove_file(file);
            return None;
        }
        // SAFETY: the bytes are a form `write` made with this engine's
        // wasmtime (the file name holds its compatibility hash, and
        // wasmtime checks the version and settings again), read whole from
        // the server's own folder and checked against the digest written
        // with them (see the module's note on trust).
        match unsafe { Component::deserialize(engine, &bytes[DIGEST_LEN..]) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "a compiled step does not load; compiling it again");
                let _ = std::fs::remove_file(file);
                None
            }
        }
    }

    fn write(&self, component: &Component, file: &Path) -> std::io::Result<()> {
        let form = component.serialize().map_err(std::io::Error::other)?;
        // Only the folder itself: a data folder that is gone stays gone.
        match std::fs::create_dir(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let temporary = self.dir.join(format!(
            ".{}{PARTIAL_SUFFIX}",
            uuid::Uuid::new_v4().simple()
        ));
        let written = (|| {
            let mut bytes = Vec::with_capacity(DIGEST_LEN + form.len());
            bytes.extend_from_slice(&Sha256::digest(&form));
            bytes.extend_from_slice(&form);
            std::fs::write(&temporary, &bytes)?;
            std::fs::rename(&temporary, file)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written
    }

    /// Prunes the folder (see the module's note), logging what it removed
    /// or why it could not: a compile never fails because of it.
    fn prune_logged(&self, keep: Option<&Path>) {
        match self.prune(keep, SystemTime::now()) {
            Ok(pruned) if pruned.evicted + pruned.partials > 0 => {
                figures::swept(
                    Swept::CompiledSteps,
                    (pruned.evicted + pruned.partials) as u64,
                );
                tracing::info!(
                    dir = %self.dir.display(),
                    evicted = pruned.evicted,
                    evicted_bytes = pruned.evicted_bytes,
                    partials = pruned.partials,
                    kept_bytes = pruned.kept_bytes,
                    budget_bytes = self.budget,
                    "compiled steps evicted (each is compiled again when next needed)"
                )
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "the compiled steps could not be listed to keep them within their budget");
            }
        }
    }

    /// Removes stale temporary files, then the least recently used compiled
    /// forms until the rest fit the budget, never `keep`.
    fn prune(&self, keep: Option<&Path>, now: SystemTime) -> std::io::Result<Pruned> {
        let mut pruned = Pruned::default();
        let entries = self.list(now, &mut pruned)?;
        evict(entries, self.budget, keep, &mut pruned);
        Ok(pruned)
    }

    /// The folder's compiled forms; temporary files older than
    /// [`PARTIAL_MAX_AGE`] are removed on the way. A folder not made yet
    /// holds none; a file removed meanwhile is left out.
    fn list(&self, now: SystemTime, pruned: &mut Pruned) -> std::io::Result<Vec<Entry>> {
        let listing = match std::fs::read_dir(&self.dir) {
            Ok(listing) => listing,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut entries = Vec::new();
        for entry in listing {
            let entry = entry?;
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|_| metadata.is_file()) else {
                continue;
            };
            // No modification time (a rare file system): as if used now.
            let last_used = metadata.modified().unwrap_or(now);
            if name.starts_with('.') && name.ends_with(PARTIAL_SUFFIX) {
                let stale = now
                    .duration_since(last_used)
                    .is_ok_and(|age| age > PARTIAL_MAX_AGE);
                if stale && remove(&entry.path(), pruned) {
                    pruned.partials += 1;
                }
            } else if name.ends_with(ENTRY_SUFFIX) {
                entries.push(Entry {
                    path: entry.path(),
                    bytes: metadata.len(),
                    last_used,
                });
            }
        }
        Ok(entries)
    }
}

/// Removes the least recently used of `entries` until the rest hold at most
/// `budget` bytes, never `keep`.
fn evict(mut entries: Vec<Entry>, budget: u64, keep: Option<&Path>, pruned: &mut Pruned) {
    let mut total: u64 = entries.iter().map(|entry| entry.bytes).sum();
    entries.sort_by(|a, b| a.last_used.cmp(&b.last_used).then(a.path.cmp(&b.path)));
    for entry in entries {
        if total <= budget {
            break;
        }
        if Some(entry.path.as_path()) == keep {
            continue;
        }
        let before = pruned.failed;
        if remove(&entry.path, pruned) {
            pruned.evicted += 1;
            pruned.evicted_bytes += entry.bytes;
        }
        if pruned.failed == before {
            total -= entry.bytes;
        }
    }
    pruned.kept_bytes = total;
}

/// Removes `file`: `true` when this call did, `false` when another process
/// did first or it failed (counted in `failed` and logged).
fn remove(file: &Path, pruned: &mut Pruned) -> bool {
    match std::fs::remove_file(file) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            pruned.failed += 1;
            tracing::warn!(file = %file.display(), error = %e, "a compiled step could not be evicted");
            false
        }
    }
}

/// Records that `file` was used now: its modification time is what the
/// prune evicts by. A file removed meanwhile needs none.
fn mark_used(file: &Path) {
    let marked = std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .and_then(|file| file.set_modified(SystemTime::now()));
    if let Err(e) = marked
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::debug!(file = %file.display(), error = %e, "a compiled step's use was not recorded: it may be evicted sooner");
    }
}

#[cfg(test)]
#[path = "compiled_on_disk_tests.rs"]
mod tests;
