//! The sizes of result files a replica found in the lake or made, so that
//! reading one again (every page of a typed-first result reads its CSV's
//! size) is not a HEAD, a round trip on S3, each time.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
};

/// Files whose sizes a replica keeps (a path and a number each, about
/// 100 bytes: 400 KiB in all).
const KNOWN_SIZES: usize = 4096;

/// The sizes of result files this replica found in the lake or made, the
/// `KNOWN_SIZES` latest: every page of a result written Arrow or Parquet
/// first asks for its CSV's size, which would otherwise be a HEAD (a round
/// trip on S3) per page. A file made is never changed, and a result swept
/// by retention is marked deleted in its row before its files go, so a
/// read of it is refused before it gets here. A file deleted behind the
/// service's back then fails its read on this replica, as a CSV-first
/// result's CSV (whose size is its row's) always did.
#[derive(Default)]
pub(super) struct KnownSizes(Mutex<Known>);

#[derive(Default)]
struct Known {
    sizes: HashMap<String, u64>,
    /// Oldest first.
    order: VecDeque<String>,
}

impl KnownSizes {
    pub(super) fn get(&self, path: &str) -> Option<u64> {
        self.known().sizes.get(path).copied()
    }

    pub(super) fn insert(&self, path: &str, size: u64) {
        let mut known = self.known();
        if known.sizes.insert(path.to_string(), size).is_none() {
            known.order.push_back(path.to_string());
            if known.order.len() > KNOWN_SIZES
                && let Some(oldest) = known.order.pop_front()
            {
                known.sizes.remove(&oldest);
            }
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        // A panic under the lock leaves a map of true sizes: go on with it.
        crate::locks::locked(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_sizes_keep_the_latest_files_only() {
        let known = KnownSizes::default();
        for i in 0..KNOWN_SIZES {
            known.insert(&format!("f{i}"), i as u64);
        }
        // Known again: not a second entry.
        known.insert("f0", 0);
        assert_eq!(known.known().order.len(), KNOWN_SIZES);
        known.insert("new", 7);
        assert_eq!(known.get("f0"), None, "the oldest goes");
        assert_eq!(known.get("f1"), Some(1));
        assert_eq!(known.get("new"), Some(7));
        assert_eq!(known.known().sizes.len(), KNOWN_SIZES);
        assert_eq!(known.known().order.len(), KNOWN_SIZES);
    }
}
