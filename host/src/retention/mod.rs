//! The retention sweep (issue 49): everything lakehost writes has a
//! lifetime, and this is what enforces it. One replica at a time holds the
//! `retention` lease in the store and, every `retention.sweep_every_s`, runs
//! each sweep in bounded batches: query results and job rows (`rows.rs`),
//! loads left OPEN (`load::LoadService::sweep_stale_staging`), idempotency
//! keys, the identity provider's expired login codes, and retired data
//! files (`retired`). Every
//! `retention.scan_every_s` it also lists the lake (`scan.rs`): orphan data
//! and result files, half-written files, and the bytes of each kind
//! (`lakehost_storage_bytes`). docs/operating.md "Retention" lists every
//! kind's lifetime.
//!
//! A round's failures are logged and counted; the next round tries again.
//! Nothing here decides what a file or row is for: the store's statements
//! say which rows are due and which paths are still named.

mod rows;
mod scan;

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use tokio_util::sync::CancellationToken;

pub use scan::StorageBytes;

use crate::{
    clock::SharedClock,
    config::RetentionConfig,
    lake::Lake,
    load::LoadService,
    observability::retention::{self as figures, Swept},
    periodic::spawn_every,
    retired::{INTERRUPTED_WRITE_AGE, RetiredFileSweeper},
    store::{Store, new_id},
};

/// The lease's name in the store.
const LEASE: &str = "retention";

/// The row that says when the next lake scan is due.
const SCAN: &str = "retention-scan";

/// Batches one sweep may take per round: the rest waits for the next round.
const MAX_BATCHES: usize = 20;

/// Why one sweep failed (the round goes on with the next).
#[derive(Debug, thiserror::Error)]
#[error("the {} sweep failed", kind.as_str())]
pub struct SweepError {
    pub kind: Swept,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl SweepError {
    pub fn new(kind: Swept, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            kind,
            source: Box::new(source),
        }
    }
}

/// What one round did.
#[derive(Debug, Default)]
pub struct Round {
    /// Whether this replica held the lease (else it did nothing).
    pub held: bool,
    /// What each sweep removed, in the order they ran.
    pub swept: Vec<(Swept, u64)>,
    /// The lake's bytes, when the round scanned it.
    pub storage: Option<StorageBytes>,
    /// The sweeps that failed.
    pub failures: Vec<SweepError>,
}

impl Round {
    /// What the sweeps of `kind` removed in this round.
    pub fn removed(&self, kind: Swept) -> u64 {
        self.swept
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| n)
            .sum()
    }
}

/// The parts the sweeps act on.
pub struct SweptParts {
    pub store: Store,
    pub lake: Lake,
    pub clock: SharedClock,
    pub loads: Arc<LoadService>,
    pub retired_files: Arc<RetiredFileSweeper>,
}

/// One replica's retention sweep (the module header says what it does).
pub struct Sweeper {
    parts: SweptParts,
    config: RetentionConfig,
    /// This replica's name on the lease.
    holder: String,
}

impl Sweeper {
    pub fn new(parts: SweptParts, config: RetentionConfig) -> Arc<Self> {
        Arc::new(Self {
            parts,
            config,
            holder: new_id(),
        })
    }

    fn now(&self) -> i64 {
        self.parts.clock.now().timestamp_micros()
    }

    fn batch(&self) -> i64 {
        i64::try_from(self.config.batch).unwrap_or(500)
    }

    /// Takes or renews the lease for three rounds: a holder that stops is
    /// replaced within three rounds.
    async fn hold_lease(&self) -> Result<bool, crate::store::Error> {
        let now = self.now();
        let length =
            i64::try_from(self.config.sweep_every_s.saturating_mul(3_000_000)).unwrap_or(i64::MAX);
        self.parts
            .store
            .take_sweep_lease(LEASE, &self.holder, now, now.saturating_add(length))
            .await
    }

    /// One round: nothing unless this replica holds the lease; then every
    /// sweep, and the lake scan when `scan` or when one is due.
    pub async fn round(&self, scan: bool) -> Round {
        let started = Instant::now();
        let mut round = Round::default();
        match self.hold_lease().await {
            Ok(true) => round.held = true,
            Ok(false) => return round,
            Err(e) => {
                tracing::warn!(error = %e, "the retention lease was not taken");
                return round;
            }
        }
        self.sweep_rows(&mut round).await;
        if scan || self.scan_due().await {
            self.scan_lake(&mut round).await;
        }
        figures::sweep_round(started.elapsed());
        round
    }

    /// The sweeps of rows and of the files rows name.
    async fn sweep_rows(&self, round: &mut Round) {
        note(round, Swept::Results, self.sweep_results().await);
        note(round, Swept::Queries, self.sweep_queries().await);
        note(round, Swept::Loads, self.sweep_loads().await);
        note(round, Swept::DailyRuns, self.sweep_daily_runs().await);
        let staging = self.parts.loads.sweep_stale_staging().await;
        note(round, Swept::Staging, counted(Swept::Staging, staging));
        let keys = self.sweep_idempotency_keys().await;
        note(round, Swept::IdempotencyKeys, keys);
        let codes = self.sweep_login_codes().await;
        note(round, Swept::IdentityProvider, codes);
        let retired = self.parts.retired_files.sweep().await;
        note(
            round,
            Swept::RetiredFiles,
            counted(Swept::RetiredFiles, retired),
        );
    }

    /// Whether a lake scan is due, for the whole fleet: the store's
    /// `retention-scan` row runs out `scan_every_s` after the last scan
    /// began, and a holder name of its own per look means only a row that
    /// ran out is taken. So a restart does not list the lake again, and no
    /// two replicas scan within one period.
    async fn scan_due(&self) -> bool {
        let now = self.now();
        let every =
            i64::try_from(self.config.scan_every_s.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
        let store = &self.parts.store;
        match store
            .take_sweep_lease(SCAN, &new_id(), now, now.saturating_add(every))
            .await
        {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "whether a lake scan is due could not be read");
                false
            }
        }
    }

    /// Lists the lake: orphans and half-written files go, bytes are counted.
    async fn scan_lake(&self, round: &mut Round) {
        let older_than = SystemTime::now() - INTERRUPTED_WRITE_AGE;
        let interrupted = self
            .parts
            .retired_files
            .sweep_interrupted_writes(older_than)
            .await;
        let interrupted = counted(Swept::InterruptedWrites, interrupted);
        note(round, Swept::InterruptedWrites, interrupted);
        match self.scan().await {
            Ok(scan) => {
                note(round, Swept::OrphanFiles, Ok(scan.orphan_files));
                note(round, Swept::OrphanResults, Ok(scan.orphan_results));
                note(round, Swept::OrphanStaged, Ok(scan.orphan_staged));
                scan.bytes.publish();
                round.storage = Some(scan.bytes);
            }
            Err(e) => note(round, e.kind, Err(e)),
        }
    }

    /// Rounds every `retention.sweep_every_s` until `stop`; the lease goes
    /// back when it stops (a draining replica), so another takes over at once.
    pub fn start(self: &Arc<Self>, stop: CancellationToken) {
        let sweeper = self.clone();
        spawn_every(
            Duration::from_secs(self.config.sweep_every_s),
            stop.clone(),
            move || {
                let sweeper = sweeper.clone();
                async move {
                    sweeper.round(false).await;
                }
            },
        );
        let sweeper = self.clone();
        tokio::spawn(async move {
            stop.cancelled().await;
            let store = &sweeper.parts.store;
            if let Err(e) = store.release_sweep_lease(LEASE, &sweeper.holder).await {
                tracing::debug!(error = %e, "the retention lease was not given back");
            }
        });
    }
}

/// A sweep's count of `kind` as the round records it.
fn counted<E>(kind: Swept, outcome: Result<usize, E>) -> Result<u64, SweepError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    outcome
        .map(|n| n as u64)
        .map_err(|e| SweepError::new(kind, e))
}

/// Records one sweep's outcome in the round and the metrics.
fn note(round: &mut Round, kind: Swept, outcome: Result<u64, SweepError>) {
    match outcome {
        Ok(count) => {
            figures::swept(kind, count);
            if count > 0 {
                tracing::info!(kind = kind.as_str(), count, "retention sweep removed");
            }
            round.swept.push((kind, count));
        }
        Err(e) => {
            figures::sweep_failed(kind);
            tracing::warn!(error = %e, source = %e.source, "retention sweep failed");
            round.failures.push(e);
        }
    }
}
