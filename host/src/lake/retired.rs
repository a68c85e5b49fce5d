//! The retired-file sweeper. A DROP TABLE or a daily refresh's swap unlists a
//! table's files in the catalog and, in the same transaction, records them in
//! `retired_files`; this sweeper deletes them from the object store once
//! `grace` (the query time limit) has passed, so a query planned on the old
//! file list just before still reads it to its end. Any replica may sweep:
//! deleting a file twice is harmless, and a file is forgotten only once it is
//! gone.

use std::{sync::Arc, time::Duration};

use object_store::{ObjectStoreExt as _, path::Path as ObjectPath};
use tokio_util::sync::CancellationToken;

use super::Lake;
use crate::{clock::SharedClock, periodic::spawn_every, store::Store};

/// Retired files looked at per store round trip.
const BATCH: i64 = 500;

pub struct RetiredFileSweeper {
    store: Store,
    lake: Lake,
    clock: SharedClock,
    grace: Duration,
}

impl RetiredFileSweeper {
    pub fn new(store: Store, lake: Lake, clock: SharedClock, grace: Duration) -> Arc<Self> {
        Arc::new(Self {
            store,
            lake,
            clock,
            grace,
        })
    }

    /// Deletes the files retired more than `grace` ago; returns how many are
    /// gone. A file the object store refuses to delete stays recorded and is
    /// tried again on the next sweep.
    pub async fn sweep(&self) -> Result<usize, crate::store::Error> {
        let grace = i64::try_from(self.grace.as_micros()).unwrap_or(i64::MAX);
        let retired_before = self.clock.now().timestamp_micros().saturating_sub(grace);
        let objects = self.lake.object_store();
        let mut swept = 0;
        loop {
            let due = self.store.retired_files_due(retired_before, BATCH).await?;
            if due.is_empty() {
                return Ok(swept);
            }
            let mut gone = Vec::with_capacity(due.len());
            for path in &due {
                match objects.delete(&ObjectPath::from(path.as_str())).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => gone.push(path.clone()),
                    Err(e) => tracing::warn!(%path, error = %e, "could not delete a retired file"),
                }
            }
            self.store.forget_retired_files(&gone).await?;
            swept += gone.len();
            // A short batch was the last; a batch with failures is left for
            // the next sweep rather than read again at once.
            if due.len() < BATCH as usize || gone.len() < due.len() {
                return Ok(swept);
            }
        }
    }

    /// Sweeps every tenth of the grace period (between 1 s and a minute)
    /// until `stop` is cancelled.
    pub fn start(self: &Arc<Self>, stop: CancellationToken) {
        let sweeper = self.clone();
        let period = (self.grace / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
        spawn_every(period, stop, move || {
            let sweeper = sweeper.clone();
            async move {
                match sweeper.sweep().await {
                    Ok(0) => {}
                    Ok(swept) => tracing::info!(swept, "retired data files deleted"),
                    Err(e) => tracing::warn!(error = %e, "retired-file sweep failed"),
                }
            }
        });
    }
}
