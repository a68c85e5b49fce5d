//! Compiled components kept across restarts, in `<data_dir>/compiled-steps`:
//! a restart loads what the last run compiled instead of compiling it again.
//!
//! A file is named by the SHA-256 of the engine's compatibility hash (the
//! wasmtime version, its settings and the host's CPU features) and of the
//! component's bytes, so a changed `.wasm`, another wasmtime or another
//! engine setting never finds an old file. The file holds the SHA-256 of
//! the compiled form, then the form (`Component::serialize`); a file whose
//! digest does not match (cut short, damaged) is removed and compiled again.
//! Files are written under a temporary name and renamed into place, so a
//! reader never sees half of one.
//!
//! Trust: loading a compiled form runs its machine code, so it must come
//! from this server. The folder is the server's own, as trusted as its
//! SQLite store beside it; the digest catches damage, not an attacker who
//! can already write the server's data folder.
//!
//! The command-line tools (`pipeline check`, `pipeline dry-run`) keep theirs
//! in the user's cache folder instead (`tool_cache_dir`), as trusted as the
//! user's own `~/.cargo`: a step author's second run loads what the first
//! compiled.

use std::{
    hash::{Hash as _, Hasher as _},
    path::{Path, PathBuf},
};

use sha2::{Digest as _, Sha256};
use wasmtime::{Engine, component::Component};

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
}

const DIGEST_LEN: usize = 32;

impl CompiledOnDisk {
    pub(super) fn new(engine: &Engine, dir: PathBuf) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            dir,
            engine_hash: hasher.finish().to_le_bytes(),
        }
    }

    /// The file that holds `wasm` compiled by this engine.
    fn file_of(&self, wasm: &[u8]) -> PathBuf {
        let mut key = Sha256::new();
        key.update(b"lakehost compiled step v1\0");
        key.update(self.engine_hash);
        key.update(wasm);
        self.dir
            .join(format!("{}.cwasm", hex::encode(key.finalize())))
    }

    /// `wasm` compiled: loaded from the folder when a sound file is there,
    /// else compiled now and written there for the next start.
    pub(super) fn component(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> wasmtime::Result<(Component, Readied)> {
        let file = self.file_of(wasm);
        if let Some(component) = self.load(engine, &file) {
            return Ok((component, Readied::Loaded));
        }
        let component = Component::new(engine, wasm)?;
        if let Err(e) = self.write(&component, &file) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "a compiled step was not kept for the next start");
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
        let temporary = self
            .dir
            .join(format!(".{}.partial", uuid::Uuid::new_v4().simple()));
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_cache_folder_follows_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| std::ffi::OsString::from(value))
            }
        };
        const HOME: &[(&str, &str)] = &[("HOME", "/home/ada")];
        assert_eq!(
            tool_cache_dir(env(HOME)),
            Some(PathBuf::from("/home/ada/.cache/lakehost/compiled-steps"))
        );
        const XDG: &[(&str, &str)] = &[("HOME", "/home/ada"), ("XDG_CACHE_HOME", "/var/cache/ada")];
        assert_eq!(
            tool_cache_dir(env(XDG)),
            Some(PathBuf::from("/var/cache/ada/lakehost/compiled-steps"))
        );
        const OWN: &[(&str, &str)] = &[("HOME", "/home/ada"), ("LAKEHOST_CACHE_DIR", "/tmp/lh")];
        assert_eq!(
            tool_cache_dir(env(OWN)),
            Some(PathBuf::from("/tmp/lh/compiled-steps"))
        );
        // An empty LAKEHOST_CACHE_DIR turns the cache off; relative paths
        // (which would follow the working folder) are never used.
        assert_eq!(
            tool_cache_dir(env(&[("HOME", "/home/ada"), ("LAKEHOST_CACHE_DIR", "")])),
            None
        );
        assert_eq!(tool_cache_dir(env(&[("HOME", "relative")])), None);
        assert_eq!(
            tool_cache_dir(env(&[
                ("HOME", "/home/ada"),
                ("XDG_CACHE_HOME", "relative")
            ])),
            Some(PathBuf::from("/home/ada/.cache/lakehost/compiled-steps"))
        );
        assert_eq!(tool_cache_dir(env(&[])), None);
    }

    /// A component with no sections: the magic number, version 0xd, layer 1.
    const EMPTY_COMPONENT: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

    fn engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        Engine::new(&config).unwrap()
    }

    fn wasm() -> Vec<u8> {
        EMPTY_COMPONENT.to_vec()
    }

    #[test]
    fn a_component_compiled_once_is_loaded_by_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let first = CompiledOnDisk::new(&engine, dir.path().join("compiled-steps"));
        assert_eq!(
            first.component(&engine, &wasm()).unwrap().1,
            Readied::Compiled
        );
        // A new process: the same folder, the same wasmtime and settings.
        let next = CompiledOnDisk::new(&engine, dir.path().join("compiled-steps"));
        assert_eq!(next.component(&engine, &wasm()).unwrap().1, Readied::Loaded);
        let files: Vec<_> = std::fs::read_dir(dir.path().join("compiled-steps"))
            .unwrap()
            .collect();
        assert_eq!(files.len(), 1, "one file, no partial one left: {files:?}");
    }

    #[test]
    fn a_damaged_file_is_compiled_again_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let cache = CompiledOnDisk::new(&engine, dir.path().to_path_buf());
        cache.component(&engine, &wasm()).unwrap();
        let file = cache.file_of(&wasm());
        let mut bytes = std::fs::read(&file).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(
            cache.component(&engine, &wasm()).unwrap().1,
            Readied::Compiled
        );
        assert_eq!(
            cache.component(&engine, &wasm()).unwrap().1,
            Readied::Loaded
        );
        // Cut short: the same.
        std::fs::write(&file, &bytes[..10]).unwrap();
        assert_eq!(
            cache.component(&engine, &wasm()).unwrap().1,
            Readied::Compiled
        );
    }

    #[test]
    fn another_engine_setting_never_reads_the_file_of_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let cache = CompiledOnDisk::new(&engine, dir.path().to_path_buf());
        cache.component(&engine, &wasm()).unwrap();
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        let other = Engine::new(&config).unwrap();
        let other_cache = CompiledOnDisk::new(&other, dir.path().to_path_buf());
        assert_ne!(other_cache.file_of(&wasm()), cache.file_of(&wasm()));
        assert_eq!(
            other_cache.component(&other, &wasm()).unwrap().1,
            Readied::Compiled
        );
    }

    #[test]
    fn a_folder_that_cannot_be_written_still_compiles() {
        let dir = tempfile::tempdir().unwrap();
        let blocked = dir.path().join("a-file");
        std::fs::write(&blocked, b"not a folder").unwrap();
        let engine = engine();
        let cache = CompiledOnDisk::new(&engine, blocked.join("compiled-steps"));
        assert_eq!(
            cache.component(&engine, &wasm()).unwrap().1,
            Readied::Compiled
        );
    }
}
