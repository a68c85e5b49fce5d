//! Which of the configured workers answer: each is probed every
//! `PROBE_EVERY` (a TCP connect within `PROBE_TIMEOUT`), and stages are
//! sent only to those that answered last time. A worker that dies fails
//! the queries it was running (the crate does not retry a task); the next
//! queries go to the others, and a read with no worker left runs here.

use std::{
    net::SocketAddr,
    sync::{Arc, RwLock},
    time::Duration,
};

use datafusion::common::DataFusionError;
use datafusion_distributed::WorkerResolver;
use tokio_util::sync::CancellationToken;
use url::Url;

const PROBE_EVERY: Duration = Duration::from_secs(2);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The configured workers and the ones that answered the last probe.
#[derive(Debug)]
pub struct Members {
    configured: Vec<Url>,
    live: RwLock<Vec<Url>>,
}

impl crate::engine::distributed::WorkerPool for Members {
    fn any_live(&self) -> bool {
        !self.live.read().expect("members lock").is_empty()
    }
}

impl Members {
    /// All configured workers count as live until the first probe says
    /// otherwise.
    pub fn new(configured: Vec<Url>) -> Arc<Self> {
        Arc::new(Self {
            live: RwLock::new(configured.clone()),
            configured,
        })
    }

    pub fn live(&self) -> Vec<Url> {
        self.live.read().expect("members lock").clone()
    }

    pub fn configured(&self) -> &[Url] {
        &self.configured
    }

    /// Probes every worker now, and keeps the ones that answered.
    pub async fn probe(&self) {
        let checks = self
            .configured
            .iter()
            .map(|url| async move { answers(url).await.then(|| url.clone()) });
        let live: Vec<Url> = futures::future::join_all(checks)
            .await
            .into_iter()
            .flatten()
            .collect();
        let mut current = self.live.write().expect("members lock");
        if *current != live {
            let gone: Vec<&str> = current
                .iter()
                .filter(|url| !live.contains(url))
                .map(Url::as_str)
                .collect();
            let back: Vec<&str> = live
                .iter()
                .filter(|url| !current.contains(url))
                .map(Url::as_str)
                .collect();
            tracing::warn!(
                ?gone,
                ?back,
                live = live.len(),
                "distributed workers changed"
            );
            *current = live;
        }
    }

    /// Probes until `stop`.
    pub fn start(self: &Arc<Self>, stop: CancellationToken) {
        let members = self.clone();
        crate::periodic::spawn_every(PROBE_EVERY, stop, move || {
            let members = members.clone();
            async move { members.probe().await }
        });
    }
}

/// Whether something accepts connections at the worker's address.
async fn answers(url: &Url) -> bool {
    let Ok(addresses) = url.socket_addrs(|| None) else {
        return false;
    };
    let connect = |address: SocketAddr| async move {
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(address)).await,
            Ok(Ok(_))
        )
    };
    for address in addresses {
        if connect(address).await {
            return true;
        }
    }
    false
}

/// The crate's view: the live workers.
#[derive(Debug, Clone)]
pub struct LiveWorkers(pub Arc<Members>);

impl WorkerResolver for LiveWorkers {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        Ok(self.0.live())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_worker_that_stops_answering_is_left_out_until_it_answers_again() {
        let listening = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = Url::parse(&format!("http://{}", listening.local_addr().unwrap())).unwrap();
        let stopped = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let down_address = stopped.local_addr().unwrap();
        drop(stopped);
        let down = Url::parse(&format!("http://{down_address}")).unwrap();
        let members = Members::new(vec![up.clone(), down.clone()]);
        assert_eq!(members.live().len(), 2, "live until probed");
        members.probe().await;
        assert_eq!(members.live(), vec![up.clone()]);
        assert_eq!(
            LiveWorkers(members.clone()).get_urls().unwrap(),
            vec![up.clone()]
        );
        let _back = tokio::net::TcpListener::bind(down_address).await.unwrap();
        members.probe().await;
        assert_eq!(members.live(), vec![up, down]);
        assert_eq!(members.configured().len(), 2);
    }
}
