//! A test step that never returns: the host's time limit must stop it.

wit_bindgen::generate!({ path: "../../../wit", world: "step" });

struct LoopForever;

impl Guest for LoopForever {
    fn run(_context: LoadContext, _config: String) -> Result<Outcome, String> {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

export!(LoopForever);
