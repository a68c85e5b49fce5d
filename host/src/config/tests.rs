//! Tests of the configuration as a whole: the embedded default, loading a
//! file and `LAKEHOST_*` overrides; and the helpers the sections' own tests
//! share. Each section's rules are tested in its own file.

use std::{collections::BTreeSet, path::PathBuf};

use super::*;

/// `pairs` as the environment `Config::load` reads.
pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Asserts that each TOML document is refused with an error naming its key.
pub(super) fn assert_refused_at(cases: &[(&str, &str)]) {
    for (text, key) in cases {
        let err = Config::from_toml(text).unwrap_err();
        assert_eq!(err.key, *key, "for {text:?}: {err}");
    }
}

#[test]
fn embedded_default_is_valid_and_matches_design() {
    let config = Config::load(None, env(&[])).unwrap();
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.server.default_org, "demo");
    assert_eq!(config.orgs[0].zones, vec!["lab"]);
    assert_eq!(config.storage.s3_listen.to_string(), "127.0.0.1:9000");
    assert_eq!(config.server.metrics_listen.to_string(), "127.0.0.1:9464");
    assert_eq!(config.server.log_format, crate::config::LogFormat::Text);
    let roles: BTreeSet<_> = config
        .idp
        .clients
        .iter()
        .flat_map(|c| c.roles["svc_api"].clone())
        .collect();
    assert_eq!(roles.len(), 5, "a demo client for every role");
}

#[test]
fn env_overrides_single_keys_with_typed_values() {
    let config = Config::load(
        None,
        env(&[
            ("LAKEHOST_SERVER_LISTEN", "127.0.0.1:0"),
            ("LAKEHOST_SERVER_REQUEST_TIMEOUT_S", "5"),
            ("LAKEHOST_IDP_ENABLED", "false"),
            ("LAKEHOST_STORAGE_DATA_DIR", "/tmp/x"),
            ("OTHER", "ignored"),
        ]),
    )
    .unwrap();
    assert_eq!(config.server.listen.port(), 0);
    assert_eq!(config.server.request_timeout_s, 5);
    assert!(!config.idp.enabled);
    assert_eq!(config.storage.data_dir, PathBuf::from("/tmp/x"));
}

#[test]
fn unknown_env_key_names_the_key() {
    let err = Config::load(None, env(&[("LAKEHOST_SERVER_LISTN", "x")])).unwrap_err();
    assert_eq!(err.key, "server.listn");
    assert!(err.problem.contains("unknown field `listn`"), "{err}");
    let err = Config::load(None, env(&[("LAKEHOST_NOPE_X", "1")])).unwrap_err();
    assert!(err.key.contains("LAKEHOST_NOPE_X"), "{err}");
}

#[test]
fn the_test_suites_own_variables_are_not_config_keys() {
    let config = Config::load(
        None,
        env(&[
            ("LAKEHOST_TEST_DATABASE_URL", "postgres://x"),
            ("LAKEHOST_TEST_FUZZ_SECONDS", "60"),
            ("LAKEHOST_SERVER_MAX_BODY_BYTES", "1234"),
        ]),
    )
    .unwrap();
    assert_eq!(config.server.max_body_bytes, 1234);
    // A near miss is still an unknown key, not skipped.
    let err = Config::load(None, env(&[("LAKEHOST_TESTS_X", "1")])).unwrap_err();
    assert!(err.key.contains("LAKEHOST_TESTS_X"), "{err}");
}

#[test]
fn a_file_with_its_own_orgs_has_no_demo_principals() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[server]\ndefault_org = \"acme\"\n[[orgs]]\nname = \"acme\"\n",
    )
    .unwrap();
    let config = Config::load(Some(&path), env(&[])).unwrap();
    assert!(config.idp.clients.is_empty());
    assert!(config.idp.users.is_empty());
}

#[test]
fn flight_sql_is_off_unless_configured_and_needs_a_listener_of_its_own() {
    let config = Config::load(None, env(&[])).unwrap();
    assert_eq!(config.server.flight_listen, None);
    let on = Config::from_toml("[server]\nflight_listen = \"127.0.0.1:50051\"\n").unwrap();
    assert_eq!(
        on.server.flight_listen,
        Some("127.0.0.1:50051".parse().unwrap())
    );
    assert_refused_at(&[
        (
            "[server]\nlisten = \"127.0.0.1:8080\"\nflight_listen = \"127.0.0.1:8080\"\n",
            "server.flight_listen",
        ),
        (
            "[server]\nflight_listen = \"127.0.0.1:9464\"\n",
            "server.flight_listen",
        ),
        (
            "[server]\nflight_listen = \"127.0.0.1:50051\"\nwire_idle_timeout_s = 59\n",
            "server.wire_idle_timeout_s",
        ),
        (
            "[server]\nflight_listen = \"127.0.0.1:50051\"\nwire_idle_timeout_s = 1800\n",
            "server.wire_idle_timeout_s",
        ),
        (
            "[server]\nflight_listen = \"127.0.0.1:50051\"\n[query]\ntyped_results = false\n",
            "server.flight_listen",
        ),
    ]);
}

#[test]
fn postgres_is_off_unless_configured_and_needs_tls_off_loopback_and_a_listener_of_its_own() {
    let config = Config::load(None, env(&[])).unwrap();
    assert_eq!(config.server.pg_listen, None);
    let tls = "tls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n";
    let on =
        Config::from_toml(&format!("[server]\npg_listen = \"127.0.0.1:5433\"\n{tls}")).unwrap();
    assert_eq!(on.server.pg_listen, Some("127.0.0.1:5433".parse().unwrap()));
    // Without a certificate, loopback only (plain connections never leave
    // the machine).
    for loopback in ["127.0.0.1:5433", "[::1]:5433"] {
        let plain = Config::from_toml(&format!("[server]\npg_listen = \"{loopback}\"\n")).unwrap();
        assert_eq!(plain.server.pg_listen, Some(loopback.parse().unwrap()));
    }
    assert_refused_at(&[
        (
            "[server]\npg_listen = \"0.0.0.0:5433\"\n",
            "server.pg_listen",
        ),
        (
            "[server]\npg_listen = \"192.168.1.10:5433\"\n",
            "server.pg_listen",
        ),
        (
            &format!(
                "[server]\nlisten = \"127.0.0.1:8080\"\npg_listen = \"127.0.0.1:8080\"\n{tls}"
            ),
            "server.pg_listen",
        ),
        (
            &format!(
                "[server]\nflight_listen = \"127.0.0.1:5433\"\npg_listen = \"127.0.0.1:5433\"\n{tls}"
            ),
            "server.pg_listen",
        ),
        (
            &format!(
                "[server]\npg_listen = \"127.0.0.1:5433\"\n{tls}[query]\ntyped_results = false\n"
            ),
            "server.pg_listen",
        ),
        (
            &format!("[server]\npg_listen = \"127.0.0.1:5433\"\nwire_idle_timeout_s = 1800\n{tls}"),
            "server.wire_idle_timeout_s",
        ),
    ]);
}
