//! The queries this replica runs, per org and caller, counted in memory:
//! the fair-sharing caps a submission is checked against. It counts what the
//! store cannot see yet (a waited query runs before it is stored, see
//! `waiting.rs`) and costs no store read. A worker's claim counts the stored
//! RUNNING jobs in SQL instead (`Store::claim_query`), as it must pick the
//! fairest job atomically.
//!
//! A submission checks and counts in one step (`try_enter`): checked first
//! and counted later, back-to-back submissions all saw the count before any
//! of them ran, and one org took every worker. A submission over the caps
//! waits for `freed`, which every run's end signals once it is uncounted.
//!
//! The Postgres catalog's statements, which are not jobs, are counted with
//! the same caps in a `RunsHere` of their own (`pg::catalog::admission`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::{Notify, futures::Notified};

use crate::store::JobCaps;

type Counts = HashMap<(String, String), i64>;

#[derive(Debug, Default)]
pub struct RunsHere {
    counts: Mutex<Counts>,
    /// Signalled whenever a run stops being counted.
    freed: Notify,
}

/// One run, counted until dropped.
pub struct CountedRun {
    runs: Arc<RunsHere>,
    key: (String, String),
}

impl RunsHere {
    /// Counts a run that was already admitted (a worker's claim).
    pub(super) fn enter(self: &Arc<Self>, org: &str, caller_sub: &str) -> CountedRun {
        let mut runs = self.counts.lock().expect("runs lock");
        self.count_in(&mut runs, org, caller_sub)
    }

    /// Counts a run if this replica runs fewer than `caps` of `org` and of
    /// its caller `caller_sub`; `None` (nothing counted) otherwise.
    pub fn try_enter(
        self: &Arc<Self>,
        org: &str,
        caller_sub: &str,
        caps: JobCaps,
    ) -> Option<CountedRun> {
        let mut runs = self.counts.lock().expect("runs lock");
        let (of_org, of_caller) = Self::counts_of(&runs, org, caller_sub);
        (of_org < caps.per_org && of_caller < caps.per_caller)
            .then(|| self.count_in(&mut runs, org, caller_sub))
    }

    fn count_in(self: &Arc<Self>, runs: &mut Counts, org: &str, caller_sub: &str) -> CountedRun {
        let key = (org.to_string(), caller_sub.to_string());
        *runs.entry(key.clone()).or_default() += 1;
        CountedRun {
            runs: Arc::clone(self),
            key,
        }
    }

    /// Resolves once a run stops being counted after this was enabled (or
    /// first polled).
    pub fn freed(&self) -> Notified<'_> {
        self.freed.notified()
    }

    /// How many run for `org`, and for its caller `caller_sub`.
    #[cfg(test)]
    fn of(&self, org: &str, caller_sub: &str) -> (i64, i64) {
        Self::counts_of(&self.counts.lock().expect("runs lock"), org, caller_sub)
    }

    fn counts_of(runs: &Counts, org: &str, caller_sub: &str) -> (i64, i64) {
        let of_org = runs
            .iter()
            .filter(|((run_org, _), _)| run_org == org)
            .map(|(_, count)| count)
            .sum();
        let of_caller = runs
            .get(&(org.to_string(), caller_sub.to_string()))
            .copied()
            .unwrap_or(0);
        (of_org, of_caller)
    }
}

impl Drop for CountedRun {
    fn drop(&mut self) {
        {
            let mut runs = self.runs.counts.lock().expect("runs lock");
            if let Some(count) = runs.get_mut(&self.key) {
                *count -= 1;
                if *count <= 0 {
                    runs.remove(&self.key);
                }
            }
        }
        self.runs.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::RunsHere;
    use crate::store::JobCaps;

    #[test]
    fn runs_count_per_org_and_caller_until_dropped() {
        let runs = Arc::new(RunsHere::default());
        let first = runs.enter("demo", "alice");
        let second = runs.enter("demo", "alice");
        let other_caller = runs.enter("demo", "bob");
        let other_org = runs.enter("acme", "alice");
        assert_eq!(runs.of("demo", "alice"), (3, 2));
        assert_eq!(runs.of("demo", "carol"), (3, 0));
        assert_eq!(runs.of("acme", "alice"), (1, 1));
        drop((first, other_caller));
        assert_eq!(runs.of("demo", "alice"), (1, 1));
        drop((second, other_org));
        assert_eq!(runs.of("demo", "alice"), (0, 0));
        assert_eq!(runs.of("acme", "alice"), (0, 0));
        assert!(
            runs.counts.lock().unwrap().is_empty(),
            "no counts left behind"
        );
    }

    #[test]
    fn a_run_over_the_caps_is_refused_and_not_counted() {
        let runs = Arc::new(RunsHere::default());
        let caps = JobCaps {
            per_org: 3,
            per_caller: 2,
        };
        let a1 = runs.try_enter("demo", "a", caps).expect("under the caps");
        let a2 = runs.try_enter("demo", "a", caps).expect("under the caps");
        assert!(
            runs.try_enter("demo", "a", caps).is_none(),
            "caller at its cap"
        );
        let b1 = runs
            .try_enter("demo", "b", caps)
            .expect("org under its cap");
        assert!(
            runs.try_enter("demo", "b", caps).is_none(),
            "org at its cap"
        );
        assert_eq!(runs.of("demo", "b"), (3, 1), "refusals count nothing");
        assert!(runs.try_enter("acme", "a", caps).is_some(), "another org");
        drop((a1, a2, b1));
        assert!(runs.try_enter("demo", "b", caps).is_some());
    }

    #[tokio::test]
    async fn a_run_uncounted_wakes_those_waiting_for_room() {
        let runs = Arc::new(RunsHere::default());
        let caps = JobCaps {
            per_org: 1,
            per_caller: 1,
        };
        let held = runs.try_enter("demo", "alice", caps).expect("room");
        let freed = runs.freed();
        tokio::pin!(freed);
        freed.as_mut().enable();
        assert!(runs.try_enter("demo", "alice", caps).is_none());
        drop(held);
        tokio::time::timeout(std::time::Duration::from_secs(10), freed)
            .await
            .expect("woken by the run's end");
        assert!(runs.try_enter("demo", "alice", caps).is_some());
    }
}
