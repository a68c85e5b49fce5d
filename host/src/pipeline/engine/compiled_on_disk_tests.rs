//! The folder of compiled steps: loads, damage, and the budget's pruning
//! (least recently used first, stale temporary files, at start). Files'
//! modification times are set explicitly, never waited for.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;

const UNBOUNDED: u64 = u64::MAX;
const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn the_tools_cache_folder_follows_the_environment() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| std::ffi::OsString::from(value))
        }
    };
    const HOME: &[(&str, &str)] = &[("HOME", "/home/ada")];
    assert_eq!(
        tool_cache_dir(env(HOME)),
        Some(PathBuf::from("/home/ada/.cache/lakehost/compiled-steps"))
    );
    const XDG: &[(&str, &str)] = &[("HOME", "/home/ada"), ("XDG_CACHE_HOME", "/var/cache/ada")];
    assert_eq!(
        tool_cache_dir(env(XDG)),
        Some(PathBuf::from("/var/cache/ada/lakehost/compiled-steps"))
    );
    const OWN: &[(&str, &str)] = &[("HOME", "/home/ada"), ("LAKEHOST_CACHE_DIR", "/tmp/lh")];
    assert_eq!(
        tool_cache_dir(env(OWN)),
        Some(PathBuf::from("/tmp/lh/compiled-steps"))
    );
    // An empty LAKEHOST_CACHE_DIR turns the cache off; relative paths
    // (which would follow the working folder) are never used.
    assert_eq!(
        tool_cache_dir(env(&[("HOME", "/home/ada"), ("LAKEHOST_CACHE_DIR", "")])),
        None
    );
    assert_eq!(tool_cache_dir(env(&[("HOME", "relative")])), None);
    assert_eq!(
        tool_cache_dir(env(&[
            ("HOME", "/home/ada"),
            ("XDG_CACHE_HOME", "relative")
        ])),
        Some(PathBuf::from("/home/ada/.cache/lakehost/compiled-steps"))
    );
    assert_eq!(tool_cache_dir(env(&[])), None);
}

/// A component with no sections: the magic number, version 0xd, layer 1.
const EMPTY_COMPONENT: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

fn engine() -> Engine {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    Engine::new(&config).unwrap()
}

fn wasm() -> Vec<u8> {
    EMPTY_COMPONENT.to_vec()
}

#[test]
fn a_component_compiled_once_is_loaded_by_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine();
    let first = CompiledOnDisk::new(&engine, dir.path().join("compiled-steps"), UNBOUNDED);
    assert_eq!(
        first.component(&engine, &wasm()).unwrap().1,
        Readied::Compiled
    );
    // A new process: the same folder, the same wasmtime and settings.
    let next = CompiledOnDisk::new(&engine, dir.path().join("compiled-steps"), UNBOUNDED);
    assert_eq!(next.component(&engine, &wasm()).unwrap().1, Readied::Loaded);
    let files: Vec<_> = std::fs::read_dir(dir.path().join("compiled-steps"))
        .unwrap()
        .collect();
    assert_eq!(files.len(), 1, "one file, no partial one left: {files:?}");
}

#[test]
fn a_damaged_file_is_compiled_again_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine();
    let cache = CompiledOnDisk::new(&engine, dir.path().to_path_buf(), UNBOUNDED);
    cache.component(&engine, &wasm()).unwrap();
    let file = cache.file_of(&wasm());
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    assert_eq!(
        cache.component(&engine, &wasm()).unwrap().1,
        Readied::Compiled
    );
    assert_eq!(
        cache.component(&engine, &wasm()).unwrap().1,
        Readied::Loaded
    );
    // Cut short: the same.
    std::fs::write(&file, &bytes[..10]).unwrap();
    assert_eq!(
        cache.component(&engine, &wasm()).unwrap().1,
        Readied::Compiled
    );
}

#[test]
fn another_engine_setting_never_reads_the_file_of_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine();
    let cache = CompiledOnDisk::new(&engine, dir.path().to_path_buf(), UNBOUNDED);
    cache.component(&engine, &wasm()).unwrap();
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    let other = Engine::new(&config).unwrap();
    let other_cache = CompiledOnDisk::new(&other, dir.path().to_path_buf(), UNBOUNDED);
    assert_ne!(other_cache.file_of(&wasm()), cache.file_of(&wasm()));
    assert_eq!(
        other_cache.component(&other, &wasm()).unwrap().1,
        Readied::Compiled
    );
}

#[test]
fn a_folder_that_cannot_be_written_still_compiles() {
    let dir = tempfile::tempdir().unwrap();
    let blocked = dir.path().join("a-file");
    std::fs::write(&blocked, b"not a folder").unwrap();
    let engine = engine();
    let cache = CompiledOnDisk::new(&engine, blocked.join("compiled-steps"), UNBOUNDED);
    assert_eq!(
        cache.component(&engine, &wasm()).unwrap().1,
        Readied::Compiled
    );
}

/// Another component each: the empty one with a custom section holding `n`.
fn step(n: u8) -> Vec<u8> {
    let mut wasm = EMPTY_COMPONENT.to_vec();
    wasm.extend_from_slice(&[0x00, 0x03, 0x01, b'n', n]);
    wasm
}

/// The size of one compiled step's file.
fn entry_bytes(engine: &Engine) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let cache = CompiledOnDisk::new(engine, dir.path().to_path_buf(), UNBOUNDED);
    cache.component(engine, &step(0)).unwrap();
    std::fs::metadata(cache.file_of(&step(0))).unwrap().len()
}

fn set_last_used(file: &Path, at: SystemTime) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_modified(at)
        .unwrap();
}

fn last_used(file: &Path) -> SystemTime {
    std::fs::metadata(file).unwrap().modified().unwrap()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// `name` in `dir` with `bytes` bytes, last used `at`.
fn file_at(dir: &Path, name: &str, bytes: usize, at: SystemTime) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, vec![7; bytes]).unwrap();
    set_last_used(&file, at);
    file
}

/// A fixed moment for files whose age matters, so no test reads the clock.
fn moment() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

#[test]
fn writes_over_the_budget_evict_the_least_recently_used() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine();
    let budget = entry_bytes(&engine) * 5 / 2;
    let cache = CompiledOnDisk::new(&engine, dir.path().to_path_buf(), budget);
    cache.component(&engine, &step(1)).unwrap();
    cache.component(&engine, &step(2)).unwrap();
    let now = SystemTime::now();
    set_last_used(&cache.file_of(&step(1)), now - 3 * HOUR);
    set_last_used(&cache.file_of(&step(2)), now - 2 * HOUR);
    // The third does not fit: the one used longest ago goes.
    cache.component(&engine, &step(3)).unwrap();
    assert!(!cache.file_of(&step(1)).exists());
    assert!(cache.file_of(&step(2)).exists());
    assert!(cache.file_of(&step(3)).exists());
    // Needed again, it is compiled again, and the next oldest goes.
    assert_eq!(
        cache.component(&engine, &step(1)).unwrap().1,
        Readied::Compiled
    );
    assert!(!cache.file_of(&step(2)).exists());
    assert_eq!(names(dir.path()).len(), 2, "{:?}", names(dir.path()));
}

#[test]
fn a_step_loaded_is_kept_before_one_unused_since() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine();
    let budget = entry_bytes(&engine) * 5 / 2;
    let cache = CompiledOnDisk::new(&engine, dir.path().to_path_buf(), budget);
    cache.component(&engine, &step(1)).unwrap();
    cache.component(&engine, &step(2)).unwrap();
    let now = SystemTime::now();
    set_last_used(&cache.file_of(&step(1)), now - 3 * HOUR);
    set_last_used(&cache.file_of(&step(2)), now - 2 * HOUR);
    // A restart loads the older one: that is a use.
    let next = CompiledOnDisk::new(&engine, dir.path().to_path_buf(), budget);
    assert_eq!(
        next.component(&engine, &step(1)).unwrap().1,
        Readied::Loaded
    );
    assert!(last_used(&next.file_of(&step(1))) > now - HOUR);
    next.component(&engine, &step(3)).unwrap();
    assert!(next.file_of(&step(1)).exists());
    assert!(!next.file_of(&step(2)).exists());
    assert!(next.file_of(&step(3)).exists());
}

#[test]
fn the_step_just_written_stays_even_alone_over_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine();
    let cache = CompiledOnDisk::new(&engine, dir.path().to_path_buf(), 1);
    cache.component(&engine, &step(1)).unwrap();
    assert!(cache.file_of(&step(1)).exists());
    cache.component(&engine, &step(2)).unwrap();
    assert!(!cache.file_of(&step(1)).exists());
    assert!(cache.file_of(&step(2)).exists());
}

#[test]
fn a_file_another_process_removed_meanwhile_counts_as_gone() {
    let dir = tempfile::tempdir().unwrap();
    let at = moment();
    let first = file_at(dir.path(), "a.cwasm", 100, at);
    file_at(dir.path(), "b.cwasm", 100, at + HOUR);
    file_at(dir.path(), "c.cwasm", 100, at + 2 * HOUR);
    let cache = CompiledOnDisk::new(&engine(), dir.path().to_path_buf(), 150);
    let mut pruned = Pruned::default();
    let entries = cache.list(at + 3 * HOUR, &mut pruned).unwrap();
    // Another replica sharing the folder evicts the oldest first.
    std::fs::remove_file(first).unwrap();
    evict(entries, 150, None, &mut pruned);
    let expected = Pruned {
        evicted: 1,
        evicted_bytes: 100,
        kept_bytes: 100,
        ..Pruned::default()
    };
    assert_eq!(pruned, expected);
    assert_eq!(names(dir.path()), ["c.cwasm"]);
}

#[test]
fn a_write_cut_short_is_removed_after_a_day_and_other_files_never() {
    let dir = tempfile::tempdir().unwrap();
    let at = moment();
    file_at(dir.path(), ".0123.partial", 100, at);
    file_at(dir.path(), ".4567.partial", 100, at + 2 * HOUR);
    file_at(dir.path(), "notes.txt", 100, at - 1000 * HOUR);
    file_at(dir.path(), "a.cwasm", 100, at);
    let cache = CompiledOnDisk::new(&engine(), dir.path().to_path_buf(), 100);
    let pruned = cache.prune(None, at + 25 * HOUR).unwrap();
    let expected = Pruned {
        partials: 1,
        kept_bytes: 100,
        ..Pruned::default()
    };
    assert_eq!(pruned, expected);
    assert_eq!(names(dir.path()), [".4567.partial", "a.cwasm", "notes.txt"]);
}

#[test]
fn a_start_prunes_a_folder_filled_over_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let at = moment();
    for n in 0..5u32 {
        file_at(dir.path(), &format!("{n}.cwasm"), 100, at + n * HOUR);
    }
    file_at(dir.path(), ".0123.partial", 100, at);
    let engine = PipelineEngine::new().unwrap();
    engine.keep_compiled_within(dir.path().to_path_buf(), 250);
    assert_eq!(names(dir.path()), ["3.cwasm", "4.cwasm"]);
    // The folder is the first caller's: a second changes nothing.
    engine.keep_compiled_within(dir.path().to_path_buf(), 1);
    assert_eq!(names(dir.path()), ["3.cwasm", "4.cwasm"]);
}

#[test]
fn a_budget_of_zero_keeps_nothing_and_empties_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    file_at(dir.path(), "a.cwasm", 100, moment());
    let engine = engine();
    let cache = CompiledOnDisk::new(&engine, dir.path().to_path_buf(), 0);
    cache.prune_logged(None);
    assert!(names(dir.path()).is_empty());
    for _ in 0..2 {
        assert_eq!(
            cache.component(&engine, &step(1)).unwrap().1,
            Readied::Compiled
        );
    }
    assert!(names(dir.path()).is_empty());
}
