//! What a step's call came to, shaped for the caller: a verdict (pass, or a
//! FAIL with its ErrorType and items) or the reason it gave none (time limit,
//! memory limit, trap, an error it reported). What a step hands back is held
//! to bounds here: a load step's FAIL must name one of the spec's ErrorTypes,
//! its report is kept to `MAX_REPORT_ITEMS` items of `MAX_REPORT_TEXT_BYTES`,
//! and `cut` bounds any text a step writes (its log lines too).
//!
//! It must never pass a step's text on unbounded, nor a load step's
//! ErrorType the spec does not have.

use std::time::Instant;

use wasmtime::Store;

use super::{
    SharedCause, bindings::lakehost::pipeline::types, interrupt::Interrupted, sandbox::StepState,
};
use crate::pipeline::{
    ErrorItem, MAX_REPORT_ITEMS, MAX_REPORT_TEXT_BYTES, StepError, StepVerdict, manifest::Step,
};

/// `text` cut to at most `max` bytes on a character boundary, marked when cut.
pub(super) fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(" [...]");
    }
    text
}

/// One line per run of a step, in the server's log (and a dry run's), with
/// its job and name: how it ended, its time from instantiation to verdict
/// and the most memory its instance was allowed to grow to.
pub(super) fn log_step_ran<D: ?Sized>(
    store: &Store<StepState<D>>,
    began: Instant,
    verdict: &Result<StepVerdict, StepError>,
) {
    let state = store.data();
    let outcome = match verdict {
        Ok(None) => "PASS",
        Ok(Some(_)) => "FAIL",
        Err(_) => "ERROR",
    };
    tracing::info!(
        step = %state.step,
        job_id = %state.job,
        outcome,
        us = began.elapsed().as_micros() as u64,
        peak_memory_bytes = state.limits.peak_bytes,
        "step ran"
    );
    if let Err(error) = verdict {
        tracing::warn!(step = %state.step, job_id = %state.job, %error, "a step gave no verdict");
    }
}

/// What a trapped step wrote to stderr, as its error tells it: `""`, or
/// `"; it wrote: <its end>"` (a Rust panic's message, the end of a Python
/// traceback), at most `MAX_REPORT_TEXT_BYTES`.
fn wrote(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let mut start = text
        .len()
        .saturating_sub(crate::pipeline::MAX_REPORT_TEXT_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("; it wrote: {}", &text[start..])
}

/// What a step's call came to: its verdict, or why it gave none (time limit,
/// its run stopped, memory limit, trap, an error it reported). A FAIL must name one of
/// `error_types` (when given); its report is kept to `MAX_REPORT_ITEMS`
/// items of at most `MAX_REPORT_TEXT_BYTES` each.
pub(super) fn verdict<D: ?Sized>(
    step: &Step,
    store: &Store<StepState<D>>,
    called: wasmtime::Result<Result<types::Outcome, String>>,
    error_types: Option<&[&str]>,
) -> Result<StepVerdict, StepError> {
    match called {
        Ok(Ok(types::Outcome::Pass)) => Ok(None),
        Ok(Ok(types::Outcome::Fail(failure))) => {
            if error_types.is_some_and(|known| !known.contains(&failure.error_type.as_str())) {
                return Err(StepError::UnknownErrorType {
                    step: step.name.clone(),
                    error_type: cut(failure.error_type, 64),
                });
            }
            let total = failure.items.len();
            let mut items: Vec<ErrorItem> = failure
                .items
                .into_iter()
                .take(MAX_REPORT_ITEMS)
                .map(|i| ErrorItem {
                    error_type: cut(i.error_type, 64),
                    error_message: cut(i.error_message, MAX_REPORT_TEXT_BYTES),
                    check_result: i.check_result.map(|c| cut(c, 16)),
                })
                .collect();
            if total > MAX_REPORT_ITEMS {
                items.push(ErrorItem {
                    error_type: "TRUNCATED".into(),
                    error_message: format!(
                        "step {} reported {total} items; the first {MAX_REPORT_ITEMS} are shown",
                        step.name
                    ),
                    check_result: None,
                });
            }
            Ok(Some((failure.error_type, items)))
        }
        Ok(Err(message)) => Err(StepError::Reported {
            step: step.name.clone(),
            message,
        }),
        Err(error) => {
            if let Some(interrupted) = error.downcast_ref::<Interrupted>() {
                Err(match interrupted {
                    Interrupted::TimeLimit => StepError::TimeLimit {
                        step: step.name.clone(),
                        limit_ms: step.time_limit_ms,
                    },
                    Interrupted::Stopped => StepError::Stopped {
                        step: step.name.clone(),
                    },
                })
            } else if store.data().limits.refused {
                Err(StepError::MemoryLimit {
                    step: step.name.clone(),
                    limit_bytes: step.memory_limit_bytes,
                })
            } else {
                Err(StepError::Trapped {
                    step: step.name.clone(),
                    source: SharedCause::of_wasmtime(error),
                    output: wrote(&store.data().stderr.contents()),
                })
            }
        }
    }
}
