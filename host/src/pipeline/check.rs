//! `lakehost pipeline check`: a manifest judged as a server would run it,
//! without running it. It must parse (version, step names, grants that
//! exist for its pipeline kind, limits), name no built-in test step, and
//! every step's component must compile and match its pipeline's world, in
//! imports and exports, and import no capability its grants lack; a load
//! manifest needs a step that appends the rows. Each step is judged on its own, so one report
//! lists every broken step.

use std::path::Path;

use super::{
    ComponentError, PipelineEngine, PipelineKind,
    manifest::{Capability, Manifest, ManifestError, Step, test_step_refused},
};

/// One step's verdict: its name, its component as the manifest names it,
/// and what is wrong with it (`None`: usable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCheck {
    pub step: String,
    pub component: String,
    pub problem: Option<String>,
    /// What an author should know of a usable step: the capabilities it
    /// imports without their grants (those calls answer `not-granted`).
    pub note: Option<String>,
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
        .map(|step| {
            let (problem, note) = match ungranted_imports(engine, kind, step) {
                Ok(ungranted) => (None, ungranted),
                Err(problem) => (Some(problem.to_string()), None),
            };
            StepCheck {
                step: step.name.clone(),
                component: step.component.to_string(),
                problem,
                note,
            }
        })
        .collect())
}

/// Why `step`'s component is unusable (it does not compile or match the
/// world), else the capabilities it imports without their grants. Those are
/// a note, not a refusal: componentize-py imports every interface of the
/// world whatever the step calls, and refusing them would push a Python
/// author to grant `lake-append` to a step that never appends.
fn ungranted_imports(
    engine: &PipelineEngine,
    kind: PipelineKind,
    step: &Step,
) -> Result<Option<String>, ComponentError> {
    let imported = engine.imported_interfaces(kind, &step.component)?;
    let ungranted: Vec<&str> = Capability::of(kind)
        .iter()
        .filter(|c| !step.grants.contains(c) && imported.iter().any(|i| i == c.name()))
        .map(|c| c.name())
        .collect();
    Ok((!ungranted.is_empty()).then(|| {
        format!(
            "it imports {} without the grant: a call answers not-granted (grant it if the \
             step calls it)",
            ungranted.join(", ")
        )
    }))
}
