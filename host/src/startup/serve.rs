//! Serving a built `Application` and stopping it: every listener under
//! `listener::serve` with its connection cap and timeouts, until a stop;
//! then the drain (see `startup`'s header). A lake that is not there when
//! serving begins (a bucket nobody created) is said in the log at once:
//! startup goes on, `/readyz` answers 503 naming it, and turns 200 by
//! itself once it is there.

use std::{future::Future, time::Duration};

use tokio_util::sync::CancellationToken;

use super::{Application, wire::serve_pg};
use crate::{
    api,
    lake::Lake,
    listener::{self, ConnectionLimits},
};

/// How long the lake may take to answer the check when serving begins (an
/// S3 client retries a while before it gives up).
const LAKE_CHECK_AT_START: Duration = Duration::from_secs(10);

impl Application {
    /// Serves the APIs and the upload endpoint until SIGTERM or SIGINT, then
    /// drains; a second signal exits the process at once (130).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let signalled = stop_signals()?;
        self.run_until(signalled).await
    }

    /// Serves until `stop` resolves, then drains (see the module header) and
    /// returns when the replica may exit.
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> std::io::Result<()> {
        let _lake_checked = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
            say_if_the_lake_is_missing(self.lake.clone()),
        ));
        // Scrapers are few: a small cap, out of the descriptors kept back.
        // Served until the drain is over (the task ends when this returns).
        let metrics = tokio::spawn(listener::serve(
            self.metrics_listener,
            None,
            self.metrics_router,
            ConnectionLimits {
                max_connections: api::metrics::MAX_SCRAPE_CONNECTIONS,
                ..self.limits
            },
            CancellationToken::new(),
        ));
        let _metrics = tokio_util::task::AbortOnDropHandle::new(metrics);
        let stop_accepting = CancellationToken::new();
        // The wire protocols' statements may compute silently longer than a
        // request may idle.
        let wire_limits = ConnectionLimits {
            busy_timeout: self.wire_idle_timeout,
            ..self.limits
        };
        let flight = self.flight.map(|flight| {
            listener::serve(
                flight.listener,
                self.tls.clone(),
                flight.router,
                wire_limits,
                stop_accepting.clone(),
            )
        });
        // Stages come from other replicas' queries: served like the APIs,
        // without TLS (the secret is checked on every call; keep the
        // listener on a private network).
        let cluster_worker = self.cluster_worker.map(|worker| {
            listener::serve(
                worker.listener,
                None,
                worker.router,
                ConnectionLimits {
                    idle_timeout: worker.idle_timeout,
                    ..self.limits
                },
                stop_accepting.clone(),
            )
        });
        let pg = self
            .pg
            .map(|pg| serve_pg(pg, wire_limits, stop_accepting.clone()));
        let serving = async {
            tokio::join!(
                listener::serve(
                    self.listener,
                    self.tls.clone(),
                    self.router,
                    self.limits,
                    stop_accepting.clone()
                ),
                listener::serve(
                    self.upload_listener,
                    self.tls,
                    self.upload_router,
                    self.limits,
                    stop_accepting.clone()
                ),
                async {
                    if let Some(flight) = flight {
                        flight.await;
                    }
                },
                async {
                    if let Some(pg) = pg {
                        pg.await;
                    }
                },
                async {
                    if let Some(worker) = cluster_worker {
                        worker.await;
                    }
                },
            )
        };
        tokio::pin!(serving);
        tokio::select! {
            _ = &mut serving => return Ok(()),
            () = stop => {}
        }
        let deadline = tokio::time::Instant::now() + self.drain_for;
        tracing::info!(
            drain_s = self.drain_for.as_secs(),
            running_jobs = self.drain.running_jobs(),
            "draining"
        );
        self.drain.begin();
        tokio::select! {
            _ = &mut serving => {}
            _ = tokio::time::sleep(self.drain_notice) => {}
        }
        stop_accepting.cancel();
        let (requests, handed_back) = tokio::join!(
            tokio::time::timeout_at(deadline, &mut serving),
            self.drain.end_jobs(deadline)
        );
        if requests.is_err() {
            tracing::warn!("requests still open at the end of the drain were cut");
        }
        self.workers.cancel();
        self.store.close().await;
        tracing::info!(handed_back, "drained");
        Ok(())
    }
}

/// Logs a warning when `lake` does not answer or is not there (a bucket
/// that does not exist), with the reason `/readyz` gives.
async fn say_if_the_lake_is_missing(lake: Lake) {
    match tokio::time::timeout(LAKE_CHECK_AT_START, lake.probe()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(
            error = %e,
            "the lake is not ready: /readyz answers 503 until it is"
        ),
        Err(_) => tracing::warn!(
            wait_s = LAKE_CHECK_AT_START.as_secs(),
            "the lake did not answer: /readyz answers 503 until it does"
        ),
    }
}

/// Resolves on the first SIGTERM or SIGINT; the second exits the process
/// at once with 130. Registered when called.
fn stop_signals() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let (first, signalled) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        let _ = first.send(());
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        tracing::warn!("a second stop signal: exiting without draining");
        std::process::exit(130);
    });
    Ok(async move {
        let _ = signalled.await;
    })
}
