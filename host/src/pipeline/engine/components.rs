//! Compiling components once per process: a component is compiled the first
//! time a manifest names it (built-ins at startup) and kept as an
//! `InstancePre` of its world, so a run only instantiates. A `.wasm` file is
//! compiled again when its size or modification time changes, so an operator
//! can swap it without a restart. Across restarts the compiled forms are
//! kept on disk (`compiled_on_disk.rs`): compiling is the engine's
//! [`PipelineEngine::compile`].
//!
//! A file is opened and read only through `files.rs`: each use opens it
//! (inside its pipeline folder, a regular file, within its cap), keys the
//! cache by the opened file's canonical path, size and modification time,
//! and reads it, bounded, only when that key is new.
//!
//! It must never hand out a component for a world it was not built for,
//! read a component file any other way, nor put the server's directories
//! into a message (they reach the caller).

use std::{
    collections::HashMap,
    fmt,
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
};

use wasmtime::component::{InstancePre, Linker};

use super::{
    PipelineEngine, bindings, daily_bindings,
    sandbox::{DailyState, LoadState},
};
use crate::pipeline::{PipelineKind, builtin, files::OpenedFile, manifest::ComponentSource};

/// What identifies a compiled component: a built-in name, a file by its
/// canonical path, size and modification time, or a stored component by
/// its digest (its bytes never change).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ComponentKey {
    Builtin(String),
    File(PathBuf, u64, Option<std::time::SystemTime>),
    Stored(String),
}

/// Compiled components of one world. Each key gets a cell that is filled
/// once: two servers asking for the same component at once compile it once.
pub(super) struct ComponentCache<P> {
    cells: Mutex<HashMap<ComponentKey, Arc<CompiledCell<P>>>>,
}

/// A component compiled once (or the reason it does not compile).
type CompiledCell<P> = OnceLock<Result<P, ComponentError>>;

/// Why a step's component cannot be had. Its text reaches the caller (in a
/// load's or run's failure), so it names no server directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComponentError {
    /// Its file was refused or could not be read (`files.rs`).
    #[error("{0}")]
    File(#[source] SharedCause),
    #[error("built-in {name} is not one of the {steps}")]
    OtherPipeline { name: String, steps: &'static str },
    #[error("no built-in component {0}")]
    NoBuiltin(String),
    #[error("not a usable component: {0:#}")]
    NotUsable(#[source] SharedCause),
    #[error("imports do not match the {world} world: {source:#}")]
    Imports {
        world: &'static str,
        #[source]
        source: SharedCause,
    },
    #[error("exports do not match the {world} world: {source:#}")]
    Exports {
        world: &'static str,
        #[source]
        source: SharedCause,
    },
    /// A step of a run that is not among the components pinned for it.
    #[error("not among the components pinned for this run")]
    NotPinned,
    /// A stored component this process was not given the bytes of
    /// ([`PipelineEngine::ready_stored`] comes first).
    #[error("stored component {0} was not made ready on this replica")]
    NotReady(String),
    /// Its imports or exports match no world this host runs.
    #[error(
        "it is a step of no world lakehost hosts: as a load step (world step), {load:#}; as a \
         daily-run step (world daily-step), {daily:#}"
    )]
    NoWorld {
        load: Box<ComponentError>,
        daily: Box<ComponentError>,
    },
}

/// The cause of an error that is cloned (a component's failure is cached
/// and handed to every run that asks for it): shows and chains as the
/// error it holds, and is equal to its clones only. `{:#}` shows the
/// whole chain, `: ` between causes, as wasmtime's errors do.
#[derive(Debug, Clone)]
pub struct SharedCause(Arc<dyn std::error::Error + Send + Sync>);

impl SharedCause {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    pub(super) fn of_wasmtime(error: wasmtime::Error) -> Self {
        Self(Arc::from(error.into_boxed_dyn_error()))
    }
}

impl fmt::Display for SharedCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        if f.alternate() {
            let mut cause = self.0.source();
            while let Some(error) = cause {
                write!(f, ": {error}")?;
                cause = error.source();
            }
        }
        Ok(())
    }
}

impl std::error::Error for SharedCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for SharedCause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedCause {}

impl<P: Clone> ComponentCache<P> {
    pub(super) fn new() -> Self {
        Self {
            cells: Mutex::new(HashMap::new()),
        }
    }

    fn get_or_compile(
        &self,
        key: ComponentKey,
        compile: impl FnOnce() -> Result<P, ComponentError>,
    ) -> Result<P, ComponentError> {
        let cell = self
            .cells
            .lock()
            .expect("component cache lock")
            .entry(key)
            .or_default()
            .clone();
        cell.get_or_init(compile).clone()
    }

    /// The component of `key` when it was compiled (or failed to).
    fn get(&self, key: &ComponentKey) -> Option<Result<P, ComponentError>> {
        let cells = self.cells.lock().expect("component cache lock");
        cells.get(key).and_then(|cell| cell.get().cloned())
    }
}

impl PipelineEngine {
    /// The compiled component of `source` for a `kind` pipeline, through
    /// `linker`; `finish` checks its exports against the world.
    fn prepared<T: 'static, P: Clone>(
        &self,
        kind: PipelineKind,
        source: &ComponentSource,
        cache: &ComponentCache<P>,
        linker: &Linker<T>,
        finish: impl FnOnce(InstancePre<T>) -> wasmtime::Result<P>,
    ) -> Result<P, ComponentError> {
        // Callers name the file (never the server's directories).
        let (key, bytes) = match source {
            ComponentSource::Stored(digest) => {
                return cache
                    .get(&ComponentKey::Stored(digest.clone()))
                    .unwrap_or_else(|| Err(ComponentError::NotReady(digest.clone())));
            }
            ComponentSource::Builtin(name) => {
                (ComponentKey::Builtin(name.clone()), Bytes::Builtin(name))
            }
            ComponentSource::File(file) => {
                let opened = file
                    .open()
                    .map_err(|e| ComponentError::File(SharedCause::new(e)))?;
                let (real, len, modified) = opened.identity();
                let key = ComponentKey::File(real.to_path_buf(), len, modified);
                (key, Bytes::File(opened))
            }
        };
        cache.get_or_compile(key, || {
            let component = match bytes {
                Bytes::Builtin(name) => match builtin::component(name) {
                    Some((builtin_kind, bytes)) if builtin_kind == kind => self.compile(bytes),
                    Some(_) => {
                        return Err(ComponentError::OtherPipeline {
                            name: name.to_string(),
                            steps: kind.steps_name(),
                        });
                    }
                    None => return Err(ComponentError::NoBuiltin(name.to_string())),
                },
                Bytes::File(opened) => {
                    let bytes = opened
                        .read()
                        .map_err(|e| ComponentError::File(SharedCause::new(e)))?;
                    self.compile(&bytes)
                }
            }
            .map_err(|e| ComponentError::NotUsable(SharedCause::of_wasmtime(e)))?;
            of_world(kind, &component, linker, finish)
        })
    }

    /// Makes the stored component `digest` ready for a `kind` pipeline from
    /// its bytes (`wasm`, whose digest the caller checked): compiled now, or
    /// loaded compiled from disk. Once ready (or found unusable) it stays
    /// so: a second call does nothing. Blocks while it compiles.
    pub fn ready_stored(
        &self,
        kind: PipelineKind,
        digest: &str,
        wasm: &[u8],
    ) -> Result<(), ComponentError> {
        let key = ComponentKey::Stored(digest.to_string());
        let compiled = |wasm: &[u8]| {
            self.compile(wasm)
                .map_err(|e| ComponentError::NotUsable(SharedCause::of_wasmtime(e)))
        };
        match kind {
            PipelineKind::Load => self
                .load_steps
                .get_or_compile(key, || {
                    of_world(
                        kind,
                        &compiled(wasm)?,
                        &self.load_linker,
                        bindings::StepPre::new,
                    )
                })
                .map(drop),
            PipelineKind::Daily => self
                .daily_steps
                .get_or_compile(key, || {
                    of_world(
                        kind,
                        &compiled(wasm)?,
                        &self.daily_linker,
                        daily_bindings::DailyStepPre::new,
                    )
                })
                .map(drop),
        }
    }

    /// The WIT interfaces of lakehost's package that `source`'s component
    /// imports, by name (`staged-sql`, `log`, ...).
    pub fn imported_interfaces(
        &self,
        kind: PipelineKind,
        source: &ComponentSource,
    ) -> Result<Vec<String>, ComponentError> {
        let component = match kind {
            PipelineKind::Load => self.load_step(source)?.instance_pre().component().clone(),
            PipelineKind::Daily => self.daily_step(source)?.instance_pre().component().clone(),
        };
        let names = component
            .component_type()
            .imports(&self.engine)
            .filter_map(|(name, _)| {
                let interface = name.strip_prefix("lakehost:pipeline/")?;
                Some(interface.split('@').next().unwrap_or(interface).to_string())
            })
            .collect();
        Ok(names)
    }

    /// Whether the stored component `digest` is ready for a `kind` pipeline.
    pub fn is_ready(&self, kind: PipelineKind, digest: &str) -> bool {
        let key = ComponentKey::Stored(digest.to_string());
        match kind {
            PipelineKind::Load => self.load_steps.get(&key).is_some(),
            PipelineKind::Daily => self.daily_steps.get(&key).is_some(),
        }
    }

    /// Which pipeline `wasm` (stored as `digest`) is a step of, compiled
    /// once and made ready for it; refused when it is no component or a
    /// step of neither world. Blocks while it compiles.
    pub fn world_of(&self, digest: &str, wasm: &[u8]) -> Result<PipelineKind, ComponentError> {
        let component = self
            .compile(wasm)
            .map_err(|e| ComponentError::NotUsable(SharedCause::of_wasmtime(e)))?;
        let key = ComponentKey::Stored(digest.to_string());
        let load = match of_world(
            PipelineKind::Load,
            &component,
            &self.load_linker,
            bindings::StepPre::new,
        ) {
            Ok(pre) => {
                self.load_steps.get_or_compile(key, || Ok(pre))?;
                return Ok(PipelineKind::Load);
            }
            Err(e) => e,
        };
        match of_world(
            PipelineKind::Daily,
            &component,
            &self.daily_linker,
            daily_bindings::DailyStepPre::new,
        ) {
            Ok(pre) => {
                self.daily_steps.get_or_compile(key, || Ok(pre))?;
                Ok(PipelineKind::Daily)
            }
            Err(daily) => Err(ComponentError::NoWorld {
                load: Box::new(load),
                daily: Box::new(daily),
            }),
        }
    }

    pub(super) fn load_step(
        &self,
        source: &ComponentSource,
    ) -> Result<bindings::StepPre<LoadState>, ComponentError> {
        self.prepared(
            PipelineKind::Load,
            source,
            &self.load_steps,
            &self.load_linker,
            bindings::StepPre::new,
        )
    }

    pub(super) fn daily_step(
        &self,
        source: &ComponentSource,
    ) -> Result<daily_bindings::DailyStepPre<DailyState>, ComponentError> {
        self.prepared(
            PipelineKind::Daily,
            source,
            &self.daily_steps,
            &self.daily_linker,
            daily_bindings::DailyStepPre::new,
        )
    }
}

/// Where a component's bytes come from once its key is new: the host's own
/// (a built-in), or a file already opened and checked.
enum Bytes<'a> {
    Builtin(&'a str),
    File(OpenedFile),
}

/// `component` as a step of a `kind` pipeline, through `linker`; `finish`
/// checks its exports against the world.
fn of_world<T: 'static, P>(
    kind: PipelineKind,
    component: &wasmtime::component::Component,
    linker: &Linker<T>,
    finish: impl FnOnce(InstancePre<T>) -> wasmtime::Result<P>,
) -> Result<P, ComponentError> {
    let instance_pre = linker
        .instantiate_pre(component)
        .map_err(|e| ComponentError::Imports {
            world: kind.world(),
            source: SharedCause::of_wasmtime(e),
        })?;
    finish(instance_pre).map_err(|e| ComponentError::Exports {
        world: kind.world(),
        source: SharedCause::of_wasmtime(e),
    })
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_cached_failure_shows_its_whole_chain_and_equals_its_clones_only() {
        let failed = || {
            SharedCause::of_wasmtime(
                wasmtime::Error::msg("cannot add seals").context("instantiating a component"),
            )
        };
        let error = ComponentError::NotUsable(failed());
        assert_eq!(
            error.to_string(),
            "not a usable component: instantiating a component: cannot add seals"
        );
        let cause = error.source().expect("its cause");
        assert_eq!(cause.to_string(), "instantiating a component");
        assert_eq!(
            cause.source().map(|c| c.to_string()).as_deref(),
            Some("cannot add seals")
        );
        assert_eq!(error.clone(), error);
        assert_ne!(error, ComponentError::NotUsable(failed()));
    }
}
