//! Tells the integration tests what this machine has to drive: a
//! `lakehost_has_*` cfg for each outside part (a Postgres server, an S3
//! server, the Python clients, ...) whose variable the `.ci/` scripts export.
//! A test that needs one is marked
//! `#[cfg_attr(not(lakehost_has_x), ignore = "needs X: ...")]`, so a bare
//! machine reports it ignored with its reason instead of passing it unrun.
//! With `CI` set every cfg is on: there a missing part fails its tests.

use std::{env, path::Path};

/// Each cfg and the variable whose presence turns it on (what `.ci/postgres`,
/// `.ci/s3`, `.ci/python` and `.ci/jdbc` export).
const FROM_VARIABLES: [(&str, &str); 6] = [
    ("lakehost_has_postgres", "LAKEHOST_TEST_DATABASE_URL"),
    ("lakehost_has_s3", "LAKEHOST_TEST_S3_ENDPOINT"),
    ("lakehost_has_python", "LAKEHOST_TEST_PYTHON"),
    ("lakehost_has_superset", "LAKEHOST_TEST_SUPERSET_PYTHON"),
    ("lakehost_has_jdbc", "LAKEHOST_TEST_JDBC_JAR"),
    ("lakehost_has_dbt", "LAKEHOST_TEST_DBT_PYTHON"),
];

/// On when `psql` is on PATH (Debian's postgresql-client; `.ci/postgres`
/// installs it with the server).
const PSQL: &str = "lakehost_has_psql";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rerun-if-env-changed=PATH");
    let in_ci = env::var_os("CI").is_some();
    for (cfg, variable) in FROM_VARIABLES {
        println!("cargo:rerun-if-env-changed={variable}");
        let set = env::var_os(variable).is_some_and(|value| !value.is_empty());
        emit(cfg, in_ci || set);
    }
    let psql = env::var_os("PATH")
        .is_some_and(|path| env::split_paths(&path).any(|dir| is_file(&dir.join("psql"))));
    emit(PSQL, in_ci || psql);
}

fn emit(cfg: &str, on: bool) {
    println!("cargo:rustc-check-cfg=cfg({cfg})");
    if on {
        println!("cargo:rustc-cfg={cfg}");
    }
}

fn is_file(path: &Path) -> bool {
    path.metadata().is_ok_and(|m| m.is_file())
}
