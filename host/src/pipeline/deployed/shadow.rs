//! Shadow runs of the load pipeline: a version set as a scope's shadow
//! (`PUT /v2/pipeline/load/shadow`) also runs beside each of its commits,
//! read-only, deciding nothing. Its steps granted `lake-append` are left
//! out (nothing is written; they show as `not run`); every other step runs
//! with its own grants and limits. The commit (`load/shadow.rs`) compares
//! the two outcomes once both are known and records the run here; the
//! report counts the runs since the shadow was set and lists the latest
//! disagreements.

use super::{DeployError, Deployments, scopes_of};
use crate::{
    pipeline::{
        PipelineKind, StepJudgement,
        manifest::{Capability, Manifest},
    },
    store::{
        pipeline_shadows::{ShadowRun, ShadowSetting, ShadowTally},
        pipelines::PipelineScope,
    },
};

/// The most disagreements a report lists.
const LISTED_DISAGREEMENTS: i64 = 100;

/// A shadow to run beside one commit.
#[derive(Debug, Clone)]
pub struct ShadowPlan {
    /// Whose shadow it is (the zone's, or its org's).
    pub scope: PipelineScope,
    pub version: i64,
    /// The version's whole manifest.
    pub full: Manifest,
}

impl ShadowPlan {
    /// What the shadow runs: the version's steps but those granted
    /// `lake-append` (a shadow writes nothing).
    pub fn runnable(&self) -> Manifest {
        let mut manifest = self.full.clone();
        manifest
            .steps
            .retain(|step| !step.grants.contains(&Capability::LakeAppend));
        manifest
    }

    /// Each of the version's steps as the shadow ran them: the run's
    /// judgements of the steps it ran, `not run` for those left out.
    pub fn judgements(&self, ran: &[StepJudgement]) -> Vec<StepJudgement> {
        self.full
            .steps
            .iter()
            .map(|step| {
                ran.iter()
                    .find(|judged| judged.name == step.name)
                    .cloned()
                    .unwrap_or_else(|| StepJudgement {
                        name: step.name.clone(),
                        outcome: "not run".into(),
                        ms: None,
                        message: Some("a shadow writes nothing: lake-append is not run".into()),
                    })
            })
            .collect()
    }
}

/// A scope's shadow and its tally, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowReport {
    pub setting: Option<ShadowSetting>,
    pub tally: Option<ShadowTally>,
}

impl Deployments {
    /// Sets the scope's load shadow to `version` (`None` removes it), by `who`.
    pub async fn set_shadow(
        &self,
        scope: &PipelineScope,
        version: Option<i64>,
        who: &str,
    ) -> Result<ShadowSetting, DeployError> {
        if let Some(version) = version {
            self.allowed_version(scope, PipelineKind::Load, version)
                .await?;
        }
        let setting = ShadowSetting {
            version,
            set_by: who.to_string(),
            set_at: self.now(),
        };
        self.store.set_pipeline_shadow(scope, &setting).await?;
        tracing::info!(org = %scope.org, zone = ?scope.zone, ?version, "a load pipeline shadow was set");
        Ok(setting)
    }

    /// The scope's shadow and what its runs found since it was set.
    pub async fn shadow_report(&self, scope: &PipelineScope) -> Result<ShadowReport, DeployError> {
        let setting = self.store.pipeline_shadow(scope).await?;
        let tally = match &setting {
            Some(ShadowSetting {
                version: Some(version),
                set_at,
                ..
            }) => Some(
                self.store
                    .shadow_tally(scope, *version, *set_at, LISTED_DISAGREEMENTS)
                    .await?,
            ),
            _ => None,
        };
        Ok(ShadowReport { setting, tally })
    }

    /// The shadow to run beside a commit of `org` (on `zone`'s API)
    /// beginning now: the zone's, else the org's. Its components are made
    /// ready by the shadow's own task (`ready_steps`), never the commit.
    pub async fn shadow_for(
        &self,
        org: &str,
        zone: Option<&str>,
    ) -> Result<Option<ShadowPlan>, DeployError> {
        for scope in scopes_of(org, zone) {
            let Some(ShadowSetting {
                version: Some(version),
                ..
            }) = self.store.pipeline_shadow(&scope).await?
            else {
                continue;
            };
            let (_, full) = self
                .allowed_version(&scope, PipelineKind::Load, version)
                .await?;
            return Ok(Some(ShadowPlan {
                scope,
                version,
                full,
            }));
        }
        Ok(None)
    }

    /// Records a shadow's run beside a commit, as of now.
    pub async fn record_shadow(
        &self,
        scope: &PipelineScope,
        run: &ShadowRun,
    ) -> Result<(), DeployError> {
        let run = ShadowRun {
            ran_at: self.now(),
            ..run.clone()
        };
        Ok(self.store.record_shadow_run(scope, &run).await?)
    }

    /// The shadow run beside `load_id`'s commit, if one ran.
    pub async fn shadow_of_load(&self, load_id: &str) -> Result<Option<ShadowRun>, DeployError> {
        Ok(self.store.shadow_run(load_id).await?)
    }
}
