//! Which manifest a commit or a daily run runs, decided once as it begins
//! (so a version activated meanwhile changes only what begins after it):
//! a zone's activated version, else its org's, else the operator's files
//! (`manifest::org_manifest`: the org's file, the shared one, the
//! built-in default). A version's stored components are made ready before
//! it is handed out; one this replica had not compiled yet is compiled
//! there, and the log says the commit waited. What judged a load is
//! recorded for `GET /v2/load/{id}/pipeline`.

use super::{DeployError, Deployments, scopes_of};
use crate::{
    pipeline::{
        PipelineKind, StepJudgement,
        files::PipelineFiles,
        manifest::{ComponentSource, Manifest, org_manifest},
    },
    store::pipelines::LoadPipeline,
};

/// What a run runs, and where it came from.
#[derive(Debug, Clone)]
pub struct Judged {
    pub manifest: Manifest,
    pub by: JudgedBy,
}

/// Where a run's manifest came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JudgedBy {
    /// A version activated over the API.
    Version { version: i64, digest: String },
    /// The operator's manifest in `pipeline.dir`.
    Files,
    /// The built-in default.
    BuiltIn,
}

impl JudgedBy {
    /// As `GET /v2/load/{id}/pipeline` names it.
    pub fn label(&self) -> &'static str {
        match self {
            JudgedBy::Version { .. } => "version",
            JudgedBy::Files => "files",
            JudgedBy::BuiltIn => "built-in",
        }
    }
}

/// What judged a load: its pipeline and each step's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadJudgement {
    pub source: String,
    pub version: Option<i64>,
    pub digest: Option<String>,
    pub steps: Vec<StepJudgement>,
    pub recorded_at: i64,
}

impl Deployments {
    /// The `kind` manifest a commit or run of `org` (on `zone`'s API)
    /// beginning now runs, its stored components ready on this replica.
    pub async fn manifest_for(
        &self,
        kind: PipelineKind,
        org: &str,
        zone: Option<&str>,
    ) -> Result<Judged, DeployError> {
        for scope in scopes_of(org, zone) {
            let Some(version) = self.active(&scope, kind).await?.version else {
                continue;
            };
            let (row, manifest) = self.allowed_version(&scope, kind, version).await?;
            self.ready_steps(&manifest, version, true).await?;
            return Ok(Judged {
                manifest,
                by: JudgedBy::Version {
                    version,
                    digest: row.digest,
                },
            });
        }
        let files = PipelineFiles::of(&self.config);
        let manifest =
            org_manifest(kind, &files, org, self.config.test_steps).map_err(DeployError::Files)?;
        let by = if manifest
            .origin
            .starts_with(crate::pipeline::manifest::BUILT_IN_ORIGIN)
        {
            JudgedBy::BuiltIn
        } else {
            JudgedBy::Files
        };
        Ok(Judged { manifest, by })
    }

    /// Makes `manifest`'s stored components (of `version`) ready on this
    /// replica for a run that begins now; one not ready yet is compiled
    /// here, and when a run `waits` for it the log says so.
    pub async fn ready_steps(
        &self,
        manifest: &Manifest,
        version: i64,
        waits: bool,
    ) -> Result<(), DeployError> {
        for step in &manifest.steps {
            if let ComponentSource::Stored(digest) = &step.component
                && self.ready(manifest.kind, digest).await?
                && waits
            {
                tracing::warn!(version, step = %step.name, %digest,
                    "a commit waited on a compile: this replica had not compiled a deployed \
                     component yet");
            }
        }
        Ok(())
    }

    /// Records what judged `load_id`: `by`, and each step's outcome.
    pub async fn record_load(
        &self,
        load_id: &str,
        by: &JudgedBy,
        steps: &[StepJudgement],
    ) -> Result<(), DeployError> {
        let (version, digest) = match by {
            JudgedBy::Version { version, digest } => (Some(*version), Some(digest.clone())),
            JudgedBy::Files | JudgedBy::BuiltIn => (None, None),
        };
        let record = LoadPipeline {
            source: by.label().to_string(),
            version,
            digest,
            steps_json: serde_json::to_string(steps).expect("step outcomes serialise"),
            recorded_at: self.now(),
        };
        Ok(self.store.record_load_pipeline(load_id, &record).await?)
    }

    /// What judged `load_id`, once its commit began.
    pub async fn load_judgement(
        &self,
        load_id: &str,
    ) -> Result<Option<LoadJudgement>, DeployError> {
        let Some(row) = self.store.load_pipeline(load_id).await? else {
            return Ok(None);
        };
        let steps = serde_json::from_str(&row.steps_json).map_err(|e| {
            DeployError::Store(crate::store::Error::unreadable("load pipeline steps", e))
        })?;
        Ok(Some(LoadJudgement {
            source: row.source,
            version: row.version,
            digest: row.digest,
            steps,
            recorded_at: row.recorded_at,
        }))
    }
}
