//! `lakehost pipeline check`: a manifest judged as a server would run it,
//! without running it. It must parse (version, step names, grants that
//! exist for its pipeline kind, limits), name no built-in test step, and
//! every step's component must compile and match its pipeline's world, in
//! imports and exports. Each step is judged on its own, so one report
//! lists every broken step.

use std::path::Path;

use super::{
    PipelineEngine, PipelineKind,
    manifest::{Manifest, ManifestError, test_step_refused},
};

/// One step's verdict: its name, its component as the manifest names it,
/// and what is wrong with it (`None`: usable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCheck {
    pub step: String,
    pub component: String,
    pub problem: Option<String>,
}

/// Checks the `kind` manifest at `path` with `engine`; the manifest's own
/// error when it cannot be read or parsed, else each step's verdict.
pub fn check_manifest(
    engine: &PipelineEngine,
    kind: PipelineKind,
    path: &Path,
) -> Result<Vec<StepCheck>, ManifestError> {
    let manifest = Manifest::load(kind, path)?;
    if let Some(refused) = test_step_refused(&manifest, &manifest.origin) {
        return Err(refused);
    }
    Ok(manifest
        .steps
        .iter()
        .map(|step| StepCheck {
            step: step.name.clone(),
            component: step.component.to_string(),
            problem: engine
                .check_step(kind, &step.component)
                .err()
                .map(|e| e.to_string()),
        })
        .collect())
}
