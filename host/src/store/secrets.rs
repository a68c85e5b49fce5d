//! Secrets every replica shares (the result links' and upload grants'
//! signing keys): the first replica to ask creates one, the rest read it.

use sqlx::Row as _;

use super::{Result, Store};

impl Store {
    /// A secret shared by every replica: created by the first caller with
    /// `generate`, read by all later ones.
    pub async fn shared_secret(
        &self,
        name: &str,
        generate: impl FnOnce() -> String,
        now: i64,
    ) -> Result<String> {
        sqlx::query(
            "INSERT INTO server_secrets (name, value, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(generate())
        .bind(now)
        .execute(self.pool())
        .await?;
        let row = sqlx::query("SELECT value FROM server_secrets WHERE name = $1")
            .bind(name)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get("value")?)
    }
}
