//! Builds the pipeline steps in `../plugins/` for wasm32-wasip2 and puts the
//! components in OUT_DIR, where `pipeline::builtin` embeds them, so that
//! `cargo run` and `cargo test` need nothing else.

use std::{env, path::PathBuf, process::Command};

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
    // Every component of the workspace; `pipeline::builtin` names the ones it embeds.
    let built = target_dir.join("wasm32-wasip2/release");
    for entry in std::fs::read_dir(&built).expect("the plugin build wrote its output") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let name = path.file_name().expect("a file name");
            std::fs::copy(&path, out.join(name))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
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
