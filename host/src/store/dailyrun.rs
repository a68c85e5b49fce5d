//! The daily run's stored state: the per-org flag (spec "Daily run flag").

use sqlx::Row as _;

use super::{Result, Store};

impl Store {
    /// The org's flag, or `None` when it was never set.
    pub async fn daily_run_flag(&self, org: &str) -> Result<Option<bool>> {
        let row = sqlx::query("SELECT enabled FROM daily_run_flags WHERE org = $1")
            .bind(org)
            .fetch_optional(self.pool())
            .await?;
        let enabled: Option<i64> = row.map(|r| r.try_get("enabled")).transpose()?;
        Ok(enabled.map(|value| value != 0))
    }

    /// Sets the org's flag (creating its record on first use).
    pub async fn set_daily_run_flag(&self, org: &str, enabled: bool, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO daily_run_flags (org, enabled, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (org) DO UPDATE SET enabled = excluded.enabled, \
             updated_at = excluded.updated_at",
        )
        .bind(org)
        .bind(i64::from(enabled))
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(())
    }
}
