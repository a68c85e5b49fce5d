//! The cluster secret: every call between lakehost processes carries it as
//! `authorization: Bearer <secret>`, and a worker checks it on the call's
//! headers before a byte of its body (the plan) is read.
//!
//! Both ends live here: `SecretCheck` on the worker's listener, and
//! `SecretChannels`, the channel resolver coordinators and workers (which
//! call each other for shuffles) reach workers through.

use std::{path::Path, sync::Arc};

use async_trait::async_trait;
use datafusion::common::DataFusionError;
use datafusion_distributed::{
    ChannelResolver, WorkerChannel,
    grpc::{BoxCloneSyncChannel, DefaultChannelResolver, create_worker_client},
};
use subtle::ConstantTimeEq as _;
use tower::ServiceExt as _;
use url::Url;

use crate::config::{DistributedConfig, MIN_SECRET_BYTES};

/// The shared secret of a cluster.
#[derive(Clone)]
pub struct ClusterSecret {
    bytes: Arc<[u8]>,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

impl ClusterSecret {
    /// The configured secret: `distributed.secret`, or the contents of
    /// `distributed.secret_file` without trailing white space.
    pub fn from_config(config: &DistributedConfig) -> anyhow::Result<Self> {
        let text = match (&config.secret, &config.secret_file) {
            (Some(secret), _) => secret.clone(),
            (None, Some(path)) => read_secret_file(path)?,
            (None, None) => anyhow::bail!("distributed.secret is not set"),
        };
        Self::new(text.as_bytes())
    }

    pub fn new(bytes: &[u8]) -> anyhow::Result<Self> {
        anyhow::ensure!(
            bytes.len() >= MIN_SECRET_BYTES,
            "the cluster secret must be at least {MIN_SECRET_BYTES} bytes"
        );
        anyhow::ensure!(
            bytes.iter().all(|b| b.is_ascii_graphic()),
            "the cluster secret must be printable ASCII without spaces (it travels in a header)"
        );
        Ok(Self {
            bytes: bytes.into(),
        })
    }

    /// Whether an `authorization` header value carries this secret
    /// (compared in constant time).
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        authorization
            .and_then(|value| value.strip_prefix(b"Bearer "))
            .is_some_and(|given| bool::from(given.ct_eq(&self.bytes)))
    }

    fn header(&self) -> http::HeaderValue {
        let mut value = http::HeaderValue::from_bytes(&[b"Bearer ", &*self.bytes].concat())
            .expect("printable ASCII is a header value");
        value.set_sensitive(true);
        value
    }
}

fn read_secret_file(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read {} (distributed.secret_file): {e}",
            path.display()
        )
    })?;
    Ok(text.trim_end().to_string())
}

/// The worker side: refuses a call without the secret (`Unauthenticated`)
/// from its headers alone, so no plan is decoded for it.
#[derive(Clone)]
pub struct SecretCheck {
    secret: ClusterSecret,
}

impl SecretCheck {
    pub fn new(secret: ClusterSecret) -> Self {
        Self { secret }
    }
}

impl tonic::service::Interceptor for SecretCheck {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let given = request
            .metadata()
            .get("authorization")
            .map(|value| value.as_bytes());
        if self.secret.admits(given) {
            Ok(request)
        } else {
            crate::observability::metrics::cluster_call_refused();
            Err(tonic::Status::unauthenticated(
                "missing or wrong cluster secret (distributed.secret)",
            ))
        }
    }
}

/// The caller side: the crate's channels (one connection per worker,
/// cached), each request carrying the secret.
#[derive(Clone)]
pub struct SecretChannels {
    channels: DefaultChannelResolver,
    header: http::HeaderValue,
}

impl SecretChannels {
    pub fn new(secret: &ClusterSecret) -> Self {
        Self {
            channels: DefaultChannelResolver::default(),
            header: secret.header(),
        }
    }
}

impl std::fmt::Debug for SecretChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretChannels")
    }
}

#[async_trait]
impl ChannelResolver for SecretChannels {
    async fn get_worker_client_for_url(
        &self,
        url: &Url,
    ) -> Result<Box<dyn WorkerChannel>, DataFusionError> {
        let channel = self.channels.get_channel(url).await?;
        let header = self.header.clone();
        let channel = channel.map_request(move |mut request: http::Request<tonic::body::Body>| {
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, header.clone());
            request
        });
        Ok(create_worker_client(BoxCloneSyncChannel::new(channel)))
    }
}

/// The workers one session's reads reached: `SecretChannels`, noting each
/// worker a stage was sent to (what the Query resource's `workers` counts).
#[derive(Clone)]
pub struct RecordingChannels {
    channels: SecretChannels,
    reached: Arc<WorkersReached>,
}

/// A session's set of workers reached, kept in its config.
#[derive(Debug, Default)]
pub struct WorkersReached(std::sync::Mutex<std::collections::BTreeSet<Url>>);

impl WorkersReached {
    pub fn count(&self) -> usize {
        self.0.lock().expect("workers reached lock").len()
    }
}

impl RecordingChannels {
    pub fn new(channels: SecretChannels, reached: Arc<WorkersReached>) -> Self {
        Self { channels, reached }
    }
}

#[async_trait]
impl ChannelResolver for RecordingChannels {
    async fn get_worker_client_for_url(
        &self,
        url: &Url,
    ) -> Result<Box<dyn WorkerChannel>, DataFusionError> {
        self.reached
            .0
            .lock()
            .expect("workers reached lock")
            .insert(url.clone());
        self.channels.get_worker_client_for_url(url).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn admits_only_the_bearer_secret() {
        let secret = ClusterSecret::new(SECRET).unwrap();
        assert!(secret.admits(Some(&[b"Bearer ", SECRET].concat())));
        assert!(!secret.admits(None));
        assert!(!secret.admits(Some(SECRET)));
        assert!(!secret.admits(Some(&[b"Bearer ", &SECRET[..31]].concat())));
        assert!(!secret.admits(Some(&[b"Bearer ", SECRET, b"x"].concat())));
        assert!(!secret.admits(Some(&[b"bearer ", SECRET].concat())));
        assert!(!secret.admits(Some(b"Bearer ")));
    }

    #[test]
    fn refuses_short_or_unprintable_secrets() {
        assert!(ClusterSecret::new(&SECRET[..31]).is_err());
        assert!(ClusterSecret::new(&[b' '; 40]).is_err());
        assert!(ClusterSecret::new(&[SECRET, b"\n"].concat()).is_err());
    }

    #[test]
    fn a_secret_file_is_read_trimmed_and_checked_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let config = |path: &std::path::Path| DistributedConfig {
            secret_file: Some(path.to_path_buf()),
            ..DistributedConfig::default()
        };
        let good = dir.path().join("good");
        std::fs::write(&good, [SECRET, b"\n"].concat()).unwrap();
        let secret = ClusterSecret::from_config(&config(&good)).unwrap();
        assert!(secret.admits(Some(&[b"Bearer ", SECRET].concat())));
        let missing = dir.path().join("missing");
        let refused = ClusterSecret::from_config(&config(&missing)).unwrap_err();
        assert!(
            refused.to_string().contains("(distributed.secret_file)"),
            "{refused}"
        );
        let short = dir.path().join("short");
        std::fs::write(&short, b"too short\n").unwrap();
        let refused = ClusterSecret::from_config(&config(&short)).unwrap_err();
        assert!(
            refused.to_string().contains("at least 32 bytes"),
            "{refused}"
        );
    }

    #[test]
    fn the_header_is_sensitive_and_admitted() {
        let secret = ClusterSecret::new(SECRET).unwrap();
        let header = secret.header();
        assert!(header.is_sensitive());
        assert!(secret.admits(Some(header.as_bytes())));
        assert!(!format!("{secret:?}").contains("0123"));
    }

    #[test]
    fn the_interceptor_refuses_before_the_body() {
        use tonic::service::Interceptor as _;
        let mut check = SecretCheck::new(ClusterSecret::new(SECRET).unwrap());
        let refused = check.call(tonic::Request::new(())).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        let mut request = tonic::Request::new(());
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", std::str::from_utf8(SECRET).unwrap())
                .parse()
                .unwrap(),
        );
        assert!(check.call(request).is_ok());
    }
}
