//! What is built into the host: the components, which `build.rs` compiles
//! from `../plugins/` for wasm32-wasip2 and this module embeds (manifests
//! name them as `builtin:<name>`; each belongs to one pipeline, its WIT
//! world), and the default manifests of `pipelines/`, which a server started
//! away from that folder runs. Nothing else in the host embeds either.

use super::PipelineKind;

macro_rules! builtins {
    ($($name:literal: $kind:ident),* $(,)?) => {
        /// (name, pipeline, component bytes) of every built-in component.
        const COMPONENTS: &[(&str, PipelineKind, &[u8])] = &[
            $(($name, PipelineKind::$kind, include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".wasm")))),*
        ];
    };
}

builtins![
    // The default load pipeline's steps.
    "validate_parquet": Load,
    "enforce_service_clients": Load,
    "verify_checksums": Load,
    "match_schema": Load,
    "insert": Load,
    // An example for orgs' own manifests (and the template for new steps).
    "reject_columns": Load,
    // The daily run's SQL transform.
    "sql_transform": Daily,
    // Steps that misbehave or dawdle on purpose, for tests and for trying limits.
    "loop_forever": Load,
    "grow_memory": Load,
    "ungranted_import": Load,
    "pause": Load,
    "misbehave": Load,
    "daily_pause": Daily,
];

/// The steps that misbehave or dawdle on purpose: a manifest names them only
/// where `pipeline.test_steps` allows it.
pub const TEST_STEPS: &[&str] = &[
    "loop_forever",
    "grow_memory",
    "ungranted_import",
    "pause",
    "misbehave",
    "daily_pause",
];

/// The names manifests may use after `builtin:`, with their pipeline.
pub fn names() -> impl Iterator<Item = (&'static str, PipelineKind)> {
    COMPONENTS.iter().map(|(name, kind, _)| (*name, *kind))
}

/// The pipeline and the bytes of a built-in component.
pub fn component(name: &str) -> Option<(PipelineKind, &'static [u8])> {
    COMPONENTS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, kind, bytes)| (*kind, *bytes))
}

/// The repository's default manifest of a `kind` pipeline
/// (`pipelines/load.toml` / `pipelines/daily.toml`), as compiled in.
pub fn manifest(kind: PipelineKind) -> &'static str {
    match kind {
        PipelineKind::Load => include_str!("../../../pipelines/load.toml"),
        PipelineKind::Daily => include_str!("../../../pipelines/daily.toml"),
    }
}
