//! Manifest versions and activations. A new version is checked as strictly
//! as `pipeline check` (`Manifest::parse_naming`), then against what the
//! operator lets orgs deploy (`pipeline.org_grants`, the largest limits),
//! the scope's own stored components and their world; its components are
//! made ready before it is numbered, so the answer means "runnable here".
//! Versions never change; an activation is one more row, the last of which
//! is what commits beginning now run.

use super::{DeployError, Deployments, components::digest_of};
use crate::{
    pipeline::{
        PipelineKind,
        manifest::{
            ComponentNames, ComponentSource, Manifest, ManifestError, Step, test_step_refused,
        },
    },
    store::pipelines::{Activation, PipelineScope, PipelineVersion},
};

/// The most versions and activations a listing shows.
const LISTED: i64 = 1000;

/// How a posted manifest is named in its errors.
const POSTED: &str = "manifest";

/// A version as the API shows it.
#[derive(Debug, Clone)]
pub struct VersionInfo {
    pub version: i64,
    /// `sha256:<hex>` of the manifest text.
    pub digest: String,
    pub created_by: String,
    pub created_at: i64,
    pub manifest: String,
    pub steps: Vec<Step>,
}

/// An activation as the API shows it: every field `None` when none was
/// ever made (the operator's files run).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ActivationInfo {
    pub version: Option<i64>,
    pub activated_by: Option<String>,
    pub activated_at: Option<i64>,
}

impl From<Activation> for ActivationInfo {
    fn from(row: Activation) -> Self {
        Self {
            version: row.version,
            activated_by: Some(row.activated_by),
            activated_at: Some(row.activated_at),
        }
    }
}

fn refused(key: String, problem: String) -> DeployError {
    DeployError::Manifest(ManifestError {
        file: POSTED.into(),
        key,
        problem,
        cause: None,
    })
}

/// A stored version's manifest, parsed as when it was made.
pub(super) fn parse_stored(
    kind: PipelineKind,
    row: &PipelineVersion,
) -> Result<Manifest, DeployError> {
    Manifest::parse_naming(
        kind,
        &row.manifest,
        &format!("version {}", row.version),
        ComponentNames::Stored,
    )
    .map_err(|e| {
        DeployError::Store(crate::store::Error::unreadable(
            "pipeline version manifest",
            e,
        ))
    })
}

fn info_of(kind: PipelineKind, row: PipelineVersion) -> Result<VersionInfo, DeployError> {
    let steps = parse_stored(kind, &row)?.steps;
    Ok(VersionInfo {
        version: row.version,
        digest: row.digest,
        created_by: row.created_by,
        created_at: row.created_at,
        manifest: row.manifest,
        steps,
    })
}

impl Deployments {
    /// Checks `text` as a `kind` manifest of `scope` and makes it the
    /// scope's next version, by `who`.
    pub async fn create_version(
        &self,
        scope: &PipelineScope,
        kind: PipelineKind,
        text: &str,
        who: &str,
    ) -> Result<VersionInfo, DeployError> {
        let manifest = Manifest::parse_naming(kind, text, POSTED, ComponentNames::Stored)
            .map_err(DeployError::Manifest)?;
        self.allowed(&manifest)?;
        for (i, step) in manifest.steps.iter().enumerate() {
            let ComponentSource::Stored(digest) = &step.component else {
                continue;
            };
            let key = format!("steps[{i}].component");
            let stored = match self.component(scope, digest).await {
                Ok(stored) => stored,
                Err(DeployError::ComponentNotFound(_)) => {
                    return Err(refused(
                        key,
                        format!(
                            "component {digest} is not stored here: PUT it to \
                             /v2/pipeline/components/{digest} first"
                        ),
                    ));
                }
                Err(e) => return Err(e),
            };
            if stored.kind != kind {
                return Err(refused(
                    key,
                    format!(
                        "component {digest} is a step of world {}, not of the {} (world {})",
                        stored.kind.world(),
                        kind.steps_name(),
                        kind.world()
                    ),
                ));
            }
            self.ready(kind, digest).await?;
        }
        let row = PipelineVersion {
            version: 0,
            digest: digest_of(text.as_bytes()),
            manifest: text.to_string(),
            created_by: who.to_string(),
            created_at: self.now(),
        };
        let version = self
            .store
            .add_pipeline_version(scope, kind.label(), &row)
            .await?;
        tracing::info!(org = %scope.org, zone = ?scope.zone, pipeline = kind.label(), version,
            "a pipeline version was created");
        Ok(VersionInfo {
            version,
            digest: row.digest,
            created_by: row.created_by,
            created_at: row.created_at,
            manifest: row.manifest,
            steps: manifest.steps,
        })
    }

    /// The scope's `kind` version `version`, its manifest held to what the
    /// operator allows today (a version made before a bound was tightened
    /// is refused from then on: to activate, to shadow, to run).
    pub(super) async fn allowed_version(
        &self,
        scope: &PipelineScope,
        kind: PipelineKind,
        version: i64,
    ) -> Result<(PipelineVersion, Manifest), DeployError> {
        let row = self
            .store
            .pipeline_version(scope, kind.label(), version)
            .await?
            .ok_or(DeployError::VersionNotFound(version))?;
        let manifest = parse_stored(kind, &row)?;
        self.allowed(&manifest)?;
        Ok((row, manifest))
    }

    /// What the operator lets orgs deploy: test steps only where
    /// `pipeline.test_steps` allows them, grants of their own components
    /// (`pipeline.org_grants`; the built-ins are the host's), limits, and
    /// (for a load) a step that appends the rows.
    fn allowed(&self, manifest: &Manifest) -> Result<(), DeployError> {
        let config = &self.config;
        if !config.test_steps
            && let Some(refused) = test_step_refused(manifest, POSTED)
        {
            return Err(DeployError::Manifest(refused));
        }
        for (i, step) in manifest.steps.iter().enumerate() {
            let own = matches!(step.component, ComponentSource::Stored(_));
            if let Some(grant) = step
                .grants
                .iter()
                .find(|g| own && !config.org_grants.iter().any(|allowed| allowed == g.name()))
            {
                return Err(refused(
                    format!("steps[{i}].grants"),
                    format!(
                        "`{}` may not be granted to an org's own component here; the \
                         operator allows {} (pipeline.org_grants)",
                        grant.name(),
                        config.org_grants.join(", ")
                    ),
                ));
            }
            if step.time_limit_ms > config.max_step_time_limit_ms {
                return Err(refused(
                    format!("steps[{i}].time_limit_ms"),
                    format!(
                        "must be at most {} (pipeline.max_step_time_limit_ms)",
                        config.max_step_time_limit_ms
                    ),
                ));
            }
            if step.memory_limit_bytes > config.max_step_memory_bytes {
                return Err(refused(
                    format!("steps[{i}].memory_limit_bytes"),
                    format!(
                        "must be at most {} (pipeline.max_step_memory_bytes)",
                        config.max_step_memory_bytes
                    ),
                ));
            }
        }
        manifest.check_appends().map_err(DeployError::Manifest)?;
        Ok(())
    }

    /// The scope's `kind` versions, newest first.
    pub async fn versions(
        &self,
        scope: &PipelineScope,
        kind: PipelineKind,
    ) -> Result<Vec<VersionInfo>, DeployError> {
        self.store
            .pipeline_versions(scope, kind.label(), LISTED)
            .await?
            .into_iter()
            .map(|row| info_of(kind, row))
            .collect()
    }

    /// The scope's `kind` version `version`.
    pub async fn version(
        &self,
        scope: &PipelineScope,
        kind: PipelineKind,
        version: i64,
    ) -> Result<VersionInfo, DeployError> {
        match self
            .store
            .pipeline_version(scope, kind.label(), version)
            .await?
        {
            Some(row) => info_of(kind, row),
            None => Err(DeployError::VersionNotFound(version)),
        }
    }

    /// Makes `version` the scope's `kind` pipeline (`None`: the operator's
    /// files again) for every commit or run that begins from now, by `who`.
    pub async fn activate(
        &self,
        scope: &PipelineScope,
        kind: PipelineKind,
        version: Option<i64>,
        who: &str,
    ) -> Result<ActivationInfo, DeployError> {
        if let Some(version) = version {
            self.allowed_version(scope, kind, version).await?;
        }
        let row = Activation {
            version,
            activated_by: who.to_string(),
            activated_at: self.now(),
        };
        self.store
            .activate_pipeline(scope, kind.label(), &row)
            .await?;
        tracing::info!(org = %scope.org, zone = ?scope.zone, pipeline = kind.label(), ?version,
            "a pipeline version was activated");
        Ok(row.into())
    }

    /// The scope's latest activation (all `None` when there was none).
    pub async fn active(
        &self,
        scope: &PipelineScope,
        kind: PipelineKind,
    ) -> Result<ActivationInfo, DeployError> {
        let latest = self
            .store
            .pipeline_activations(scope, kind.label(), 1)
            .await?;
        Ok(latest
            .into_iter()
            .next()
            .map(Into::into)
            .unwrap_or_default())
    }

    /// The scope's activations, newest first.
    pub async fn history(
        &self,
        scope: &PipelineScope,
        kind: PipelineKind,
    ) -> Result<Vec<ActivationInfo>, DeployError> {
        let rows = self
            .store
            .pipeline_activations(scope, kind.label(), LISTED)
            .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }
}
