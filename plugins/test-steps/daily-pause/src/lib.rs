//! A daily-run test step that takes its time and then passes (config
//! `{"ms": 1500}`), fails the run when config `{"fail": "reason"}` is given
//! (for tests of TIMED_OUT, ABORTED and FAILED runs), or misbehaves as
//! `{"how": "..."}` says, for the tests of a hostile daily step's
//! containment:
//! - `recurse`: recursion without end (the wasm stack overflows);
//! - `grow_memory`: allocation without bound (the memory limit stops it);
//! - `panic`: a Rust panic (a trap);
//! - `flood_logs`: 64 log lines of 1 MiB each, then a pass;
//! - `query`: the lake-sql import, then a FAIL reporting what the host
//!   answered (not granted, unless the manifest grants `lake-sql`).

// The generated export shim takes the run-context record flattened into its
// fields (11 core parameters), which clippy counts as too many arguments.
#![allow(clippy::too_many_arguments)]

wit_bindgen::generate!({ path: "../../../wit", world: "daily-step" });

use lakehost::pipeline::{
    lake_sql, log,
    types::{CapabilityError, ErrorItem, Failure},
};

struct DailyPause;

/// Recursion that ends only past `u64::MAX` levels: the stack gives out first.
fn recurse(depth: u64) -> u64 {
    if depth == u64::MAX {
        return depth;
    }
    std::hint::black_box(recurse(std::hint::black_box(depth + 1))) + 1
}

/// A FAIL of one item.
fn failure(message: String) -> Outcome {
    Outcome::Fail(Failure {
        error_type: "TestFailure".into(),
        items: vec![ErrorItem {
            error_type: "TEST_FAILURE".into(),
            error_message: message,
            check_result: None,
        }],
    })
}

fn misbehave(how: &str) -> Result<Outcome, String> {
    match how {
        "recurse" => Ok(failure(recurse(0).to_string())),
        "grow_memory" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        "panic" => panic!("this step panics on purpose"),
        "flood_logs" => {
            let line = "x".repeat(1 << 20);
            for _ in 0..64 {
                log::write(log::Level::Info, &line);
            }
            Ok(Outcome::Pass)
        }
        "query" => Ok(failure(match lake_sql::query("SELECT 1", 1) {
            Ok(rows) => format!("lake-sql: data {rows:?}"),
            Err(CapabilityError::NotGranted(why)) => format!("lake-sql: not granted: {why}"),
            Err(CapabilityError::Failed(why)) => format!("lake-sql: failed: {why}"),
        })),
        other => Err(format!("unknown misbehaviour {other:?}")),
    }
}

impl Guest for DailyPause {
    fn run(_context: RunContext, config: String) -> Result<Outcome, String> {
        let config: serde_json::Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        if let Some(how) = config["how"].as_str() {
            return misbehave(how);
        }
        let ms = config["ms"].as_u64().unwrap_or(0);
        let start = std::time::Instant::now();
        while start.elapsed().as_millis() < u128::from(ms) {
            std::hint::spin_loop();
        }
        match config["fail"].as_str() {
            Some(reason) => Ok(failure(reason.to_string())),
            None => Ok(Outcome::Pass),
        }
    }
}

export!(DailyPause);
