//! Query ends recorded on this replica, announced by id: a waiter wakes for
//! its own query's end, not for every query's, so a hundred waiting
//! requests do not each read the store whenever any query ends.

use std::sync::Arc;

use tokio::sync::broadcast::{self, error::RecvError};

/// Ends announced and not yet seen that a watch keeps; a watch further
/// behind is told it missed some, and its owner reads the store.
const KEPT_ENDS: usize = 4096;

/// Where the ends of this replica's queries are announced.
pub(super) struct Ends(broadcast::Sender<Arc<str>>);

impl Ends {
    pub(super) fn new() -> Self {
        Self(broadcast::channel(KEPT_ENDS).0)
    }

    /// The end of query `id` is recorded (or its cancel).
    pub(super) fn announce(&self, id: &str) {
        // Nobody watching is not an error.
        let _ = self.0.send(Arc::from(id));
    }

    /// Ends announced from now on.
    pub(super) fn watch(&self) -> EndWatch {
        EndWatch(self.0.subscribe())
    }
}

/// The ends announced since it was made, each seen once.
pub(super) struct EndWatch(broadcast::Receiver<Arc<str>>);

impl EndWatch {
    /// Returns once query `id` ended, or when some ends went by unseen:
    /// the caller reads the store either way.
    pub(super) async fn of(&mut self, id: &str) {
        loop {
            match self.0.recv().await {
                Ok(ended) if &*ended == id => return,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => return,
                Err(RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn returns(wait: impl Future<Output = ()>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), wait)
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_watch_wakes_for_its_query_and_not_for_others() {
        let ends = Ends::new();
        let mut watch = ends.watch();
        ends.announce("other");
        ends.announce("another");
        assert!(!returns(watch.of("mine")).await);
        ends.announce("mine");
        assert!(returns(watch.of("mine")).await);
        // An end announced before the watch was made is not seen.
        let mut late = ends.watch();
        assert!(!returns(late.of("mine")).await);
        ends.announce("mine");
        assert!(returns(late.of("mine")).await);
    }

    #[tokio::test]
    async fn a_watch_that_fell_behind_returns_so_its_owner_reads_the_store() {
        let ends = Ends::new();
        let mut watch = ends.watch();
        for i in 0..KEPT_ENDS + 1 {
            ends.announce(&format!("q{i}"));
        }
        assert!(returns(watch.of("never announced")).await);
    }
}
