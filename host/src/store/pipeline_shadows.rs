//! The load pipeline's shadows (what they mean is `pipeline/deployed/`'s):
//! which version shadows a scope's commits, and each commit a shadow ran
//! beside, with both outcomes.

use sqlx::Row as _;

use super::{Result, Store, pipelines::PipelineScope};

/// The scope's shadow setting: `version` `None` when it was removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowSetting {
    pub version: Option<i64>,
    pub set_by: String,
    pub set_at: i64,
}

/// One commit a shadow ran beside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowRun {
    pub load_id: String,
    pub version: i64,
    pub agreed: bool,
    pub active_outcome: String,
    pub shadow_outcome: String,
    pub step: Option<String>,
    pub message: Option<String>,
    /// Each shadow step's outcome, as `pipeline/deployed/` writes it.
    pub steps_json: String,
    pub ran_at: i64,
}

/// A shadow's runs since it was set: how many, how many agreed, and the
/// latest disagreements (at most the limit asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowTally {
    pub loads: i64,
    pub agreements: i64,
    pub disagreements: Vec<ShadowRun>,
}

const RUN_COLUMNS: &str = "load_id, version, agreed, active_outcome, shadow_outcome, step, \
                           message, steps_json, ran_at";

fn run_of(row: &sqlx::any::AnyRow) -> Result<ShadowRun> {
    Ok(ShadowRun {
        load_id: row.try_get("load_id")?,
        version: row.try_get("version")?,
        agreed: row.try_get::<i64, _>("agreed")? != 0,
        active_outcome: row.try_get("active_outcome")?,
        shadow_outcome: row.try_get("shadow_outcome")?,
        step: row.try_get("step")?,
        message: row.try_get("message")?,
        steps_json: row.try_get("steps_json")?,
        ran_at: row.try_get("ran_at")?,
    })
}

impl Store {
    /// Sets (or, with `version` `None`, removes) the scope's shadow.
    pub async fn set_pipeline_shadow(
        &self,
        scope: &PipelineScope,
        setting: &ShadowSetting,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO pipeline_shadows (org, zone, version, set_by, set_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (org, zone) DO UPDATE SET \
             version = excluded.version, set_by = excluded.set_by, set_at = excluded.set_at",
        )
        .bind(&scope.org)
        .bind(scope.zone_key())
        .bind(setting.version)
        .bind(&setting.set_by)
        .bind(setting.set_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The scope's shadow setting, if one was ever made.
    pub async fn pipeline_shadow(&self, scope: &PipelineScope) -> Result<Option<ShadowSetting>> {
        let row = sqlx::query(
            "SELECT version, set_by, set_at FROM pipeline_shadows WHERE org = $1 AND zone = $2",
        )
        .bind(&scope.org)
        .bind(scope.zone_key())
        .fetch_optional(self.pool())
        .await?;
        row.map(|row| {
            Ok(ShadowSetting {
                version: row.try_get("version")?,
                set_by: row.try_get("set_by")?,
                set_at: row.try_get("set_at")?,
            })
        })
        .transpose()
    }

    /// Records a shadow's run beside a commit (a rerun replaces it).
    pub async fn record_shadow_run(&self, scope: &PipelineScope, run: &ShadowRun) -> Result<()> {
        sqlx::query(&format!(
            "INSERT INTO shadow_runs (org, zone, {RUN_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (load_id) DO UPDATE SET version = excluded.version, \
             agreed = excluded.agreed, active_outcome = excluded.active_outcome, \
             shadow_outcome = excluded.shadow_outcome, step = excluded.step, \
             message = excluded.message, steps_json = excluded.steps_json, \
             ran_at = excluded.ran_at"
        ))
        .bind(&scope.org)
        .bind(scope.zone_key())
        .bind(&run.load_id)
        .bind(run.version)
        .bind(i64::from(run.agreed))
        .bind(&run.active_outcome)
        .bind(&run.shadow_outcome)
        .bind(&run.step)
        .bind(&run.message)
        .bind(&run.steps_json)
        .bind(run.ran_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The shadow run beside `load_id`'s commit, if one ran.
    pub async fn shadow_run(&self, load_id: &str) -> Result<Option<ShadowRun>> {
        let row = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM shadow_runs WHERE load_id = $1"
        ))
        .bind(load_id)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(run_of).transpose()
    }

    /// The scope's runs of shadow `version` since `since`: counted, and the
    /// latest `limit` disagreements.
    pub async fn shadow_tally(
        &self,
        scope: &PipelineScope,
        version: i64,
        since: i64,
        limit: i64,
    ) -> Result<ShadowTally> {
        let zone = scope.zone_key();
        let counts = sqlx::query(
            "SELECT COUNT(*) AS loads, CAST(COALESCE(SUM(agreed), 0) AS BIGINT) AS agreements \
             FROM shadow_runs \
             WHERE org = $1 AND zone = $2 AND version = $3 AND ran_at >= $4",
        )
        .bind(&scope.org)
        .bind(zone)
        .bind(version)
        .bind(since)
        .fetch_one(self.pool())
        .await?;
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM shadow_runs WHERE org = $1 AND zone = $2 \
             AND version = $3 AND ran_at >= $4 AND agreed = 0 ORDER BY ran_at DESC LIMIT $5"
        ))
        .bind(&scope.org)
        .bind(zone)
        .bind(version)
        .bind(since)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(ShadowTally {
            loads: counts.try_get("loads")?,
            agreements: counts.try_get("agreements")?,
            disagreements: rows.iter().map(run_of).collect::<Result<_>>()?,
        })
    }
}
