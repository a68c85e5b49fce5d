//! Pipelines deployed over the API (docs/pipeline-deploy.md): an org's (or
//! zone's) components stored by content in the lake's object store, its
//! immutable manifest versions, and which version its commits and daily
//! runs run. Every replica reads the same bytes and rows, so a version
//! activated through one replica judges the next commit on any other.
//!
//! - `components.rs`: storing a component (its digest, size and world
//!   checked, compiled before the answer) and reading one back, bounded.
//! - `versions.rs`: a manifest version, checked as strictly as `pipeline
//!   check` and against the operator's bounds; activations and history.
//! - `judge.rs`: which manifest a commit or daily run runs (an activated
//!   version, else the operator's files), its stored components made
//!   ready first, and what judged a load.
//! - `background.rs`: each replica compiles what was stored anywhere, so a
//!   commit never waits on a compile another moment could have done.
//!
//! Knows no HTTP: the API maps [`DeployError`] to statuses.

use std::sync::Arc;

use crate::{
    clock::SharedClock,
    config::PipelineConfig,
    lake::Lake,
    store::{self, Store, pipelines::PipelineScope},
};

use super::{ComponentError, PipelineEngine, manifest::ManifestError};

mod background;
mod components;
mod judge;
pub mod shadow;
#[cfg(test)]
mod tests;
mod versions;

pub use background::start_background_compiles;
pub use components::{ComponentInfo, Stored};
pub use judge::{Judged, JudgedBy, LoadJudgement};
pub use versions::{ActivationInfo, VersionInfo};

/// Why a deployment call was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The path's digest is not `sha256:` and 64 lowercase hex digits.
    #[error("{0:?} is not a component digest: use sha256: and 64 lowercase hex digits")]
    BadDigest(String),
    #[error("the body's digest is {actual}, not {declared}")]
    DigestMismatch { declared: String, actual: String },
    #[error("a component may be at most {cap} bytes (pipeline.max_component_bytes)")]
    TooLarge { cap: u64 },
    /// Not a component, or a step of no world this host runs.
    #[error(transparent)]
    NotUsable(ComponentError),
    #[error("component {0} was not found")]
    ComponentNotFound(String),
    #[error("version {0} was not found")]
    VersionNotFound(i64),
    /// The operator's manifest (in `pipeline.dir`) is broken.
    #[error(transparent)]
    Files(ManifestError),
    /// The manifest of a new version: which key, and what is wrong.
    #[error("{}: {}", .0.key, .0.problem)]
    Manifest(#[source] ManifestError),
    #[error("the metadata store failed")]
    Store(#[from] store::Error),
    #[error("the lake's object store failed")]
    Lake(#[from] object_store::Error),
    /// A stored component's bytes are not those of its digest (damaged).
    #[error("stored component {0} does not match its digest")]
    Damaged(String),
    #[error("compiling a component stopped")]
    Compiler(#[from] tokio::task::JoinError),
}

/// The pipelines deployed over the API, for every org of this replica.
pub struct Deployments {
    store: Store,
    lake: Lake,
    engine: Arc<PipelineEngine>,
    config: PipelineConfig,
    clock: SharedClock,
}

impl std::fmt::Debug for Deployments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deployments")
    }
}

impl Deployments {
    pub fn new(
        store: Store,
        lake: Lake,
        engine: Arc<PipelineEngine>,
        config: PipelineConfig,
        clock: SharedClock,
    ) -> Self {
        Self {
            store,
            lake,
            engine,
            config,
            clock,
        }
    }

    fn now(&self) -> i64 {
        self.clock.now().timestamp_micros()
    }
}

/// Whose activation or shadow a run of `org` on `zone`'s API takes, in
/// order: the zone's, then its org's.
pub(super) fn scopes_of(org: &str, zone: Option<&str>) -> impl Iterator<Item = PipelineScope> {
    zone.map(|zone| scope(org, Some(zone)))
        .into_iter()
        .chain([scope(org, None)])
}

/// The scope of an org's Org API (`zone` `None`) or of one of its zones.
pub fn scope(org: &str, zone: Option<&str>) -> PipelineScope {
    PipelineScope {
        org: org.to_string(),
        zone: zone.map(String::from),
    }
}
