//! The components built into the host: `build.rs` compiles `../plugins/` for
//! wasm32-wasip2 and this module embeds the results. Manifests name them as
//! `builtin:<name>`.

macro_rules! builtins {
    ($($name:literal),* $(,)?) => {
        /// (name, component bytes) of every built-in component.
        const COMPONENTS: &[(&str, &[u8])] = &[
            $(($name, include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".wasm")))),*
        ];
    };
}

builtins![
    // The default load pipeline's steps.
    "validate_parquet",
    "enforce_service_clients",
    "verify_checksums",
    "match_schema",
    "insert",
    // An example for orgs' own manifests (and the template for new steps).
    "reject_columns",
    // Steps that misbehave or dawdle on purpose, for tests and for trying limits.
    "loop_forever",
    "grow_memory",
    "ungranted_import",
    "pause",
];

/// The names manifests may use after `builtin:`.
pub fn names() -> impl Iterator<Item = &'static str> {
    COMPONENTS.iter().map(|(name, _)| *name)
}

/// The bytes of a built-in component.
pub fn component(name: &str) -> Option<&'static [u8]> {
    COMPONENTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, bytes)| *bytes)
}
