//! The components built into the host: `build.rs` compiles `../plugins/` for
//! wasm32-wasip2 and this module embeds the results. Manifests name them as
//! `builtin:<name>`.

/// (name, component bytes) of every built-in component.
const COMPONENTS: &[(&str, &[u8])] = &[
    (
        "validate_parquet",
        include_bytes!(concat!(env!("OUT_DIR"), "/validate_parquet.wasm")),
    ),
    (
        "enforce_service_clients",
        include_bytes!(concat!(env!("OUT_DIR"), "/enforce_service_clients.wasm")),
    ),
    (
        "verify_checksums",
        include_bytes!(concat!(env!("OUT_DIR"), "/verify_checksums.wasm")),
    ),
    (
        "match_schema",
        include_bytes!(concat!(env!("OUT_DIR"), "/match_schema.wasm")),
    ),
    (
        "insert",
        include_bytes!(concat!(env!("OUT_DIR"), "/insert.wasm")),
    ),
    // Steps that misbehave on purpose, for tests and for trying the limits.
    (
        "loop_forever",
        include_bytes!(concat!(env!("OUT_DIR"), "/loop_forever.wasm")),
    ),
    (
        "grow_memory",
        include_bytes!(concat!(env!("OUT_DIR"), "/grow_memory.wasm")),
    ),
    (
        "ungranted_import",
        include_bytes!(concat!(env!("OUT_DIR"), "/ungranted_import.wasm")),
    ),
];

/// The names manifests may use after `builtin:`.
pub const NAMES: &[&str] = &[
    "validate_parquet",
    "enforce_service_clients",
    "verify_checksums",
    "match_schema",
    "insert",
    "loop_forever",
    "grow_memory",
    "ungranted_import",
];

/// The bytes of a built-in component.
pub fn component(name: &str) -> Option<&'static [u8]> {
    COMPONENTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, bytes)| *bytes)
}
