//! What is built into the host: the components, which `build.rs` compiles
//! from `../plugins/` for wasm32-wasip2 and this module embeds (manifests
//! name them as `builtin:<name>`; each belongs to one pipeline, its WIT
//! world), and the default manifests of `pipelines/`, which a server started
//! away from that folder runs. Nothing else in the host embeds either.

use super::PipelineKind;

/// (name, pipeline, component bytes) of built-in components.
type Components = &'static [(&'static str, PipelineKind, &'static [u8])];

macro_rules! components {
    ($($name:literal: $kind:ident),* $(,)?) => {
        &[$(($name, PipelineKind::$kind, include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".wasm")))),*]
    };
}

const COMPONENTS: Components = components![
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
];

/// Steps that misbehave or dawdle on purpose: only in builds with the
/// `test-steps` feature (the test suite's), never in a production binary.
#[cfg(any(test, feature = "test-steps"))]
const TEST_COMPONENTS: Components = components![
    "loop_forever": Load,
    "grow_memory": Load,
    "ungranted_import": Load,
    "pause": Load,
    "misbehave": Load,
    "daily_pause": Daily,
];
#[cfg(not(any(test, feature = "test-steps")))]
const TEST_COMPONENTS: Components = &[];

// `config::HAS_TEST_STEPS` says which builds hold them; this holds it true.
const _: () = assert!(crate::config::HAS_TEST_STEPS != TEST_COMPONENTS.is_empty());

/// The names of the test steps, in every build: a manifest names them only
/// where `pipeline.test_steps` allows it.
pub const TEST_STEPS: &[&str] = &[
    "loop_forever",
    "grow_memory",
    "ungranted_import",
    "pause",
    "misbehave",
    "daily_pause",
];

fn all() -> impl Iterator<Item = &'static (&'static str, PipelineKind, &'static [u8])> {
    COMPONENTS.iter().chain(TEST_COMPONENTS)
}

/// The names manifests may use after `builtin:`, with their pipeline.
pub fn names() -> impl Iterator<Item = (&'static str, PipelineKind)> {
    all().map(|(name, kind, _)| (*name, *kind))
}

/// The pipeline and the bytes of a built-in component.
pub fn component(name: &str) -> Option<(PipelineKind, &'static [u8])> {
    all()
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_test_steps_are_named_once_and_embedded_in_test_builds() {
        let embedded: Vec<&str> = super::TEST_COMPONENTS.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(embedded, super::TEST_STEPS);
    }
}
