//! Each replica compiles the components stored through any replica in the
//! background, every `pipeline.deploy_poll_ms`: a version activated
//! anywhere then finds them ready here, and no commit compiles one (the
//! first round, at start, readies everything stored before; compiled forms
//! kept on disk make that a load, not a compile, after a restart). A
//! component that fails here is logged and left: the commit that needs it
//! fails naming it.

use std::{sync::Arc, time::Duration};

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::Deployments;
use crate::pipeline::PipelineKind;

/// Components read per page, and the most pages a round reads (the rest
/// wait for the next round, which starts after the last one it saw).
const PER_ROUND: i64 = 500;
const MAX_PAGES: i64 = 20;

/// How far back each round looks again: replicas' clocks differ, so a
/// component may be stored with a time a little before the last one seen.
const CLOCK_SLACK_MICROS: i64 = 60_000_000;

/// Starts the rounds until `stop`.
pub fn start_background_compiles(deployments: Arc<Deployments>, stop: CancellationToken) {
    let period = Duration::from_millis(deployments.config.deploy_poll_ms);
    let seen = Arc::new(Mutex::new(i64::MIN));
    crate::periodic::spawn_every(period, stop, move || {
        let (deployments, seen) = (deployments.clone(), seen.clone());
        async move {
            let mut seen = seen.lock().await;
            *seen = deployments.compile_round(*seen).await;
        }
    });
}

impl Deployments {
    /// Readies the components stored at or after `since` (less the slack);
    /// the latest time seen, from which the next round looks.
    pub(super) async fn compile_round(&self, since: i64) -> i64 {
        let from = since.saturating_sub(CLOCK_SLACK_MICROS);
        let mut latest = since;
        for page in 0..MAX_PAGES {
            let stored = match self
                .store
                .pipeline_components_since(from, PER_ROUND, page * PER_ROUND)
                .await
            {
                Ok(stored) => stored,
                Err(e) => {
                    tracing::warn!(error = %e, "deployed components could not be listed; trying again");
                    return latest;
                }
            };
            let last_page = (stored.len() as i64) < PER_ROUND;
            for component in stored {
                latest = latest.max(component.created_at);
                let Some(kind) = PipelineKind::of_world(&component.world) else {
                    continue;
                };
                match self.ready(kind, &component.digest).await {
                    Ok(true) => {
                        tracing::info!(digest = %component.digest, world = %component.world,
                        "a deployed pipeline component is compiled")
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(digest = %component.digest, error = %e,
                        "a deployed pipeline component could not be compiled"),
                }
            }
            if last_page {
                break;
            }
        }
        latest
    }
}
