//! Builds the pipeline steps in `../plugins/` for wasm32-wasip2 and puts the
//! components in OUT_DIR, where `pipeline::builtin` embeds them, so that
//! `cargo run` and `cargo test` need nothing else.

use std::{env, path::PathBuf, process::Command};

/// The components the host embeds: (crate name, file name of the component).
const PLUGINS: &[&str] = &[
    "validate_parquet",
    "enforce_service_clients",
    "verify_checksums",
    "match_schema",
    "insert",
    "loop_forever",
    "grow_memory",
    "ungranted_import",
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let plugins = manifest_dir.join("../plugins");
    let wit = manifest_dir.join("../wit");
    println!("cargo:rerun-if-changed={}", wit.display());
    for entry in ["Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", plugins.join(entry).display());
    }
    for dir in walk(&plugins) {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    let target_dir = out.join("plugins-target");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(&plugins)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target_dir);
    // The outer build's settings are for the host, not for the guests.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_PROFILE_RELEASE_DEBUG",
    ] {
        build.env_remove(var);
    }
    let status = build
        .status()
        .expect("cargo runs to build the plugins (wasm32-wasip2)");
    assert!(
        status.success(),
        "building ../plugins for wasm32-wasip2 failed; `rustup target add wasm32-wasip2` if the target is missing"
    );
    for name in PLUGINS {
        let built = target_dir.join(format!("wasm32-wasip2/release/{name}.wasm"));
        std::fs::copy(&built, out.join(format!("{name}.wasm")))
            .unwrap_or_else(|e| panic!("{}: {e}", built.display()));
    }
}

/// The source folders of the plugins (not their target folder).
fn walk(root: &std::path::Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return dirs;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() && name != "target" {
            dirs.push(path.clone());
            dirs.extend(walk(&path));
        }
    }
    dirs
}
