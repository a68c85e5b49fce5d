//! The embedded identity provider's shared state (what it means is
//! `idp/`'s): each realm's signing keys and the PKCE login flow's pending
//! codes, so that every replica signs, publishes and redeems alike.
//!
//! Rows and strings only: the key material is parsed in `idp/`. Every
//! decision two replicas could race on is one conditional statement: a
//! rotation's insert of key number n + 1 (the primary key lets one win), a
//! first start's import of a realm's keys (all of them or none, only into an
//! empty realm), a code's redemption (the delete that removes the row wins).
//! Times are microseconds since the Unix epoch, passed in by the caller.

use sqlx::Row as _;

use super::{Result, Store};

/// One signing key of a realm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdpKeyRow {
    /// Numbered from 1 per realm; a rotation inserts the next number.
    pub generation: i64,
    pub kid: String,
    /// The private key, PKCS#8 PEM.
    pub private_key_pem: String,
    pub created_at: i64,
    /// From when it may sign (it is published from its insert).
    pub active_from: i64,
}

/// A pending authorization code of the login flow (the code is known by its
/// hash only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdpCodeRow {
    pub org: String,
    pub client_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub username: String,
    pub scope: String,
    pub nonce: Option<String>,
    pub expires_at: i64,
}

const KEY_COLUMNS: &str = "generation, kid, private_key_pem, created_at, active_from";
const CODE_COLUMNS: &str =
    "org, client_id, redirect_uri, code_challenge, username, scope, nonce, expires_at";

fn key_from_row(row: &sqlx::any::AnyRow) -> Result<IdpKeyRow> {
    Ok(IdpKeyRow {
        generation: row.try_get("generation")?,
        kid: row.try_get("kid")?,
        private_key_pem: row.try_get("private_key_pem")?,
        created_at: row.try_get("created_at")?,
        active_from: row.try_get("active_from")?,
    })
}

/// Inserts `key` unless its number or kid is taken; rows inserted.
async fn insert_key<'e>(
    executor: impl sqlx::Executor<'e, Database = sqlx::Any>,
    org: &str,
    key: &IdpKeyRow,
) -> Result<u64> {
    Ok(sqlx::query(
        "INSERT INTO idp_signing_keys \
         (org, generation, kid, private_key_pem, created_at, active_from) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(org)
    .bind(key.generation)
    .bind(&key.kid)
    .bind(&key.private_key_pem)
    .bind(key.created_at)
    .bind(key.active_from)
    .execute(executor)
    .await?
    .rows_affected())
}

impl Store {
    /// A realm's keys, oldest (lowest number) first.
    pub async fn idp_keys(&self, org: &str) -> Result<Vec<IdpKeyRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {KEY_COLUMNS} FROM idp_signing_keys WHERE org = $1 ORDER BY generation"
        ))
        .bind(org)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(key_from_row).collect()
    }

    /// Inserts a key unless its number (or its kid) is taken: true when this
    /// call inserted it, false when another replica's key holds the number.
    pub async fn insert_idp_key(&self, org: &str, key: &IdpKeyRow) -> Result<bool> {
        Ok(insert_key(self.pool(), org, key).await? == 1)
    }

    /// Puts `keys` (numbered by the caller from 1) into a realm that holds
    /// none, all of them or none of them: true when this call did, false when
    /// the realm already had keys (another replica's first start won).
    pub async fn import_idp_keys(&self, org: &str, keys: &[IdpKeyRow]) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let held: i64 = sqlx::query("SELECT COUNT(*) AS n FROM idp_signing_keys WHERE org = $1")
            .bind(org)
            .fetch_one(&mut *tx)
            .await?
            .try_get("n")?;
        if held > 0 {
            return Ok(false);
        }
        for key in keys {
            if insert_key(&mut *tx, org, key).await? != 1 {
                // A replica importing at the same time got there first
                // (Postgres: its insert committed while ours waited).
                return Ok(false);
            }
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Deletes a realm's keys by number (the caller decided they are past
    /// their retention); how many rows went.
    pub async fn delete_idp_keys(&self, org: &str, generations: &[i64]) -> Result<u64> {
        let mut deleted = 0;
        for generation in generations {
            deleted +=
                sqlx::query("DELETE FROM idp_signing_keys WHERE org = $1 AND generation = $2")
                    .bind(org)
                    .bind(generation)
                    .execute(self.pool())
                    .await?
                    .rows_affected();
        }
        Ok(deleted)
    }

    /// Stores a pending code under the hash of the code.
    pub async fn insert_idp_code(&self, code_hash: &str, code: &IdpCodeRow) -> Result<()> {
        sqlx::query(&format!(
            "INSERT INTO idp_login_codes (code_hash, {CODE_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(code_hash)
        .bind(&code.org)
        .bind(&code.client_id)
        .bind(&code.redirect_uri)
        .bind(&code.code_challenge)
        .bind(&code.username)
        .bind(&code.scope)
        .bind(code.nonce.as_deref())
        .bind(code.expires_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Redeems a code: its row when this call deleted it, `None` when there
    /// is none (never issued, already redeemed on any replica, or swept).
    /// Expiry is the caller's to check: an expired code is burnt too.
    pub async fn take_idp_code(&self, code_hash: &str) -> Result<Option<IdpCodeRow>> {
        let Some(row) = sqlx::query(&format!(
            "SELECT {CODE_COLUMNS} FROM idp_login_codes WHERE code_hash = $1"
        ))
        .bind(code_hash)
        .fetch_optional(self.pool())
        .await?
        else {
            return Ok(None);
        };
        let code = IdpCodeRow {
            org: row.try_get("org")?,
            client_id: row.try_get("client_id")?,
            redirect_uri: row.try_get("redirect_uri")?,
            code_challenge: row.try_get("code_challenge")?,
            username: row.try_get("username")?,
            scope: row.try_get("scope")?,
            nonce: row.try_get("nonce")?,
            expires_at: row.try_get("expires_at")?,
        };
        // Of two exchanges of one code, only the one whose delete removed
        // the row redeems it.
        let deleted = sqlx::query("DELETE FROM idp_login_codes WHERE code_hash = $1")
            .bind(code_hash)
            .execute(self.pool())
            .await?
            .rows_affected();
        Ok((deleted == 1).then_some(code))
    }

    /// Deletes at most `limit` codes that expired before `now`; how many.
    pub async fn delete_expired_idp_codes(&self, now: i64, limit: i64) -> Result<u64> {
        Ok(sqlx::query(
            "DELETE FROM idp_login_codes WHERE code_hash IN \
             (SELECT code_hash FROM idp_login_codes WHERE expires_at < $1 LIMIT $2)",
        )
        .bind(now)
        .bind(limit)
        .execute(self.pool())
        .await?
        .rows_affected())
    }
}
