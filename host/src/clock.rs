//! The one source of "now" for everything that expires or is stamped:
//! tokens, signing-key rotation, JWKS refetch cooldowns, authorization
//! codes, signed links and upload grants, job leases, the daily-run
//! schedule, the jobs' and loads' timestamps, the sweepers' ages.
//!
//! Production uses [`SystemClock`]; tests inject a [`ManualClock`] and move it, so
//! no test sleeps to wait for an expiry. What stays on the process's own
//! clocks: durations measured with `Instant` (timeouts, latencies, the
//! listeners' idle limits), log lines' timestamps, the dry runs' report
//! times, and file ages the retired-file sweeper compares with the files'
//! own modification times.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

/// A source of the current time, shared through `AppState`.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;

    /// Seconds since the Unix epoch, as JWT `iat`/`exp`/`nbf` use them.
    fn unix_seconds(&self) -> i64 {
        self.now().timestamp()
    }
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to; starts at the wall-clock time of its creation.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    pub fn new() -> Self {
        Self::starting_at(Utc::now())
    }

    pub fn starting_at(start: DateTime<Utc>) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().expect("clock lock poisoned");
        *now += by;
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().expect("clock lock poisoned")
    }
}

/// The clock handle passed around in state.
pub type SharedClock = Arc<dyn Clock>;
