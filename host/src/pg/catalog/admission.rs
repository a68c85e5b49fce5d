//! Which catalog statements run now: the caps jobs have, for statements
//! that are not jobs.
//!
//! A catalog statement runs on the engine runtime beside the query jobs, so
//! it is admitted as they are (`query::service`'s fair sharing): at most
//! `query.max_running_per_org` of one org and `query.max_running_per_caller`
//! of one caller at once on this replica, counted by the same `RunsHere`,
//! and then in one of `query.workers` slots. A caller at its cap waits for
//! one of its own statements (or its org's) to end, never behind another
//! org's; the slots, each held at most one catalog budget, go first come
//! first served. Waiting is bounded too: past its budget a statement is
//! refused (53300) rather than queued on.
//!
//! Catalog statements are counted apart from the jobs, in a `RunsHere` of
//! their own with the jobs' caps: a caller whose queries fill its share
//! (for up to `query.time_limit_s`) can still list its tables, as BI tools
//! do beside the queries they run, and a listing never takes a place fair
//! sharing gives to a query.
//!
//! This module decides and counts; it never runs a statement or times one.

use std::{sync::Arc, time::Duration};

use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};

use crate::{
    query::service::{CountedRun, RunsHere},
    store::JobCaps,
};

/// The catalog statements of this replica: counted per org and caller, and
/// the slots they run in.
#[derive(Debug)]
pub struct CatalogAdmission {
    runs: Arc<RunsHere>,
    slots: Arc<Semaphore>,
    caps: JobCaps,
}

/// A statement's place: counted under its caps and holding a slot until
/// dropped.
pub struct Admitted {
    _counted: CountedRun,
    _slot: OwnedSemaphorePermit,
}

/// Why a statement was not admitted within its wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotAdmitted {
    /// Its caller, or its org, ran its share of catalog statements for as
    /// long as it waited.
    #[error(
        "too many catalog statements at once: a client runs at most {} and an org at most {} \
         at a time on a server; try again when they have ended",
        .0.per_caller,
        .0.per_org
    )]
    OverCaps(JobCaps),
    /// Every slot of this replica stayed taken (by other callers' statements).
    #[error("too many catalog statements at once on this server: try again shortly")]
    Busy,
}

impl CatalogAdmission {
    /// `workers` slots, with `caps` per org and per caller.
    pub fn new(workers: usize, caps: JobCaps) -> Self {
        Self {
            runs: Arc::default(),
            slots: Arc::new(Semaphore::new(workers.max(1))),
            caps,
        }
    }

    /// A place for a statement of `caller_sub` in `org`, waited for at most
    /// `wait`: first under the caps (behind the caller's and its org's own
    /// statements only), then a slot.
    pub async fn admit(
        &self,
        org: &str,
        caller_sub: &str,
        wait: Duration,
    ) -> Result<Admitted, NotAdmitted> {
        let deadline = Instant::now() + wait;
        let counted = loop {
            // Enabled before the caps are checked: a statement that ends in
            // between still wakes this one.
            let freed = self.runs.freed();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(counted) = self.runs.try_enter(org, caller_sub, self.caps) {
                break counted;
            }
            tokio::select! {
                () = freed => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(NotAdmitted::OverCaps(self.caps));
                }
            }
        };
        // The slots are never closed: a closed one would be as busy.
        let slot = tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or(NotAdmitted::Busy)?;
        Ok(Admitted {
            _counted: counted,
            _slot: slot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long enough never to pass in a test that is admitted: only a bound.
    const WAIT: Duration = Duration::from_secs(60);
    /// For the refusals: nothing frees a place meanwhile, however long.
    const SHORT: Duration = Duration::from_millis(10);

    fn admission(workers: usize) -> CatalogAdmission {
        CatalogAdmission::new(
            workers,
            JobCaps {
                per_org: 3,
                per_caller: 2,
            },
        )
    }

    #[tokio::test]
    async fn a_caller_past_its_cap_waits_for_its_own_and_other_orgs_do_not() {
        let admission = admission(4);
        let first = admission.admit("demo", "alice", WAIT).await.unwrap();
        let _second = admission.admit("demo", "alice", WAIT).await.unwrap();
        // Another org, and another caller of the same org, go at once.
        let _other_org = admission.admit("other", "bob", WAIT).await.unwrap();
        let _colleague = admission.admit("demo", "carol", WAIT).await.unwrap();

        // Alice's third waits for one of hers, and runs once it ended.
        let third = admission.admit("demo", "alice", WAIT);
        tokio::pin!(third);
        assert!(
            futures::poll!(third.as_mut()).is_pending(),
            "past the caller's cap"
        );
        drop(first);
        assert!(third.await.is_ok());
    }

    #[tokio::test]
    async fn a_wait_past_its_bound_is_refused_with_the_cap_that_held_it() {
        let admission = admission(4);
        let _held = [
            admission.admit("demo", "alice", WAIT).await.unwrap(),
            admission.admit("demo", "alice", WAIT).await.unwrap(),
            admission.admit("demo", "carol", WAIT).await.unwrap(),
        ];
        let caps = admission.caps;
        assert_eq!(
            admission.admit("demo", "alice", SHORT).await.err(),
            Some(NotAdmitted::OverCaps(caps))
        );
        // The org's cap holds for its other callers too.
        assert_eq!(
            admission.admit("demo", "dave", SHORT).await.err(),
            Some(NotAdmitted::OverCaps(caps))
        );
        assert_eq!(
            NotAdmitted::OverCaps(caps).to_string(),
            "too many catalog statements at once: a client runs at most 2 and an org at most 3 \
             at a time on a server; try again when they have ended"
        );
    }

    #[tokio::test]
    async fn the_slots_bound_the_replica_and_a_refused_wait_counts_nothing() {
        let admission = admission(2);
        let held = [
            admission.admit("demo", "alice", WAIT).await.unwrap(),
            admission.admit("demo", "alice", WAIT).await.unwrap(),
        ];
        for _ in 0..2 {
            assert_eq!(
                admission.admit("other", "bob", SHORT).await.err(),
                Some(NotAdmitted::Busy)
            );
        }
        drop(held);
        // Bob's refused statements left no count behind: his share is whole.
        let _bobs = [
            admission.admit("other", "bob", WAIT).await.unwrap(),
            admission.admit("other", "bob", WAIT).await.unwrap(),
        ];
    }
}
