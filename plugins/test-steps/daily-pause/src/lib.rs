//! A daily-run test step that takes its time and then passes (config
//! `{"ms": 1500}`), or fails the run when config `{"fail": "reason"}` is given:
//! for tests of TIMED_OUT, ABORTED and FAILED runs.

// The generated export shim takes the run-context record flattened into its
// fields (11 core parameters), which clippy counts as too many arguments.
#![allow(clippy::too_many_arguments)]

wit_bindgen::generate!({ path: "../../../wit", world: "daily-step" });

use lakehost::pipeline::types::{ErrorItem, Failure};

struct DailyPause;

impl Guest for DailyPause {
    fn run(_context: RunContext, config: String) -> Result<Outcome, String> {
        let config: serde_json::Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        let ms = config["ms"].as_u64().unwrap_or(0);
        let start = std::time::Instant::now();
        while start.elapsed().as_millis() < u128::from(ms) {
            std::hint::spin_loop();
        }
        match config["fail"].as_str() {
            Some(reason) => Ok(Outcome::Fail(Failure {
                error_type: "TestFailure".into(),
                items: vec![ErrorItem {
                    error_type: "TEST_FAILURE".into(),
                    error_message: reason.to_string(),
                    check_result: None,
                }],
            })),
            None => Ok(Outcome::Pass),
        }
    }
}

export!(DailyPause);
