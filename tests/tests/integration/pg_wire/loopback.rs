//! Plain Postgres connections on loopback without a certificate (issue 48).
//!
//! The embedded default without a certificate: `server.pg_listen` on
//! loopback serves plain connections from loopback (libpq's default
//! `sslmode=prefer` falls back to them), so psql reaches
//! `cargo run -p lakehost -- serve` as the README shows. The same password
//! exchange, the same refusals; a client that insists on TLS is told the
//! server has none.

use lakehost_tests::*;

/// psql run against a listener without a certificate, with `extra`
/// conninfo keys.
async fn plain_psql(
    port: u16,
    extra: &str,
    password: &str,
    args: &[&str],
) -> (bool, String, String) {
    super::psql_at(
        &format!("host=127.0.0.1 port={port} {extra}"),
        password,
        args,
    )
    .await
}

#[tokio::test]
#[cfg_attr(
    not(lakehost_has_psql),
    ignore = "needs psql: apt-get install postgresql-client (README, Tests)"
)]
async fn psql_connects_in_the_plain_on_loopback_without_a_certificate() {
    let app = spawn_app_with(|config| {
        config.server.pg_listen = Some("127.0.0.1:0".parse().unwrap());
        assert!(config.server.tls_cert.is_none());
    })
    .await;
    seed_demo_lake(&app).await;
    let port = app.pg_addr.expect("postgres listener").port();
    let admin = "dbname=demo user=demo-admin";

    // libpq's default (sslmode=prefer) asks for TLS, is told no, and goes on.
    let (ok, out, err) = plain_psql(
        port,
        admin,
        "demo-admin-secret",
        &["-At", "-c", "SELECT count(*) FROM demo_lake_v2.trips"],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "6");
    let (ok, out, err) = plain_psql(
        port,
        &format!("{admin} sslmode=disable"),
        "demo-admin-secret",
        &[
            "-At",
            "-c",
            "SELECT count(*) FROM demo_lake_v2.trips WHERE service_client_id = 1",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "2");

    // A client that insists on TLS is told there is none.
    let (ok, _, err) = plain_psql(
        port,
        &format!("{admin} sslmode=require"),
        "demo-admin-secret",
        &["-c", "SELECT 1"],
    )
    .await;
    assert!(!ok);
    assert!(err.contains("server does not support SSL"), "{err}");

    // The same password exchange and the same refusals as over TLS.
    let (ok, _, err) = plain_psql(port, admin, "wrong-secret", &["-c", "SELECT 1"]).await;
    assert!(!ok);
    assert!(
        err.contains("28P01") || err.contains("password authentication failed"),
        "{err}"
    );
    let public = "dbname=demo user=demo-public";
    let (ok, _, err) = plain_psql(
        port,
        public,
        "demo-public-secret",
        &[
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "SELECT count(*) FROM demo_lake_v2.trips",
        ],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains(&format!("ERROR:  42501: {EXECUTE_DENIED}")),
        "{err}"
    );

    // The other listeners stay plain HTTP: the README's tour is unchanged.
    assert!(app.base.starts_with("http://"), "{}", app.base);
}
