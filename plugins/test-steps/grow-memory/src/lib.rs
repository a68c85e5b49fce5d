//! A test step that allocates without bound: the host's memory limit must
//! stop it.

wit_bindgen::generate!({ path: "../../../wit", world: "step" });

struct GrowMemory;

impl Guest for GrowMemory {
    fn run(_context: LoadContext, _config: String) -> Result<Outcome, String> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

export!(GrowMemory);
