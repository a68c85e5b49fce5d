//! A test step that misbehaves as its config says (`{"how": "..."}`), for
//! the tests of a hostile plugin's containment:
//! - `recurse`: recursion without end (the wasm stack overflows);
//! - `panic`: a Rust panic (a trap);
//! - `flood_logs`: megabytes of log lines;
//! - `unknown_error_type`: a FAIL whose ErrorType is none of the spec's;
//! - `huge_report`: a FAIL with five thousand items of 10 KB each.

wit_bindgen::generate!({ path: "../../../wit", world: "step" });

use lakehost::pipeline::{log, types::ErrorItem, types::Failure};

struct Misbehave;

/// Recursion that ends only past `u64::MAX` levels: the stack gives out first.
fn recurse(depth: u64) -> u64 {
    if depth == u64::MAX {
        return depth;
    }
    std::hint::black_box(recurse(std::hint::black_box(depth + 1))) + 1
}

impl Guest for Misbehave {
    fn run(_context: LoadContext, config: String) -> Result<Outcome, String> {
        let config: serde_json::Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        match config["how"].as_str().unwrap_or_default() {
            "recurse" => Ok(Outcome::Fail(Failure {
                error_type: format!("{}", recurse(0)),
                items: Vec::new(),
            })),
            "panic" => panic!("this step panics on purpose"),
            "flood_logs" => {
                let line = "x".repeat(1 << 20);
                for _ in 0..64 {
                    log::write(log::Level::Info, &line);
                }
                Ok(Outcome::Pass)
            }
            "unknown_error_type" => Ok(Outcome::Fail(Failure {
                error_type: "TotallyFine".into(),
                items: Vec::new(),
            })),
            "huge_report" => Ok(Outcome::Fail(Failure {
                error_type: "ValidationError".into(),
                items: (0..5_000)
                    .map(|i| ErrorItem {
                        error_type: "UNEXPECTED_COLUMN".into(),
                        error_message: format!("{i} {}", "y".repeat(10_000)),
                        check_result: None,
                    })
                    .collect(),
            })),
            other => Err(format!("unknown misbehaviour {other:?}")),
        }
    }
}

export!(Misbehave);
