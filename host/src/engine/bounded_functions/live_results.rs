//! What the bounded calls of one session returned and is still in memory,
//! held to the session's memory limit, so that the query memory limit
//! covers function results as the pool covers sorts, joins and
//! aggregations: many calls each under the per-call cap (twelve 200 MB
//! `repeat`s in one row) stop at the limit with "Resources exhausted"
//! instead of taking the server's memory.
//!
//! A result counts until nothing but this ledger holds its buffers (whoever
//! else kept them, a batch on its way or an operator's buffer, has let go);
//! dead results are dropped and stop counting at the next call. A call
//! counts what it expects to return before it runs.
//!
//! A budget of its own, not a share of the pool: an operator that keeps
//! results (a sort, a join's build side) already counts them in the pool,
//! and counting them there twice would fail queries the limit allows.
//!
//! It must never hold a result after its session ends (it lives in the
//! session's functions).

use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::{
    arrow::{
        array::{ArrayData, ArrayRef},
        buffer::Buffer,
    },
    common::{DataFusionError, Result},
    execution::memory_pool::{MemoryLimit, MemoryPool},
};

/// The bounded calls' results of one session that are still alive.
#[derive(Debug)]
pub(super) struct LiveResults {
    /// The session's memory limit; `None` when it has none.
    limit: Option<usize>,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    /// Bytes of the results alive and of the calls running.
    bytes: usize,
    results: Vec<LiveResult>,
}

/// One result's buffers (clones: they keep its memory until dropped) and
/// the bytes counted for it.
#[derive(Debug)]
struct LiveResult {
    buffers: Vec<Buffer>,
    bytes: usize,
}

impl LiveResult {
    /// Whether anyone besides this ledger still holds the result.
    fn in_use(&self) -> bool {
        self.buffers.iter().any(|b| b.strong_count() > 1)
    }
}

impl Held {
    /// Drops the results nobody else holds; they stop counting.
    fn release_dead(&mut self) {
        let mut released = 0;
        self.results.retain(|result| {
            let keep = result.in_use();
            if !keep {
                released += result.bytes;
            }
            keep
        });
        self.bytes -= released;
    }
}

/// Room counted for a call's result while it runs; given back when dropped.
pub(super) struct Room<'a> {
    live: &'a LiveResults,
    bytes: usize,
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        self.live.lock().bytes -= self.bytes;
    }
}

impl LiveResults {
    /// A ledger held to `pool`'s limit.
    pub(super) fn new(pool: &Arc<dyn MemoryPool>) -> Self {
        let limit = match pool.memory_limit() {
            MemoryLimit::Finite(bytes) => Some(bytes),
            MemoryLimit::Infinite | MemoryLimit::Unknown => None,
        };
        Self {
            limit,
            held: Mutex::new(Held::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        // A panic while holding the lock leaves only counts behind.
        crate::locks::locked(&self.held)
    }

    /// Counts `bytes` more for `what`, refused past the limit.
    fn count(&self, held: &mut Held, bytes: usize, what: &str) -> Result<()> {
        held.release_dead();
        let total = held.bytes.saturating_add(bytes);
        if let Some(limit) = self.limit.filter(|&limit| total > limit) {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "{what} would bring the function results this query holds to {total} bytes, \
                 more than its memory limit ({limit} bytes)"
            )));
        }
        held.bytes = total;
        Ok(())
    }

    /// Counts `bytes` `what` is about to return, while it runs.
    pub(super) fn make_room(&self, bytes: usize, what: &str) -> Result<Room<'_>> {
        self.count(&mut self.lock(), bytes, what)?;
        Ok(Room { live: self, bytes })
    }

    /// Counts a returned array while it lives; refused past the limit (the
    /// caller then drops it).
    pub(super) fn charge(&self, result: &ArrayRef, what: &str) -> Result<()> {
        let bytes = result.get_array_memory_size();
        let mut held = self.lock();
        self.count(&mut held, bytes, what)?;
        let mut buffers = Vec::new();
        buffers_of(&result.to_data(), &mut buffers);
        held.results.push(LiveResult { buffers, bytes });
        Ok(())
    }
}

/// Every buffer of an array, its children's included.
fn buffers_of(data: &ArrayData, into: &mut Vec<Buffer>) {
    into.extend(data.buffers().iter().cloned());
    if let Some(nulls) = data.nulls() {
        into.push(nulls.buffer().clone());
    }
    for child in data.child_data() {
        buffers_of(child, into);
    }
}

#[cfg(test)]
mod tests {
    use datafusion::{arrow::array::StringArray, execution::memory_pool::FairSpillPool};

    use super::*;

    fn text_of(bytes: usize) -> ArrayRef {
        Arc::new(StringArray::from(vec!["x".repeat(bytes)]))
    }

    #[test]
    fn results_count_against_the_limit_while_alive_and_never_in_the_pool() {
        let pool: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(1 << 20));
        let live = LiveResults::new(&pool);
        let first = text_of(400_000);
        live.charge(&first, "f").unwrap();
        live.charge(&text_of(400_000), "g").unwrap();
        // The pool is the operators': a sort keeping `first` counts it
        // there, and the ledger must not count it there a second time.
        assert_eq!(pool.reserved(), 0);
        // `first` is alive, the second result is not: 400 KB more fit, 800 do not.
        let refused = live.charge(&text_of(800_000), "h").unwrap_err();
        assert!(
            refused.to_string().contains("Resources exhausted"),
            "{refused}"
        );
        let room = live.make_room(400_000, "h").unwrap();
        drop(room);
        drop(first);
        live.charge(&text_of(800_000), "h").unwrap();
    }
}
