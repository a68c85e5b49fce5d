//! The order a manifest's steps run in, written once for the load commits,
//! the daily runs and the dry run: each step in turn, stopping at the first
//! that fails, that gives no verdict, or that the caller halts (its check
//! before the step refused, or it could not run the step at all).
//!
//! It owns the order and where a run stops (and times each step for the
//! metrics), nothing else: how a step runs
//! (which world, on which thread) is the caller's runner's, and what a stop
//! means (a FAIL report, a run's end) is the caller's to say. It must never
//! run a step after one that did not pass, nor skip one.

use std::{
    convert::Infallible,
    future::{Future, ready},
};

use super::{ErrorItem, StepError, StepVerdict, manifest::Manifest, manifest::Step};
use crate::observability::metrics::{StepOutcome, StepTimer};

/// How a run of a manifest's steps went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepsRun<H> {
    /// The steps that passed, in order.
    pub passed: Vec<String>,
    /// Why the run stopped before its end; `None` when every step passed.
    pub stopped: Option<Stopped<H>>,
    /// How long each step that ran took, in order, in milliseconds.
    pub ms: Vec<u64>,
}

/// How one step of a commit went, as `GET /v2/load/{id}/pipeline` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepJudgement {
    pub name: String,
    /// `passed`, `failed` (it failed the load), `error` (no verdict) or
    /// `not run`.
    pub outcome: String,
    pub ms: Option<u64>,
    /// A failure's first message, or why the step gave no verdict.
    pub message: Option<String>,
}

impl<H: std::fmt::Display> StepsRun<H> {
    /// Each of `manifest`'s steps as this run judged it, in order.
    pub fn judgements(&self, manifest: &Manifest) -> Vec<StepJudgement> {
        manifest
            .steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                let ms = self.ms.get(i).copied();
                let (outcome, message) = if i < self.passed.len() {
                    ("passed", None)
                } else if i == self.passed.len()
                    && let Some(stopped) = &self.stopped
                {
                    match stopped {
                        Stopped::Failed { items, .. } => (
                            "failed",
                            items.first().map(|item| item.error_message.clone()),
                        ),
                        Stopped::Error(e) => ("error", Some(e.to_string())),
                        Stopped::Halted(h) => ("error", Some(h.to_string())),
                    }
                } else {
                    ("not run", None)
                };
                StepJudgement {
                    name: step.name.clone(),
                    outcome: outcome.into(),
                    ms,
                    message,
                }
            })
            .collect()
    }
}

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped<H> {
    /// A step failed the load or run: its ErrorType and items.
    Failed {
        step: String,
        error_type: String,
        items: Vec<ErrorItem>,
    },
    /// A step gave no verdict (a limit, a trap, its own error, not loadable).
    Error(StepError),
    /// The caller halted the run: its check before a step refused, or its
    /// runner could not run the step.
    Halted(H),
}

/// How one step of a run went, as the dry runs report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepReport {
    Passed {
        step: String,
    },
    Failed {
        step: String,
        error_type: String,
        items: Vec<ErrorItem>,
    },
    Error(StepError),
}

impl StepReport {
    /// Whether every step of `reports` passed.
    pub fn all_passed(reports: &[StepReport]) -> bool {
        reports
            .iter()
            .all(|report| matches!(report, StepReport::Passed { .. }))
    }
}

impl StepsRun<Infallible> {
    /// Each step's report in order: the steps that passed, then the one the
    /// run stopped at.
    pub fn reports(self) -> Vec<StepReport> {
        let mut reports: Vec<StepReport> = self
            .passed
            .into_iter()
            .map(|step| StepReport::Passed { step })
            .collect();
        reports.extend(self.stopped.map(|stopped| match stopped {
            Stopped::Failed {
                step,
                error_type,
                items,
            } => StepReport::Failed {
                step,
                error_type,
                items,
            },
            Stopped::Error(e) => StepReport::Error(e),
            Stopped::Halted(never) => match never {},
        }));
        reports
    }
}

/// Runs `manifest`'s steps in order. Before each step `before_each` may halt
/// the run; `run` runs one step, or halts the run when it cannot.
///
/// Async because the daily run awaits its hold's renewal and each step's
/// thread between steps; callers whose steps run where they are use
/// [`run_steps_blocking`].
pub async fn run_steps<H, C, CF, R, RF>(
    manifest: &Manifest,
    mut before_each: C,
    mut run: R,
) -> StepsRun<H>
where
    C: FnMut() -> CF,
    CF: Future<Output = Result<(), H>>,
    R: FnMut(&Step) -> RF,
    RF: Future<Output = Result<Result<StepVerdict, StepError>, H>>,
{
    let mut passed = Vec::new();
    let mut ms = Vec::new();
    for step in &manifest.steps {
        let stopped = match before_each().await {
            Err(halt) => Stopped::Halted(halt),
            Ok(()) => {
                let timer = StepTimer::start();
                let began = std::time::Instant::now();
                let ran = run(step).await;
                ms.push(u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX));
                let outcome = match &ran {
                    Ok(Ok(None)) => StepOutcome::Passed,
                    Ok(Ok(Some(_))) => StepOutcome::Failed,
                    Ok(Err(_)) => StepOutcome::Error,
                    Err(_) => StepOutcome::Halted,
                };
                timer.finish(manifest.kind.label(), &step.name, outcome);
                match ran {
                    Ok(Ok(None)) => {
                        passed.push(step.name.clone());
                        continue;
                    }
                    Ok(Ok(Some((error_type, items)))) => Stopped::Failed {
                        step: step.name.clone(),
                        error_type,
                        items,
                    },
                    Ok(Err(error)) => Stopped::Error(error),
                    Err(halt) => Stopped::Halted(halt),
                }
            }
        };
        return StepsRun {
            passed,
            stopped: Some(stopped),
            ms,
        };
    }
    StepsRun {
        passed,
        stopped: None,
        ms,
    }
}

/// [`run_steps`] for a caller already on a blocking thread, whose steps run
/// right there with nothing checked between them (a load commit, a dry run).
/// Blocks: call it from a blocking thread.
pub fn run_steps_blocking(
    manifest: &Manifest,
    mut run: impl FnMut(&Step) -> Result<StepVerdict, StepError>,
) -> StepsRun<Infallible> {
    // Every future here is ready when made, so this never waits.
    futures::executor::block_on(run_steps(
        manifest,
        || ready(Ok(())),
        |step| ready(Ok(run(step))),
    ))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::pipeline::PipelineKind;

    fn manifest(names: &[&str]) -> Manifest {
        let steps: String = names
            .iter()
            .map(|n| format!("[[steps]]\nname = \"{n}\"\ncomponent = \"builtin:insert\"\n"))
            .collect();
        Manifest::parse(
            PipelineKind::Load,
            &format!("version = 1\n{steps}"),
            "test.toml",
            Path::new("."),
        )
        .unwrap()
    }

    fn failure(error_type: &str) -> StepVerdict {
        Some((error_type.to_string(), Vec::new()))
    }

    #[test]
    fn every_step_runs_in_order_when_all_pass() {
        let mut ran = Vec::new();
        let outcome = run_steps_blocking(&manifest(&["a", "b", "c"]), |step| {
            ran.push(step.name.clone());
            Ok(None)
        });
        assert_eq!(ran, ["a", "b", "c"]);
        assert_eq!(outcome.passed, ["a", "b", "c"]);
        assert_eq!(outcome.stopped, None);
    }

    #[test]
    fn the_run_stops_at_the_first_failure_or_error() {
        let outcome = run_steps_blocking(&manifest(&["a", "b", "c"]), |step| {
            assert_ne!(step.name, "c", "no step runs after a failure");
            Ok(if step.name == "b" {
                failure("CheckSumError")
            } else {
                None
            })
        });
        assert_eq!(outcome.passed, ["a"]);
        assert_eq!(
            outcome.stopped,
            Some(Stopped::Failed {
                step: "b".into(),
                error_type: "CheckSumError".into(),
                items: Vec::new()
            })
        );

        let error = StepError::Reported {
            step: "a".into(),
            message: "no".into(),
        };
        let outcome = run_steps_blocking(&manifest(&["a", "b"]), |_| Err(error.clone()));
        assert!(outcome.passed.is_empty());
        assert_eq!(outcome.stopped, Some(Stopped::Error(error)));
    }

    #[test]
    fn a_check_before_a_step_or_its_runner_can_halt_the_run() {
        let mut checks = 0;
        let mut ran = Vec::new();
        let outcome = futures::executor::block_on(run_steps(
            &manifest(&["a", "b", "c"]),
            || {
                checks += 1;
                ready(if checks == 2 { Err("ended") } else { Ok(()) })
            },
            |step| {
                ran.push(step.name.clone());
                ready(Ok(Ok(None)))
            },
        ));
        assert_eq!((checks, ran.as_slice()), (2, ["a".to_string()].as_slice()));
        assert_eq!(outcome.stopped, Some(Stopped::Halted("ended")));

        let outcome = futures::executor::block_on(run_steps(
            &manifest(&["a", "b"]),
            || ready(Ok(())),
            |_| ready(Err("thread failed")),
        ));
        assert!(outcome.passed.is_empty());
        assert_eq!(outcome.stopped, Some(Stopped::Halted("thread failed")));
    }
}
