//! Background work repeated on a fixed period until the server stops: the
//! staging sweep, the retired-file and interrupted-write sweeps and the
//! daily-run scheduler. The first round runs at once; a round that overruns
//! delays the next one rather than bunching rounds up.

use std::{future::Future, time::Duration};

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

/// Spawns a task running `round` now and then every `period` until `stop`.
pub fn spawn_every<F, R>(period: Duration, stop: CancellationToken, mut round: F)
where
    F: FnMut() -> R + Send + 'static,
    R: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            round().await;
        }
    });
}
