//! The budget of failed secret checks per client address, for the front
//! ends whose clients send a password (the Postgres wire's password, Flight
//! SQL's basic-auth handshake): an address that fails
//! [`FAILURES_PER_WINDOW`] times within [`WINDOW_S`] seconds is refused
//! without asking the identity provider until that window ends, so guessing
//! a secret costs a minute per ten guesses instead of running at the
//! provider's speed. A success does not reset the count (a caller holding
//! one valid secret must not buy guesses at another client's).
//!
//! Counted by address, not by client id: a client id is public, and a
//! budget per id would let anyone lock a service out by failing on purpose.
//! Time is the injected clock's. It knows nothing of protocols.

use std::{collections::HashMap, net::IpAddr, sync::Mutex, time::Duration};

use chrono::{DateTime, Utc};

use crate::clock::SharedClock;

/// Failed checks one address may make per window.
pub const FAILURES_PER_WINDOW: u32 = 10;
/// The window's length, in seconds, from the address's first failure in it.
pub const WINDOW_S: i64 = 60;
/// Addresses remembered at most; past it, windows that ended are forgotten
/// first, and if none has, the oldest (memory stays bounded under a spray
/// of addresses).
const MAX_ADDRESSES: usize = 100_000;

/// An address that used up its budget: when it may try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many failed attempts from this address; retry in {} s", retry_after.as_secs().max(1))]
pub struct Throttled {
    pub retry_after: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    since: DateTime<Utc>,
}

/// Failed secret checks by client address.
#[derive(Debug)]
pub struct FailureBudget {
    clock: SharedClock,
    by_address: Mutex<HashMap<IpAddr, Failures>>,
}

impl FailureBudget {
    pub fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            by_address: Mutex::new(HashMap::new()),
        }
    }

    fn window() -> chrono::Duration {
        chrono::Duration::seconds(WINDOW_S)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Failures>> {
        crate::locks::locked(&self.by_address)
    }

    /// `Err` while `address` has used up its budget.
    pub fn check(&self, address: IpAddr) -> Result<(), Throttled> {
        let now = self.clock.now();
        let map = self.map();
        match map.get(&address) {
            Some(f) if f.count >= FAILURES_PER_WINDOW && now - f.since < Self::window() => {
                let left = (f.since + Self::window() - now)
                    .to_std()
                    .unwrap_or_default();
                Err(Throttled { retry_after: left })
            }
            _ => Ok(()),
        }
    }

    /// Counts one failed check from `address`.
    pub fn failed(&self, address: IpAddr) {
        let now = self.clock.now();
        let mut map = self.map();
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&address) {
            map.retain(|_, f| now - f.since < Self::window());
            if map.len() >= MAX_ADDRESSES
                && let Some(oldest) = map.iter().min_by_key(|(_, f)| f.since).map(|(a, _)| *a)
            {
                map.remove(&oldest);
            }
        }
        let entry = map.entry(address).or_insert(Failures {
            count: 0,
            since: now,
        });
        if now - entry.since >= Self::window() {
            *entry = Failures {
                count: 0,
                since: now,
            };
        }
        entry.count = entry.count.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn an_address_past_its_budget_waits_for_its_window_and_others_do_not() {
        let clock = ManualClock::new();
        let budget = FailureBudget::new(Arc::new(clock.clone()));
        let guesser: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..FAILURES_PER_WINDOW {
            assert_eq!(budget.check(guesser), Ok(()));
            budget.failed(guesser);
        }
        let throttled = budget.check(guesser).unwrap_err();
        assert_eq!(throttled.retry_after, Duration::from_secs(WINDOW_S as u64));
        assert_eq!(budget.check(other), Ok(()));
        clock.advance(chrono::Duration::seconds(WINDOW_S - 1));
        assert!(budget.check(guesser).is_err());
        clock.advance(chrono::Duration::seconds(1));
        assert_eq!(budget.check(guesser), Ok(()));
        budget.failed(guesser);
        assert_eq!(budget.check(guesser), Ok(()));
    }
}
