//! The `[server]` section: the API listener, its timeouts and connection
//! guards, the TLS files, the region domain, the default org and the DailyRun
//! prefix, the metrics listener and the log format, with their defaults and
//! their checks.
//!
//! It checks only its own values: that `server.default_org` names a configured
//! org is checked with the orgs (`orgs.rs`), and the listener's effect on the
//! embedded provider's secrets with the provider (`idp.rs`).

use std::{net::SocketAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use super::{ConfigError, names::check_hostname};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub region_domain: String,
    pub default_org: String,
    /// Gateway timeout: a request still running after this many seconds gets 504.
    pub request_timeout_s: u64,
    /// Request bodies above this size get 413.
    pub max_body_bytes: u64,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Extra path prefix under which the DailyRun API is also served.
    pub dailyrun_prefix: String,
    /// Open connections per listener (API, upload endpoint); past it new
    /// connections are closed at once. Lowered to fit the open-file limit.
    pub max_connections: usize,
    /// Connections one org may hold on each wire listener (Flight SQL, the
    /// Postgres wire) once they have authenticated, so one org's idle
    /// sessions cannot lock the others out; unset: a quarter of
    /// `max_connections` (all of it when only one org is configured). Past it the org's next connection is refused in
    /// its protocol (SQLSTATE 53300, gRPC RESOURCE_EXHAUSTED).
    pub max_connections_per_org: Option<usize>,
    /// A client must finish the TLS handshake, and each request's headers,
    /// within this many seconds.
    pub header_read_timeout_s: u64,
    /// A connection on which nothing moved for this many seconds is closed;
    /// more than `request_timeout_s`, since a request may work that long silently.
    pub idle_timeout_s: u64,
    /// A stopping replica (SIGTERM, SIGINT) lets open requests and running
    /// jobs finish for this many seconds after the signal, then hands the
    /// jobs still running back to the other replicas and exits.
    pub drain_s: u64,
    /// For this many milliseconds after the signal a stopping replica still
    /// accepts connections while `/readyz` already answers 503, so a load
    /// balancer takes it out of rotation before its listeners close (at least
    /// the balancer's check interval times its fall count).
    pub drain_notice_ms: u64,
    /// Where `GET /metrics` (Prometheus text format) is served: a listener of
    /// its own, so the APIs' address never exposes it.
    pub metrics_listen: SocketAddr,
    /// `text` (the default) or `json`: one JSON object per log line.
    pub log_format: LogFormat,
    /// Where Arrow Flight SQL is served (gRPC, TLS when `tls_cert` is set);
    /// unset (the default): no Flight SQL listener.
    pub flight_listen: Option<SocketAddr>,
    /// Where the Postgres wire protocol is served; unset (the default): no
    /// Postgres listener. Passwords (client secrets) cross TLS only, so it
    /// needs `tls_cert`, unless it is a loopback address: then, without a
    /// certificate, plain connections from loopback are served (the
    /// secret never leaves the machine; `docs/compatibility.md`).
    pub pg_listen: Option<SocketAddr>,
    /// A Flight SQL or Postgres connection on which nothing moved for this
    /// many seconds while a statement runs is closed. A statement is silent
    /// while its query runs, so this must be more than `query.time_limit_s`
    /// (checked with the query section). While no statement runs, and while
    /// a result waits for a client that does not read it, the short
    /// `idle_timeout_s` applies.
    pub wire_idle_timeout_s: u64,
}

/// How log lines are written (stderr).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// tracing's human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, span fields (the request id) flattened in.
    Json,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".parse().expect("literal address"),
            region_domain: "localhost".into(),
            default_org: "demo".into(),
            request_timeout_s: 30,
            max_body_bytes: 10 * 1024 * 1024,
            tls_cert: None,
            tls_key: None,
            dailyrun_prefix: "/superset".into(),
            max_connections: 4096,
            max_connections_per_org: None,
            header_read_timeout_s: 10,
            idle_timeout_s: 60,
            drain_s: 30,
            drain_notice_ms: 0,
            metrics_listen: "127.0.0.1:9464".parse().expect("literal address"),
            log_format: LogFormat::Text,
            flight_listen: None,
            pg_listen: None,
            wire_idle_timeout_s: 1900,
        }
    }
}

impl ServerConfig {
    /// Each org's share of one listener's connections
    /// (`max_connections_per_org`; by default the whole cap when `orgs` is
    /// one, and a quarter of it when there are more).
    pub fn connections_per_org(&self, orgs: usize) -> usize {
        let default = if orgs <= 1 {
            self.max_connections
        } else {
            self.max_connections / 4
        };
        self.max_connections_per_org
            .unwrap_or(default)
            .clamp(1, self.max_connections.max(1))
    }

    /// Checks the section, except `dailyrun_prefix` (see
    /// `validate_dailyrun_prefix`).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check_hostname("server.region_domain", &self.region_domain)?;
        for (key, value) in [
            ("server.request_timeout_s", self.request_timeout_s),
            ("server.max_body_bytes", self.max_body_bytes),
            ("server.max_connections", self.max_connections as u64),
            (
                "server.max_connections_per_org",
                self.max_connections_per_org.unwrap_or(1) as u64,
            ),
            ("server.header_read_timeout_s", self.header_read_timeout_s),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        if self.idle_timeout_s <= self.request_timeout_s {
            return Err(ConfigError::new(
                "server.idle_timeout_s",
                "must be more than server.request_timeout_s (a request may work that long without sending a byte)",
            ));
        }
        if self.drain_notice_ms > self.drain_s.saturating_mul(1000) {
            return Err(ConfigError::new(
                "server.drain_notice_ms",
                "must be at most server.drain_s (the notice is part of the drain)",
            ));
        }
        if self.metrics_listen.port() != 0 && self.metrics_listen == self.listen {
            return Err(ConfigError::new(
                "server.metrics_listen",
                "must differ from server.listen (metrics have a listener of their own)",
            ));
        }
        self.validate_flight()?;
        self.validate_pg()?;
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => {
                return Err(ConfigError::new(
                    "server.tls_key",
                    "must be set when server.tls_cert is",
                ));
            }
            (None, Some(_)) => {
                return Err(ConfigError::new(
                    "server.tls_cert",
                    "must be set when server.tls_key is",
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// Checks the Flight SQL keys: a listener of its own, in a build that
    /// has Flight SQL.
    fn validate_flight(&self) -> Result<(), ConfigError> {
        let Some(flight) = self.flight_listen else {
            return Ok(());
        };
        if !cfg!(feature = "flight-sql") {
            return Err(ConfigError::new(
                "server.flight_listen",
                "this lakehost was built without Flight SQL (the cargo feature `flight-sql`)",
            ));
        }
        if flight.port() != 0 && (flight == self.listen || flight == self.metrics_listen) {
            return Err(ConfigError::new(
                "server.flight_listen",
                "must differ from server.listen and server.metrics_listen (Flight SQL has a listener of its own)",
            ));
        }
        if self.wire_idle_timeout_s < self.idle_timeout_s {
            return Err(ConfigError::new(
                "server.wire_idle_timeout_s",
                "must be at least server.idle_timeout_s",
            ));
        }
        Ok(())
    }

    /// Checks the Postgres keys: a listener of its own, in a build that has
    /// the protocol, with the certificate its password exchange needs.
    fn validate_pg(&self) -> Result<(), ConfigError> {
        let Some(pg) = self.pg_listen else {
            return Ok(());
        };
        if !cfg!(feature = "pg-wire") {
            return Err(ConfigError::new(
                "server.pg_listen",
                "this lakehost was built without the Postgres wire protocol (the cargo feature `pg-wire`)",
            ));
        }
        if pg.port() != 0
            && (pg == self.listen || pg == self.metrics_listen || Some(pg) == self.flight_listen)
        {
            return Err(ConfigError::new(
                "server.pg_listen",
                "must differ from server.listen, server.metrics_listen and server.flight_listen",
            ));
        }
        if (self.tls_cert.is_none() || self.tls_key.is_none()) && !pg.ip().is_loopback() {
            return Err(ConfigError::new(
                "server.pg_listen",
                "needs server.tls_cert and server.tls_key, or a loopback address such as 127.0.0.1:5433 (Postgres clients send their client secret as the password: only over TLS, or in the plain on loopback)",
            ));
        }
        Ok(())
    }

    /// Checks `server.dailyrun_prefix`. Apart from `validate` because
    /// `Config::validate` checks it after the `[dailyrun]` section: which error
    /// a config with several wrong keys reports first must not change.
    pub(super) fn validate_dailyrun_prefix(&self) -> Result<(), ConfigError> {
        if !self.dailyrun_prefix.starts_with('/')
            || self.dailyrun_prefix.ends_with('/')
            || self.dailyrun_prefix.contains("//")
        {
            return Err(ConfigError::new(
                "server.dailyrun_prefix",
                "must start with `/` and not end with `/`, e.g. \"/superset\"",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::assert_refused_at;

    #[test]
    fn bad_values_name_the_key() {
        assert_refused_at(&[
            ("[server]\nlisten = \"nowhere\"", "server.listen"),
            (
                "[server]\nrequest_timeout_s = \"slow\"",
                "server.request_timeout_s",
            ),
            (
                "[server]\nrequest_timeout_s = 0",
                "server.request_timeout_s",
            ),
            ("[server]\ntls_cert = \"c.pem\"", "server.tls_key"),
            (
                "[server]\ndrain_s = 1\ndrain_notice_ms = 1001",
                "server.drain_notice_ms",
            ),
            ("[server]\nfoo = 1", "server.foo"),
            (
                "[server]\nmetrics_listen = \"9464\"",
                "server.metrics_listen",
            ),
            (
                "[server]\nlisten = \"127.0.0.1:8080\"\nmetrics_listen = \"127.0.0.1:8080\"",
                "server.metrics_listen",
            ),
            ("[server]\nlog_format = \"xml\"", "server.log_format"),
            (
                "[server]\nmax_connections_per_org = 0",
                "server.max_connections_per_org",
            ),
        ]);
    }

    #[test]
    fn each_org_gets_the_whole_cap_alone_and_a_quarter_beside_others() {
        let mut server = super::ServerConfig {
            max_connections: 100,
            ..super::ServerConfig::default()
        };
        assert_eq!(server.connections_per_org(1), 100);
        assert_eq!(server.connections_per_org(3), 25);
        server.max_connections_per_org = Some(500);
        assert_eq!(server.connections_per_org(3), 100);
        server.max_connections_per_org = Some(7);
        assert_eq!(server.connections_per_org(1), 7);
    }
}
