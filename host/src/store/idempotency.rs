//! Idempotency keys (what they mean for a request is `api/idempotency.rs`'s):
//! one row per caller (org, zone, token subject) and key, holding the request
//! the key was first used for and, once it answered, its answer. Claiming a
//! key, taking over a dead replica's claim, recording the answer and giving a
//! failed request's key back are each one conditional statement, so two
//! requests (on any replicas) never both hold a key. This module knows no
//! HTTP: an answer is a status, header pairs and body bytes.

use sqlx::Row as _;

use super::{Error, Result, Store};

/// Whose key it is: the caller and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyScope {
    pub org: String,
    /// The zone of a Zone API request; `None` on the Org API.
    pub zone: Option<String>,
    pub owner_sub: String,
    pub key: String,
}

/// The request a key was first used for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedRequest {
    /// Method and path (a commit's names its load).
    pub operation: String,
    /// A digest of the operation and the canonical body.
    pub request_hash: String,
    /// The caller's roles and service clients (`AccessGrant::fingerprint`).
    pub access_fingerprint: String,
}

/// The first request's answer, as it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A key's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub request: KeyedRequest,
    /// The id of the request holding (or that held) the key.
    pub claim: String,
    pub created_at: i64,
    pub expires_at: i64,
    /// While in progress: when the claim runs out.
    pub pending_until: Option<i64>,
    /// `None` while the first request is in progress.
    pub answer: Option<StoredAnswer>,
}

/// A request asking for a key.
#[derive(Debug, Clone, Copy)]
pub struct NewClaim<'a> {
    pub scope: &'a KeyScope,
    pub request: &'a KeyedRequest,
    /// This request's id, which recording or giving back the key must name.
    pub claim: &'a str,
    pub now: i64,
    /// When the key is forgotten (the first request's time plus 24 hours).
    pub expires_at: i64,
    /// When a claim never answered counts as its replica's death.
    pub pending_until: i64,
}

const KEY_MATCH: &str = "org = $1 AND zone = $2 AND owner_sub = $3 AND idempotency_key = $4";

fn bind_scope<'q>(
    query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    scope: &'q KeyScope,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    query
        .bind(&scope.org)
        .bind(scope.zone.as_deref().unwrap_or(""))
        .bind(&scope.owner_sub)
        .bind(&scope.key)
}

fn record_from_row(row: &sqlx::any::AnyRow) -> Result<KeyRecord> {
    let status: Option<i64> = row.try_get("status")?;
    let answer = match status {
        None => None,
        Some(status) => {
            let status = u16::try_from(status)
                .map_err(|_| Error::Corrupt(format!("idempotency answer status {status}")))?;
            let headers: Option<String> = row.try_get("headers_json")?;
            let headers = serde_json::from_str(headers.as_deref().unwrap_or("[]"))
                .map_err(|e| Error::unreadable("idempotency answer headers", e))?;
            let body: Option<Vec<u8>> = row.try_get("body")?;
            Some(StoredAnswer {
                status,
                headers,
                body: body.unwrap_or_default(),
            })
        }
    };
    Ok(KeyRecord {
        request: KeyedRequest {
            operation: row.try_get("operation")?,
            request_hash: row.try_get("request_hash")?,
            access_fingerprint: row.try_get("access_fingerprint")?,
        },
        claim: row.try_get("claim")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        pending_until: row.try_get("pending_until")?,
        answer,
    })
}

impl Store {
    /// Claims the key for this request: true when it is now this request's
    /// (a key never used, or whose row expired, or whose first request never
    /// answered and its claim ran out); false when a live row holds it
    /// (read it with `idempotency_key`).
    pub async fn claim_idempotency_key(&self, new: &NewClaim<'_>) -> Result<bool> {
        let query = sqlx::query(
            "INSERT INTO idempotency_keys (org, zone, owner_sub, idempotency_key, operation, \
             request_hash, access_fingerprint, claim, created_at, expires_at, pending_until) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (org, zone, owner_sub, idempotency_key) DO UPDATE SET \
             operation = excluded.operation, request_hash = excluded.request_hash, \
             access_fingerprint = excluded.access_fingerprint, claim = excluded.claim, \
             created_at = excluded.created_at, expires_at = excluded.expires_at, \
             pending_until = excluded.pending_until, status = NULL, headers_json = NULL, \
             body = NULL \
             WHERE idempotency_keys.expires_at <= $9 \
             OR (idempotency_keys.status IS NULL AND idempotency_keys.pending_until <= $9)",
        );
        let claimed = bind_scope(query, new.scope)
            .bind(&new.request.operation)
            .bind(&new.request.request_hash)
            .bind(&new.request.access_fingerprint)
            .bind(new.claim)
            .bind(new.now)
            .bind(new.expires_at)
            .bind(new.pending_until)
            .execute(self.pool())
            .await?;
        Ok(claimed.rows_affected() == 1)
    }

    /// The key's row, expired or not.
    pub async fn idempotency_key(&self, scope: &KeyScope) -> Result<Option<KeyRecord>> {
        let sql = format!(
            "SELECT operation, request_hash, access_fingerprint, claim, created_at, expires_at, \
             pending_until, status, headers_json, body FROM idempotency_keys WHERE {KEY_MATCH}"
        );
        let row = bind_scope(sqlx::query(&sql), scope)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(record_from_row).transpose()
    }

    /// Records the first answer; false when `claim` no longer holds the key
    /// (it ran out and a retry took the key over).
    pub async fn answer_idempotency_key(
        &self,
        scope: &KeyScope,
        claim: &str,
        answer: &StoredAnswer,
    ) -> Result<bool> {
        let headers = serde_json::to_string(&answer.headers).expect("strings serialise");
        let sql = format!(
            "UPDATE idempotency_keys SET status = $5, headers_json = $6, body = $7, \
             pending_until = NULL WHERE {KEY_MATCH} AND claim = $8 AND status IS NULL"
        );
        let recorded = bind_scope(sqlx::query(&sql), scope)
            .bind(i64::from(answer.status))
            .bind(headers)
            .bind(answer.body.clone())
            .bind(claim)
            .execute(self.pool())
            .await?;
        Ok(recorded.rows_affected() == 1)
    }

    /// Gives the key back (its request failed and made nothing): the next
    /// request with it runs afresh. False when `claim` no longer held it.
    pub async fn release_idempotency_key(&self, scope: &KeyScope, claim: &str) -> Result<bool> {
        let sql = format!(
            "DELETE FROM idempotency_keys WHERE {KEY_MATCH} AND claim = $5 AND status IS NULL"
        );
        let released = bind_scope(sqlx::query(&sql), scope)
            .bind(claim)
            .execute(self.pool())
            .await?;
        Ok(released.rows_affected() == 1)
    }

    /// Forgets up to `limit` keys that expired by `now`; how many.
    pub async fn expire_idempotency_keys(&self, now: i64, limit: i64) -> Result<u64> {
        let expired = sqlx::query(
            "DELETE FROM idempotency_keys WHERE (org, zone, owner_sub, idempotency_key) IN \
             (SELECT org, zone, owner_sub, idempotency_key FROM idempotency_keys \
             WHERE expires_at <= $1 LIMIT $2)",
        )
        .bind(now)
        .bind(limit)
        .execute(self.pool())
        .await?;
        Ok(expired.rows_affected())
    }
}
