//! A mutational fuzzer over every parser that reads bytes from outside
//! (`lakehost::fuzzing`): from the checked-in seeds in `tests/corpus/fuzz/
//! <target>/`, it mutates inputs (bit flips, interesting bytes, insertions,
//! deletions, duplicated and spliced chunks) for `LAKEHOST_TEST_FUZZ_SECONDS` per
//! target (3 by default; `.ci/run` gives each 30) and fails on any panic,
//! saving the input under `target/fuzz-crashes/`.
//!
//! This runs on the stable toolchain inside the test suite, without coverage
//! feedback. The same targets (`lakehost::fuzzing::TARGETS`) are libFuzzer
//! targets in `fuzz/`, coverage-guided, run outside CI by `fuzz/run` (it
//! needs a second, instrumented build of the server); `tests/fuzz.sh` runs
//! this harness for longer.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use lakehost::fuzzing;
use rand::{Rng as _, SeedableRng as _, rngs::StdRng, seq::SliceRandom as _};

/// Inputs that parsers handle specially.
const INTERESTING: &[&[u8]] = &[
    b"\0",
    b"\xff",
    b"\"",
    b"\\",
    b"'",
    b".",
    b"[",
    b"]",
    b"{",
    b"}",
    b"-1",
    b"0",
    b"4294967296",
    b"9223372036854775807",
    b"1e309",
    b"NaN",
    b"null",
    b"PAR1",
    b"==",
    b"\xf0\x9f\x98\x80",
    b"(",
    b")",
    b"--",
    b"/*",
    b"\n",
    b"%00",
    b"&",
];

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus/fuzz")
        .join(target);
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    for _ in 0..rng.gen_range(1..=4) {
        let at = rng.gen_range(0..=input.len());
        match rng.gen_range(0..7) {
            0 if !input.is_empty() => {
                let i = rng.gen_range(0..input.len());
                input[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !input.is_empty() => {
                let i = rng.gen_range(0..input.len());
                input[i] = rng.r#gen();
            }
            2 => {
                let bytes = INTERESTING.choose(rng).unwrap();
                input.splice(at..at, bytes.iter().copied());
            }
            3 if !input.is_empty() => {
                let end = (at + rng.gen_range(1..=16)).min(input.len());
                input.drain(at.min(end)..end);
            }
            4 if !input.is_empty() => {
                let start = rng.gen_range(0..input.len());
                let end = (start + rng.gen_range(1..=64)).min(input.len());
                let chunk = input[start..end].to_vec();
                input.splice(at..at, chunk);
            }
            5 => {
                let other = seeds.choose(rng).unwrap();
                if !other.is_empty() {
                    let start = rng.gen_range(0..other.len());
                    let end = (start + rng.gen_range(1..=64)).min(other.len());
                    input.splice(at..at, other[start..end].iter().copied());
                }
            }
            _ => input.truncate(at),
        }
    }
}

fn budget() -> Duration {
    let seconds = std::env::var("LAKEHOST_TEST_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    Duration::from_secs(seconds)
}

fn crash_path(target: &str, input: &[u8]) -> PathBuf {
    use sha2::Digest as _;
    let digest = hex_of(&sha2::Sha256::digest(input)[..8]);
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/fuzz-crashes")
        .join(format!("{target}-{digest}"))
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs the target on the seeds and on mutations of them for the budget.
fn fuzz(target: &str) {
    let parse = fuzzing::target(target).unwrap_or_else(|| panic!("no fuzz target {target}"));
    let seeds = seeds(target);
    let mut rng = StdRng::seed_from_u64(rand::random());
    let deadline = Instant::now() + budget();
    let (mut runs, mut accepted) = (0u64, 0u64);
    let mut queue: Vec<Vec<u8>> = seeds.clone();
    while runs < seeds.len() as u64 || Instant::now() < deadline {
        let mut input = queue.choose(&mut rng).unwrap().clone();
        if runs >= seeds.len() as u64 {
            mutate(&mut rng, &mut input, &seeds);
        } else {
            input = seeds[runs as usize].clone();
        }
        match catch_unwind(AssertUnwindSafe(|| parse(&input))) {
            Ok(true) => {
                accepted += 1;
                // Accepted inputs are good starting points.
                if queue.len() < 4096 {
                    queue.push(input);
                }
            }
            Ok(false) => {}
            Err(_) => {
                let path = crash_path(target, &input);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &input).unwrap();
                panic!("{target} panicked on the input saved at {}", path.display());
            }
        }
        runs += 1;
    }
    eprintln!("fuzz {target}: {runs} inputs, {accepted} accepted");
}

/// Every target has its seeds, and every seed folder its target.
#[test]
fn every_fuzz_target_has_seeds_and_every_seed_folder_a_target() {
    let folders: std::collections::BTreeSet<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/fuzz"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
    let targets: std::collections::BTreeSet<String> = fuzzing::TARGETS
        .iter()
        .map(|(name, _)| name.to_string())
        .collect();
    assert_eq!(folders, targets);
}

#[test]
fn fuzz_token() {
    fuzz("token");
}

#[test]
fn fuzz_service_client_claim() {
    fuzz("service_client_claim");
}

#[test]
fn fuzz_form_policy() {
    fuzz("form_policy");
}

#[test]
fn fuzz_presigned_query() {
    fuzz("presigned_query");
}

#[test]
fn fuzz_parquet() {
    fuzz("parquet");
}

#[test]
fn fuzz_manifest() {
    fuzz("manifest");
}

#[test]
fn fuzz_config() {
    fuzz("config");
}

#[test]
fn fuzz_sql() {
    fuzz("sql");
}

#[test]
fn fuzz_upload_grant() {
    fuzz("upload_grant");
}

#[test]
fn fuzz_page_token() {
    fuzz("page_token");
}

#[test]
fn fuzz_parameters() {
    fuzz("parameters");
}

#[test]
fn fuzz_flight_ticket() {
    fuzz("flight_ticket");
}

#[test]
fn fuzz_pg_frame() {
    fuzz("pg_frame");
}
