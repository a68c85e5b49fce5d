//! `lakehost pipeline check`: a manifest judged as a server would run it,
//! without running it. It must parse (version, step names, grants that
//! exist for its pipeline kind, limits), name no built-in test step, and
//! every step's component must compile and match its pipeline's world, in
//! imports and exports, and import no capability its grants lack; a load
//! manifest needs a step that appends the rows. Each step is judged on its own, so one report
//! lists every broken step.

use std::path::Path;

use super::{
    PipelineEngine, PipelineKind,
    manifest::{Capability, Manifest, ManifestError, Step, test_step_refused},
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
    manifest.check_appends()?;
    Ok(manifest
        .steps
        .iter()
        .map(|step| StepCheck {
            step: step.name.clone(),
            component: step.component.to_string(),
            problem: problem_of(engine, kind, step),
        })
        .collect())
}

/// What is wrong with `step`: its component does not compile or match the
/// world, or it imports a capability its grants lack (every call of that
/// import would answer `not-granted`).
fn problem_of(engine: &PipelineEngine, kind: PipelineKind, step: &Step) -> Option<String> {
    let imported = match engine.imported_interfaces(kind, &step.component) {
        Ok(imported) => imported,
        Err(e) => return Some(e.to_string()),
    };
    let ungranted: Vec<&str> = Capability::of(kind)
        .iter()
        .filter(|c| !step.grants.contains(c) && imported.iter().any(|i| i == c.name()))
        .map(|c| c.name())
        .collect();
    (!ungranted.is_empty()).then(|| {
        format!(
            "it imports {}, which its grants lack (every call would answer not-granted): \
             grant {} or remove the import",
            ungranted.join(", "),
            if ungranted.len() == 1 { "it" } else { "them" }
        )
    })
}
