//! The queries this replica runs, per org and caller, counted in memory:
//! the fair-sharing caps a submission is checked against. It counts what the
//! store cannot see yet (a waited query runs before it is stored, see
//! `waiting.rs`) and costs no store read. A worker's claim counts the stored
//! RUNNING jobs in SQL instead (`Store::claim_query`), as it must pick the
//! fairest job atomically.

use std::{collections::HashMap, sync::Mutex};

#[derive(Debug, Default)]
pub(super) struct RunsHere(Mutex<HashMap<(String, String), i64>>);

/// One run, counted until dropped.
pub(super) struct CountedRun<'a> {
    runs: &'a RunsHere,
    key: (String, String),
}

impl RunsHere {
    pub(super) fn enter(&self, org: &str, caller_sub: &str) -> CountedRun<'_> {
        let key = (org.to_string(), caller_sub.to_string());
        *self
            .0
            .lock()
            .expect("runs lock")
            .entry(key.clone())
            .or_default() += 1;
        CountedRun { runs: self, key }
    }

    /// How many run for `org`, and for its caller `caller_sub`.
    pub(super) fn of(&self, org: &str, caller_sub: &str) -> (i64, i64) {
        let runs = self.0.lock().expect("runs lock");
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

impl Drop for CountedRun<'_> {
    fn drop(&mut self) {
        let mut runs = self.runs.0.lock().expect("runs lock");
        if let Some(count) = runs.get_mut(&self.key) {
            *count -= 1;
            if *count <= 0 {
                runs.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RunsHere;

    #[test]
    fn runs_count_per_org_and_caller_until_dropped() {
        let runs = RunsHere::default();
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
        assert!(runs.0.lock().unwrap().is_empty(), "no counts left behind");
    }
}
