//! How often each range was asked for lately, for the read cache's
//! admission (`read_cache.rs`): a count-min sketch of small counters, as
//! TinyLFU keeps them. Every request of a range counts, kept or not; a
//! range's estimate is the least of its four counters (never below its
//! true count since the last halving, above it only when other ranges share
//! all four). After ten times as many counts as there are counters, every
//! counter is halved, so what was asked often long ago fades.
//!
//! Its memory is fixed when the cache is made (`bytes`) and counted in the
//! cache's budget.

use std::hash::{BuildHasher, Hash};

/// Counters per row: enough for a budget of small ranges, at most 64 Ki.
const MAX_WIDTH: usize = 1 << 16;
/// The least width, for small budgets.
const MIN_WIDTH: usize = 1 << 10;
/// A counter stops here (as TinyLFU's 4-bit counters do): beyond, more
/// counts say nothing the admission needs.
const MAX_COUNT: u8 = 15;
/// Counts between two halvings, per counter of a row.
const SAMPLE_PER_COUNTER: usize = 10;

/// The sketch: four rows of `width` counters.
pub struct ReadFrequency {
    counters: Vec<u8>,
    width_mask: usize,
    counted: usize,
    hasher: std::hash::RandomState,
}

impl ReadFrequency {
    /// A sketch for a cache of `budget` bytes: one counter per 4 KiB of
    /// budget (the smallest range worth keeping), within its bounds.
    pub fn for_budget(budget: usize) -> Self {
        let width = (budget / 4096)
            .clamp(MIN_WIDTH, MAX_WIDTH)
            .next_power_of_two();
        Self {
            counters: vec![0; 4 * width],
            width_mask: width - 1,
            counted: 0,
            hasher: std::hash::RandomState::new(),
        }
    }

    /// The sketch's memory.
    pub fn bytes(&self) -> usize {
        self.counters.len()
    }

    /// The four counters of `key`, one per row.
    fn slots(&self, key: &impl Hash) -> [usize; 4] {
        let hash = self.hasher.hash_one(key);
        let width = self.width_mask + 1;
        std::array::from_fn(|row| {
            // Four 16-bit slices of the hash, spread by an odd multiplier.
            let part = (hash >> (16 * row)) ^ (hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32);
            row * width + (part as usize & self.width_mask)
        })
    }

    /// How often `key` was asked for lately (an estimate, see above).
    pub fn estimate(&self, key: &impl Hash) -> u8 {
        self.slots(key)
            .iter()
            .map(|&slot| self.counters[slot])
            .min()
            .unwrap_or(0)
    }

    /// Counts one request of `key`: its least counters go up by one (the
    /// others already count more than it), and every counter is halved
    /// once enough requests are counted.
    pub fn count(&mut self, key: &impl Hash) {
        let slots = self.slots(key);
        let least = slots
            .iter()
            .map(|&slot| self.counters[slot])
            .min()
            .unwrap_or(0);
        if least < MAX_COUNT {
            for slot in slots {
                if self.counters[slot] == least {
                    self.counters[slot] += 1;
                }
            }
        }
        self.counted += 1;
        if self.counted >= SAMPLE_PER_COUNTER * (self.width_mask + 1) {
            self.counted = 0;
            for counter in &mut self.counters {
                *counter /= 2;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_was_asked_and_halves_with_age() {
        let mut sketch = ReadFrequency::for_budget(0);
        assert_eq!(sketch.bytes(), 4 * MIN_WIDTH);
        assert_eq!(sketch.estimate(&"a"), 0);
        for _ in 0..3 {
            sketch.count(&"a");
        }
        sketch.count(&"b");
        assert_eq!(sketch.estimate(&"a"), 3);
        assert_eq!(sketch.estimate(&"b"), 1);
        for _ in 0..100 {
            sketch.count(&"a");
        }
        assert_eq!(sketch.estimate(&"a"), MAX_COUNT);

        // Until the halving: "a" 15, counted 104 times of 10 * width.
        let until_halving = SAMPLE_PER_COUNTER * MIN_WIDTH - 104;
        for i in 0..until_halving - 1 {
            sketch.count(&i);
        }
        assert!(sketch.estimate(&"a") >= MAX_COUNT - 1);
        sketch.count(&"last");
        assert!(sketch.estimate(&"a") <= MAX_COUNT / 2 + 1, "halved");
    }

    #[test]
    fn the_width_follows_the_budget_within_bounds() {
        assert_eq!(ReadFrequency::for_budget(256 << 20).bytes(), 4 * MAX_WIDTH);
        assert_eq!(ReadFrequency::for_budget(16 << 20).bytes(), 4 * 4096);
        assert_eq!(ReadFrequency::for_budget(1 << 40).bytes(), 4 * MAX_WIDTH);
    }
}
