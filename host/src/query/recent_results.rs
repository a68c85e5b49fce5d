//! Small result CSVs this replica wrote lately, kept in memory so their
//! pages are served without reading the file back. A result path names one
//! attempt of one query for one user and access, so an entry is only ever
//! read in place of its own file; other replicas read the file.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

/// Bytes of small results kept at most; the oldest go first.
const RECENT_RESULTS_BYTES: usize = 32 * 1024 * 1024;

/// Small result CSVs in the order they were written, up to
/// `RECENT_RESULTS_BYTES` in all.
#[derive(Default)]
pub struct RecentResults {
    by_path: HashMap<String, Bytes>,
    order: VecDeque<String>,
    bytes: usize,
}

impl RecentResults {
    pub fn insert(&mut self, path: String, csv: Bytes) {
        if self.by_path.contains_key(&path) {
            return;
        }
        self.bytes += csv.len();
        self.order.push_back(path.clone());
        self.by_path.insert(path, csv);
        while self.bytes > RECENT_RESULTS_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.by_path.remove(&oldest) {
                self.bytes -= gone.len();
            }
        }
    }

    pub fn get(&self, path: &str) -> Option<Bytes> {
        self.by_path.get(path).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_results_go_first_past_the_budget() {
        let mut recent = RecentResults::default();
        let half = Bytes::from(vec![b'x'; RECENT_RESULTS_BYTES / 2]);
        recent.insert("a".into(), half.clone());
        recent.insert("b".into(), half.clone());
        assert!(recent.get("a").is_some() && recent.get("b").is_some());
        recent.insert("c".into(), Bytes::from_static(b"1"));
        assert!(
            recent.get("a").is_none(),
            "over the budget: the oldest goes"
        );
        assert!(recent.get("b").is_some() && recent.get("c").is_some());
        recent.insert("c".into(), half);
        assert_eq!(recent.get("c").unwrap().len(), 1, "a path is kept once");
    }
}
