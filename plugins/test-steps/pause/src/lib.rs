//! A test step that takes its time and then passes: config `{"ms": 1500}`
//! keeps it busy that long (for tests that stop the server mid-commit).

wit_bindgen::generate!({ path: "../../../wit", world: "step" });

struct Pause;

impl Guest for Pause {
    fn run(_context: LoadContext, config: String) -> Result<Outcome, String> {
        let config: serde_json::Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        let ms = config["ms"].as_u64().unwrap_or(1000);
        let start = std::time::Instant::now();
        while start.elapsed().as_millis() < u128::from(ms) {
            std::hint::spin_loop();
        }
        Ok(Outcome::Pass)
    }
}

export!(Pause);
