//! What the bounded calls of one session returned and is still in memory,
//! charged to the session's memory pool, so that the query memory limit
//! covers function results as it covers sorts, joins and aggregations: many
//! calls each under the per-call cap (twelve 200 MB `repeat`s in one row)
//! stop at the pool's limit with the pool's own "Resources exhausted"
//! message instead of taking the server's memory.
//!
//! A result is charged until nothing but this ledger holds its buffers
//! (whoever else kept them, a batch on its way or an operator's buffer, has
//! let go); dead results are dropped and their charge given back at the next
//! charge. A call makes room for what it expects to return before it runs.
//!
//! It must never hold a result after its session ends (it lives in the
//! session's functions), nor charge anything the pool does not see.

use std::sync::{Arc, Mutex};

use datafusion::{
    arrow::{array::ArrayData, array::ArrayRef, buffer::Buffer},
    common::Result,
    execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation},
};

/// The bounded calls' results of one session that are still alive.
#[derive(Debug)]
pub(super) struct LiveResults {
    held: Mutex<Held>,
}

#[derive(Debug)]
struct Held {
    reservation: MemoryReservation,
    results: Vec<LiveResult>,
}

/// One result's buffers (clones: they keep its memory until dropped) and
/// the bytes charged for it.
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
    /// Drops the results nobody else holds and gives their charge back.
    fn release_dead(&mut self) {
        let mut released = 0;
        self.results.retain(|result| {
            let keep = result.in_use();
            if !keep {
                released += result.bytes;
            }
            keep
        });
        self.reservation.shrink(released);
    }
}

/// Room made for a call's result while it runs; given back when dropped.
pub(super) struct Room<'a> {
    live: &'a LiveResults,
    bytes: usize,
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        self.live.lock().reservation.shrink(self.bytes);
    }
}

impl LiveResults {
    pub(super) fn new(pool: &Arc<dyn MemoryPool>) -> Self {
        let reservation = MemoryConsumer::new("function results").register(pool);
        Self {
            held: Mutex::new(Held {
                reservation,
                results: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // A panic while holding the lock leaves only counts behind.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes room in the pool for `bytes` a call is about to return; the
    /// pool's error when it has none.
    pub(super) fn make_room(&self, bytes: usize) -> Result<Room<'_>> {
        let mut held = self.lock();
        held.release_dead();
        held.reservation.try_grow(bytes)?;
        Ok(Room { live: self, bytes })
    }

    /// Charges a returned array while it lives; the pool's error when it
    /// does not fit (the array is then dropped by the caller).
    pub(super) fn charge(&self, result: &ArrayRef) -> Result<()> {
        let bytes = result.get_array_memory_size();
        let mut held = self.lock();
        held.release_dead();
        held.reservation.try_grow(bytes)?;
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
