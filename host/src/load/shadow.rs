//! The shadow beside a commit (`pipeline::deployed::shadow`): begun with the
//! commit's own steps, over the same staged files through a load data of
//! its own (so nothing it does reaches the commit's pending rows), on a
//! thread of its own, so the commit's answer never waits for it. Settled
//! after the commit's end is recorded and before its staged files are
//! removed: both outcomes are compared and the run recorded. A shadow that
//! cannot begin, or whose record fails, is logged; the commit is never
//! changed by it.

use std::{collections::HashMap, sync::Arc, sync::Mutex};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{
    pipeline::{
        LoadData, PipelineEngine, PipelineOutcome, RunControl, StepContext, StepError,
        StepJudgement,
        deployed::{Deployments, shadow::ShadowPlan},
    },
    runtime::EngineRuntime,
    store::{
        loads::{LoadEnd, NewLoad},
        pipeline_shadows::ShadowRun,
    },
};

type Ran = (Result<PipelineOutcome, StepError>, Vec<StepJudgement>);

/// A shadow running beside a commit.
struct Running {
    plan: ShadowPlan,
    handle: JoinHandle<Ran>,
}

/// The shadows running beside this replica's commits, by load id.
#[derive(Default)]
pub(super) struct Shadows {
    running: Mutex<HashMap<String, Running>>,
}

impl Shadows {
    /// The shadow to run beside `load`'s commit, if its zone or org set
    /// one; one that cannot be had is logged and not run.
    pub(super) async fn plan(
        &self,
        deployments: &Deployments,
        load: &NewLoad,
    ) -> Option<ShadowPlan> {
        match deployments
            .shadow_for(&load.org, load.zone.as_deref())
            .await
        {
            Ok(plan) => plan,
            Err(e) => {
                tracing::warn!(load = %load.id, error = %e, "the load pipeline's shadow was not run");
                None
            }
        }
    }

    /// Begins `plan`'s steps beside the commit of `context`'s load.
    pub(super) fn begin(
        &self,
        (engine, runtime): (Arc<PipelineEngine>, Arc<EngineRuntime>),
        plan: ShadowPlan,
        context: StepContext,
        data: Arc<dyn LoadData>,
    ) {
        let load_id = context.load_id.clone();
        let manifest = plan.manifest.clone();
        // Its own stop: the commit's ends with the commit's steps, and the
        // shadow may run on (bounded by its own steps' limits).
        let control = RunControl::new(runtime, CancellationToken::new());
        let handle = tokio::task::spawn_blocking(move || {
            engine.run_pipeline_judged(&manifest, &context, data, &control)
        });
        self.running
            .lock()
            .expect("shadows lock")
            .insert(load_id, Running { plan, handle });
    }

    /// Forgets the shadow of a commit that did not end here (lost or
    /// handed back): its run ends on its own, unrecorded.
    pub(super) fn forget(&self, load_id: &str) {
        self.running.lock().expect("shadows lock").remove(load_id);
    }

    /// Waits for the shadow beside `load_id`'s commit, if one ran, and
    /// records it against the commit's `end`.
    pub(super) async fn settle(
        &self,
        deployments: &Deployments,
        load_id: &str,
        end: &LoadEnd,
        now: impl Fn() -> i64,
    ) {
        let Some(running) = self.running.lock().expect("shadows lock").remove(load_id) else {
            return;
        };
        let (outcome, ran) = match running.handle.await {
            Ok(ran) => ran,
            Err(e) => {
                tracing::warn!(load = %load_id, error = %e, "the shadow's thread failed");
                return;
            }
        };
        let active = active_label(end);
        let (shadow, step, message) = shadow_label(&outcome);
        let agreed = active == shadow;
        let message = match message {
            None if !agreed => Some(format!(
                "the shadow's steps passed; the load ended {active}"
            )),
            message => message,
        };
        let run = ShadowRun {
            load_id: load_id.to_string(),
            version: running.plan.version,
            agreed,
            active_outcome: active,
            shadow_outcome: shadow,
            step,
            message,
            steps_json: serde_json::to_string(&running.plan.judgements(&ran))
                .expect("step outcomes serialise"),
            ran_at: now(),
        };
        if let Err(e) = deployments.record_shadow(&running.plan.scope, &run).await {
            tracing::warn!(load = %load_id, error = %e, "the shadow's run was not recorded");
        }
    }
}

/// How the commit ended: `passed`, `failed (<ErrorType>)` or `error`.
fn active_label(end: &LoadEnd) -> String {
    match end {
        LoadEnd::Success { .. } => "passed".into(),
        LoadEnd::Fail { error_type, .. } if error_type == "InternalError" => "error".into(),
        LoadEnd::Fail { error_type, .. } => format!("failed ({error_type})"),
    }
}

/// How the shadow's steps ended, as [`active_label`] names it, with the
/// step that decided it and its message.
fn shadow_label(
    outcome: &Result<PipelineOutcome, StepError>,
) -> (String, Option<String>, Option<String>) {
    match outcome {
        Ok(PipelineOutcome::Passed) => ("passed".into(), None, None),
        Ok(PipelineOutcome::Failed {
            step,
            error_type,
            items,
        }) => (
            format!("failed ({error_type})"),
            Some(step.clone()),
            items.first().map(|item| item.error_message.clone()),
        ),
        Err(e) => ("error".into(), None, Some(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::ErrorItem;

    #[test]
    fn outcomes_are_named_alike_so_that_equal_names_agree() {
        let failed = |error_type: &str| LoadEnd::Fail {
            error_type: error_type.into(),
            error_messages_json: "[]".into(),
        };
        assert_eq!(
            active_label(&failed("ParquetValidation")),
            "failed (ParquetValidation)"
        );
        assert_eq!(active_label(&failed("InternalError")), "error");
        let shadow = Ok(PipelineOutcome::Failed {
            step: "guard".into(),
            error_type: "ParquetValidation".into(),
            items: vec![ErrorItem {
                error_type: "FORBIDDEN_COLUMN".into(),
                error_message: "email".into(),
                check_result: None,
            }],
        });
        assert_eq!(
            shadow_label(&shadow),
            (
                "failed (ParquetValidation)".into(),
                Some("guard".into()),
                Some("email".into())
            )
        );
        assert_eq!(shadow_label(&Ok(PipelineOutcome::Passed)).0, "passed");
    }
}
