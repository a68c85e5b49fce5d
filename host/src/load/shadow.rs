//! The shadow beside a commit (`pipeline::deployed::shadow`): begun with the
//! commit's own steps, over the same staged files through a load data of
//! its own (so nothing it does reaches the commit's pending rows), in a task
//! of its own with a runtime of its own for its SQL, so it neither slows
//! the commit's steps' SQL nor holds the commit's answer: its components
//! are made ready there, never in the commit. Settled in that task after
//! the commit's end is recorded: both outcomes are compared, the run
//! recorded, and only then the staged files removed. The commit's worker
//! goes on to the next commit meanwhile. A shadow that cannot begin, or
//! whose record fails, is logged; the commit is never changed by it. A
//! commit that does not end here (lost, handed back) stops its shadow.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex, OnceLock},
};

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
    /// `None` when it could not run (its components could not be had, its
    /// thread failed): logged, never recorded.
    handle: JoinHandle<Option<Ran>>,
    stop: CancellationToken,
}

/// Threads of the shadows' own runtime (their steps' SQL).
const SHADOW_SQL_THREADS: usize = 1;

/// The shadows running beside this replica's commits, by load id.
#[derive(Default)]
pub(super) struct Shadows {
    running: Mutex<HashMap<String, Running>>,
    /// Made at the first shadow; `None` when it could not be (logged).
    runtime: OnceLock<Option<Arc<EngineRuntime>>>,
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

    fn runtime(&self) -> Option<Arc<EngineRuntime>> {
        self.runtime
            .get_or_init(|| match EngineRuntime::new(SHADOW_SQL_THREADS) {
                Ok(runtime) => Some(Arc::new(runtime)),
                Err(e) => {
                    tracing::error!(error = %e, "no runtime for shadow runs: no shadow runs");
                    None
                }
            })
            .clone()
    }

    /// Begins `plan`'s steps beside the commit of `context`'s load.
    pub(super) fn begin(
        &self,
        (deployments, engine): (Arc<Deployments>, Arc<PipelineEngine>),
        plan: ShadowPlan,
        context: StepContext,
        data: Arc<dyn LoadData>,
    ) {
        let Some(runtime) = self.runtime() else {
            return;
        };
        let load_id = context.load_id.clone();
        let (manifest, version) = (plan.runnable(), plan.version);
        let stop = CancellationToken::new();
        let control = RunControl::new(runtime, stop.clone());
        let handle = tokio::spawn(async move {
            if let Err(e) = deployments.ready_steps(&manifest, version, false).await {
                tracing::warn!(load = %context.load_id, error = %e, "the shadow's components could not be had");
                return None;
            }
            let ran = tokio::task::spawn_blocking(move || {
                engine.run_pipeline_judged(&manifest, &context, data, &control)
            })
            .await;
            ran.inspect_err(|e| tracing::warn!(error = %e, "the shadow's thread failed"))
                .ok()
        });
        self.running
            .lock()
            .expect("shadows lock")
            .insert(load_id, Running { plan, handle, stop });
    }

    /// Stops the shadow of a commit that did not end here (lost or handed
    /// back): unrecorded.
    pub(super) fn forget(&self, load_id: &str) {
        if let Some(running) = self.running.lock().expect("shadows lock").remove(load_id) {
            running.stop.cancel();
        }
    }

    /// Runs `then` (the staged files' removal) once the shadow beside
    /// `load_id`'s commit, if one ran, has ended and been recorded against
    /// the commit's `end`: in a task of its own when there is a shadow,
    /// else now.
    pub(super) async fn settle_then(
        &self,
        deployments: Arc<Deployments>,
        load_id: &str,
        end: &LoadEnd,
        then: impl Future<Output = ()> + Send + 'static,
    ) {
        let Some(running) = self.running.lock().expect("shadows lock").remove(load_id) else {
            then.await;
            return;
        };
        let (load_id, active) = (load_id.to_string(), active_label(end));
        tokio::spawn(async move {
            if let Ok(Some((outcome, ran))) = running.handle.await {
                let run = shadow_run(&load_id, &running.plan, active, &outcome, &ran);
                if let Err(e) = deployments.record_shadow(&running.plan.scope, &run).await {
                    tracing::warn!(load = %load_id, error = %e, "the shadow's run was not recorded");
                }
            }
            then.await;
        });
    }
}

/// The record of a shadow's run beside a commit that ended `active`.
fn shadow_run(
    load_id: &str,
    plan: &ShadowPlan,
    active: String,
    outcome: &Result<PipelineOutcome, StepError>,
    ran: &[StepJudgement],
) -> ShadowRun {
    let (shadow, step, message) = shadow_label(outcome);
    let agreed = active == shadow;
    let message = match message {
        None if !agreed => Some(format!(
            "the shadow's steps passed; the load ended {active}"
        )),
        message => message,
    };
    ShadowRun {
        load_id: load_id.to_string(),
        version: plan.version,
        agreed,
        active_outcome: active,
        shadow_outcome: shadow,
        step,
        message,
        steps_json: serde_json::to_string(&plan.judgements(ran)).expect("step outcomes serialise"),
        // Set by the store's writer (`Deployments::record_shadow`).
        ran_at: 0,
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
        // As the commit names it (`active_label`): a step's InternalError
        // is an error, however it came.
        Ok(PipelineOutcome::Failed {
            step,
            error_type,
            items,
        }) if error_type == "InternalError" => (
            "error".into(),
            Some(step.clone()),
            items.first().map(|item| item.error_message.clone()),
        ),
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
