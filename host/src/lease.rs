//! Holding a job's lease (queries, load commits, daily runs): lease ends read against
//! the injected clock, and running the job's work while the lease is renewed
//! every third of its length, stopping it once a renewal no longer holds.
//! The store's conditional updates decide whether a renewal still holds;
//! this only keeps asking.

use std::{future::Future, time::Duration};

use crate::clock::SharedClock;

/// A lease of a fixed length on the server's clock.
#[derive(Debug, Clone)]
pub struct Lease {
    clock: SharedClock,
    length: Duration,
}

impl Lease {
    pub fn new(clock: SharedClock, length_s: u64) -> Self {
        Self {
            clock,
            length: Duration::from_secs(length_s),
        }
    }

    /// Now, in microseconds since the Unix epoch.
    pub fn now(&self) -> i64 {
        self.clock.now().timestamp_micros()
    }

    /// When a lease taken or renewed now runs out.
    pub fn until(&self) -> i64 {
        self.now() + self.length.as_micros() as i64
    }

    /// Runs `work` while calling `renew` every third of the lease; the work
    /// stops (dropped, `None`) as soon as a renewal no longer holds: a query
    /// cancelled, a job taken over elsewhere, a daily run ended. A renewal
    /// that fails is logged as `what`, and the work goes on (its end is
    /// conditional on the lease).
    pub async fn hold_while_held<T, R, E>(
        &self,
        what: &str,
        work: impl Future<Output = T>,
        mut renew: impl FnMut(i64) -> R,
    ) -> Option<T>
    where
        R: Future<Output = Result<bool, E>>,
        E: std::fmt::Display,
    {
        tokio::pin!(work);
        let mut every = tokio::time::interval(self.length / 3);
        every.tick().await;
        loop {
            tokio::select! {
                done = &mut work => return Some(done),
                _ = every.tick() => match renew(self.until()).await {
                    Ok(true) => {}
                    Ok(false) => return None,
                    Err(e) => tracing::warn!(job_id = what, error = %e, "lease not renewed"),
                },
            }
        }
    }
}
