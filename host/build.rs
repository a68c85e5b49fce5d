//! Builds the pipeline steps in `../plugins/` for wasm32-wasip2 and puts the
//! components in OUT_DIR, where `pipeline::builtin` embeds them, so that
//! `cargo run` and `cargo test` need nothing else. Also tells the tests in
//! `host/tests/` what outside parts this machine has (`test_parts`).

use std::{env, path::PathBuf, process::Command};

fn main() {
    test_parts();
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let plugins = manifest_dir.join("../plugins");
    let wit = manifest_dir.join("../wit");
    println!("cargo:rerun-if-changed={}", wit.display());
    // `sqlx::migrate!` embeds the migrations: a new file alone must rebuild.
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join("migrations").display()
    );
    for entry in ["Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", plugins.join(entry).display());
    }
    for dir in walk(&plugins) {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    ensure_guest_target();
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
        "building ../plugins for wasm32-wasip2 failed (see the errors above)"
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

/// The guests' target, installed when missing: rustup installs the targets of
/// `rust-toolchain.toml` only with the toolchain itself, so a machine that had
/// the pinned toolchain before has no wasm32-wasip2 yet. A newcomer's
/// `cargo run` must work all the same.
fn ensure_guest_target() {
    const GUEST: &str = "wasm32-wasip2";
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    let installed = |root: &PathBuf| root.join("lib/rustlib").join(GUEST).join("lib").is_dir();
    if sysroot.as_ref().is_some_and(installed) {
        return;
    }
    // Under rustup (its proxies set RUSTUP_TOOLCHAIN), add the target to the
    // toolchain this build runs on.
    let Ok(toolchain) = env::var("RUSTUP_TOOLCHAIN") else {
        panic!(
            "the {GUEST} target is missing and this toolchain is not managed by rustup: \
             install the {GUEST} standard library for {rustc} to build the plugins"
        );
    };
    println!(
        "cargo:warning=adding the {GUEST} target to toolchain {toolchain} (rustup target add)"
    );
    let added = Command::new("rustup")
        .args(["target", "add", GUEST, "--toolchain", &toolchain])
        .status();
    match added {
        Ok(status) if status.success() => {}
        Ok(status) => panic!(
            "`rustup target add {GUEST} --toolchain {toolchain}` failed ({status}); \
             run it by hand, then build again"
        ),
        Err(e) => panic!(
            "could not run rustup to add the {GUEST} target ({e}); \
             run `rustup target add {GUEST}` by hand, then build again"
        ),
    }
}

/// A `lakehost_has_*` cfg for each outside part a test in `host/tests/` drives,
/// on when the variable its `.ci/` script exports is set (or `CI` is, where
/// a missing part must fail): a test that needs one is marked
/// `#[cfg_attr(not(lakehost_has_x), ignore = "needs X: ...")]`, so a bare
/// machine reports it ignored with its reason. As tests/build.rs does for
/// the integration tests. Only variables that stay the same from run to run
/// are read, since a change rebuilds this crate.
fn test_parts() {
    const FROM_VARIABLES: [(&str, &str); 5] = [
        ("lakehost_has_postgres", "LAKEHOST_TEST_DATABASE_URL"),
        ("lakehost_has_s3", "LAKEHOST_TEST_S3_ENDPOINT"),
        ("lakehost_has_haproxy", "LAKEHOST_TEST_HAPROXY"),
        ("lakehost_has_python", "LAKEHOST_TEST_PYTHON"),
        (
            "lakehost_has_cargo_component",
            "LAKEHOST_TEST_CARGO_COMPONENT",
        ),
    ];
    // Where host/tests/replicas.rs finds HAProxy when its variable is unset.
    const HAPROXY: [&str; 2] = ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"];
    println!("cargo:rerun-if-env-changed=CI");
    let in_ci = env::var_os("CI").is_some();
    for (cfg, variable) in FROM_VARIABLES {
        println!("cargo:rerun-if-env-changed={variable}");
        println!("cargo:rustc-check-cfg=cfg({cfg})");
        let set = env::var_os(variable).is_some_and(|value| !value.is_empty());
        let installed = cfg == "lakehost_has_haproxy"
            && HAPROXY
                .iter()
                .any(|path| std::path::Path::new(path).is_file());
        if in_ci || set || installed {
            println!("cargo:rustc-cfg={cfg}");
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
