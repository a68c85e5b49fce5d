//! Result reuse (`Prefer: reuse=N`, or `query.reuse_max_age_s` per org): a
//! read answered with the result of an earlier query instead of running.
//!
//! Unlike reuse keyed on the SQL text alone, the key here is everything the
//! result depends on: the org and zone, the database unqualified names
//! resolve in, the caller's access fingerprint (roles and service clients,
//! so a result is never shared between callers who may see different rows),
//! the SQL as the parser prints it, and the snapshot of every lake table the
//! plan reads (`engine::snapshot`: the table and its exact file list, which
//! every load commit, SQL write, daily refresh and DDL changes). Plans that
//! read anything else or call functions such as `now()` or `random()` have
//! no key and always run.
//!
//! The key is stored with the query that ran (from the plan that actually
//! ran, which for a queued job may be newer than the submission's); a later
//! submission with the same key, within the caller's maximum age, becomes a
//! new query, SUCCEEDED at once, that names the query it reused and reads
//! the same result file.

use sha2::{Digest as _, Sha256};

use super::{QueryJobs, jobs::Planned};
use crate::{
    engine::statement::canonical_sql,
    observability::jobs,
    query::{QueryError, prepare::Prepared},
    store::queries::{NewQuery, QueryJob},
};

/// The reuse key of `query` run on a plan with lake `snapshot`.
pub(super) fn reuse_key(query: &NewQuery, snapshot: &str) -> Option<String> {
    let sql = canonical_sql(&query.sql)?;
    let mut hash = Sha256::new();
    for part in [
        query.org.as_str(),
        query.zone.as_deref().unwrap_or(""),
        query.database.as_str(),
        query.access_fingerprint.as_str(),
        sql.as_str(),
        snapshot,
    ] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    Some(hex::encode(hash.finalize()))
}

impl Planned {
    /// The lake snapshot of a read that may be reused.
    pub(super) fn snapshot(&self) -> Option<&str> {
        match &self.prepared {
            Prepared::Read { snapshot, .. } => snapshot.as_deref(),
            _ => None,
        }
    }
}

impl QueryJobs {
    /// How old a result `query` may reuse: the request's own preference,
    /// else its org's setting; `None` when it must run (also for 0).
    pub(super) fn reuse_max_age_s(&self, query: &NewQuery, requested: Option<u64>) -> Option<u64> {
        requested
            .or_else(|| self.limits.reuse_max_age_s.get(&query.org).copied())
            .filter(|&age| age > 0)
    }

    /// Stores `query` as a reuse of the newest matching result at most
    /// `max_age_s` old, if there is one; returns it.
    pub(super) async fn reuse(
        &self,
        query: &NewQuery,
        planned: &Planned,
        max_age_s: u64,
    ) -> Result<Option<QueryJob>, QueryError> {
        let Some(key) = planned.snapshot().and_then(|s| reuse_key(query, s)) else {
            return Ok(None);
        };
        let now = self.now();
        let oldest = now.saturating_sub(
            i64::try_from(max_age_s)
                .unwrap_or(i64::MAX)
                .saturating_mul(1_000_000),
        );
        let Some(source) = self.store.reusable_query(&key, oldest).await? else {
            return Ok(None);
        };
        let job = self.store.insert_reused_query(query, &source, now).await?;
        jobs::query_reused(&query.id, &source.query.id, &query.statement_type);
        Ok(Some(job))
    }
}
