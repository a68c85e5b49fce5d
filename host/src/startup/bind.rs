//! Binding the listeners a configuration names (the APIs on `server.listen`,
//! the upload endpoint on `storage.s3_listen`, `/metrics` on
//! `server.metrics_listen`, and Flight SQL and Postgres when set), the TLS
//! acceptor of the first two, and the addresses the server calls its own.

use std::{net::SocketAddr, path::Path, sync::Arc};

use anyhow::Context as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use url::Url;

use super::wire;
use crate::config::Config;

/// The bound listeners, before anything is served on them.
pub(super) struct Bound {
    pub api: TcpListener,
    pub api_addr: SocketAddr,
    pub upload: TcpListener,
    pub upload_addr: SocketAddr,
    pub metrics: TcpListener,
    pub metrics_addr: SocketAddr,
    pub flight: Option<TcpListener>,
    pub pg: Option<TcpListener>,
    /// HTTPS on the API and upload listeners (`server.tls_cert`).
    pub tls: Option<TlsAcceptor>,
}

impl Bound {
    /// Binds every listener `config` names; the first that cannot be bound
    /// is the error, naming its key.
    pub async fn listeners(config: &Config) -> anyhow::Result<Self> {
        let (api, api_addr) = listen(config.server.listen, "server.listen").await?;
        let (upload, upload_addr) = listen(config.storage.s3_listen, "storage.s3_listen").await?;
        let (metrics, metrics_addr) =
            listen(config.server.metrics_listen, "server.metrics_listen").await?;
        let flight = wire::bind(config.server.flight_listen, "server.flight_listen").await?;
        let pg = wire::bind(config.server.pg_listen, "server.pg_listen").await?;
        let tls = match (&config.server.tls_cert, &config.server.tls_key) {
            (Some(cert), Some(key)) => Some(tls_acceptor(cert, key, &[b"h2", b"http/1.1"])?),
            _ => None,
        };
        Ok(Self {
            api,
            api_addr,
            upload,
            upload_addr,
            metrics,
            metrics_addr,
            flight,
            pg,
            tls,
        })
    }

    /// `auth.auth_url`, else this server's own API address (the embedded
    /// identity provider).
    pub fn auth_url(&self, config: &Config) -> Url {
        match &config.auth.auth_url {
            Some(url) => url.clone(),
            None => own_url(self.api_addr, self.tls.is_some()),
        }
    }

    /// `uploads.public_url`, else this server's own upload address.
    pub fn upload_endpoint(&self, config: &Config) -> Url {
        match &config.uploads.public_url {
            Some(url) => url.clone(),
            None => own_url(self.upload_addr, self.tls.is_some()),
        }
    }
}

async fn listen(address: SocketAddr, key: &str) -> anyhow::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} ({key})"))?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// The server's own address, used as `auth_url` when none is configured (the
/// embedded identity provider). Loopback and unspecified addresses read as
/// `localhost`, matching DESIGN.md's default `http://localhost:8080`.
fn own_url(addr: SocketAddr, tls: bool) -> Url {
    let scheme = if tls { "https" } else { "http" };
    let host = if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        "localhost".to_string()
    } else {
        match addr {
            SocketAddr::V4(v4) => v4.ip().to_string(),
            SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
        }
    };
    Url::parse(&format!("{scheme}://{host}:{}", addr.port())).expect("well-formed URL")
}

/// rustls with TLS 1.2 and 1.3 only, for the server's certificate, offering
/// the ALPN protocols `alpn` (HTTP's two; `postgresql` on the Postgres
/// listener, which libpq asks for).
pub(super) fn tls_acceptor(cert: &Path, key: &Path, alpn: &[&[u8]]) -> anyhow::Result<TlsAcceptor> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("cannot read {} (server.tls_cert)", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("cannot read {} (server.tls_key)", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("server.tls_cert and server.tls_key do not form a usable pair")?;
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    Ok(TlsAcceptor::from(Arc::new(config)))
}
