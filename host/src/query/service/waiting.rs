//! Waiting for a query's end (`POST /query` with `Prefer: wait=N`): the
//! request holds until the caller's query is final or the wait passes. A
//! query that ends on this replica wakes its waiters at once (no polling
//! delay for the small queries this is for); one that runs on another
//! replica is seen through the store, read every `OTHER_REPLICA_POLL`.

use std::time::Duration;

use tokio::time::Instant;

use super::QueryService;
use crate::{auth::LakeCaller, query::QueryError, store::queries::QueryJob};

/// How often a waiter reads the store for a query another replica runs.
const OTHER_REPLICA_POLL: Duration = Duration::from_millis(100);

impl QueryService {
    /// The caller's query once it is final, or `None` when `within` passes
    /// first. The query itself is unaffected either way.
    pub async fn wait_for_end(
        &self,
        caller: &LakeCaller,
        id: &str,
        within: Duration,
    ) -> Result<Option<QueryJob>, QueryError> {
        let deadline = Instant::now() + within;
        loop {
            // Registered before the store is read, so an end recorded in
            // between still wakes this waiter.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let job = self.get(caller, id).await?;
            if job.state.is_final() {
                return Ok(Some(job));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let next_look = (now + OTHER_REPLICA_POLL).min(deadline);
            tokio::select! {
                () = ended => {}
                () = tokio::time::sleep_until(next_look) => {}
            }
        }
    }
}
