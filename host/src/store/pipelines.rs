//! Pipelines deployed over the API (what they mean is
//! `pipeline/deployed/`'s): the components an org (or zone) stored, its
//! manifest versions, its activations in order, and what judged each load.
//! Version and activation numbers are taken by one conditional insert each
//! (the next number, or nothing when another replica took it first, then
//! again), so two replicas never hand out one number twice. Kinds are the
//! pipelines' labels (`load`, `daily`); this module knows no manifests.

use sqlx::Row as _;

use super::{Result, Store};

/// Whose pipelines: an org's (`zone` `None`, the Org API) or a zone's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PipelineScope {
    pub org: String,
    pub zone: Option<String>,
}

impl PipelineScope {
    pub(super) fn zone_key(&self) -> &str {
        self.zone.as_deref().unwrap_or("")
    }
}

/// A component the scope stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredComponent {
    /// `sha256:<hex>`.
    pub digest: String,
    pub bytes: i64,
    /// The WIT world it targets: `step` or `daily-step`.
    pub world: String,
    pub created_by: String,
    pub created_at: i64,
}

/// One manifest version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineVersion {
    pub version: i64,
    /// `sha256:<hex>` of the manifest text.
    pub digest: String,
    pub manifest: String,
    pub created_by: String,
    pub created_at: i64,
}

/// One activation: `version` `None` hands the pipeline back to the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    pub version: Option<i64>,
    pub activated_by: String,
    pub activated_at: i64,
}

/// What judged a load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadPipeline {
    /// `version`, `files` or `built-in`.
    pub source: String,
    pub version: Option<i64>,
    pub digest: Option<String>,
    /// Each step's outcome, as `pipeline/deployed/` writes it.
    pub steps_json: String,
    pub recorded_at: i64,
}

/// How often a number is taken again after another replica took it.
const NUMBER_ATTEMPTS: usize = 16;

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

fn component_of(row: &sqlx::any::AnyRow) -> Result<StoredComponent> {
    Ok(StoredComponent {
        digest: row.try_get("digest")?,
        bytes: row.try_get("bytes")?,
        world: row.try_get("world")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
    })
}

fn version_of(row: &sqlx::any::AnyRow) -> Result<PipelineVersion> {
    Ok(PipelineVersion {
        version: row.try_get("version")?,
        digest: row.try_get("digest")?,
        manifest: row.try_get("manifest")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
    })
}

fn activation_of(row: &sqlx::any::AnyRow) -> Result<Activation> {
    Ok(Activation {
        version: row.try_get("version")?,
        activated_by: row.try_get("activated_by")?,
        activated_at: row.try_get("activated_at")?,
    })
}

impl Store {
    /// Makes `component` the scope's; false when it already was (nothing
    /// changed).
    pub async fn add_pipeline_component(
        &self,
        scope: &PipelineScope,
        component: &StoredComponent,
    ) -> Result<bool> {
        let added = sqlx::query(
            "INSERT INTO pipeline_components (org, zone, digest, bytes, world, created_by, \
             created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (org, zone, digest) DO NOTHING",
        )
        .bind(&scope.org)
        .bind(scope.zone_key())
        .bind(&component.digest)
        .bind(component.bytes)
        .bind(&component.world)
        .bind(&component.created_by)
        .bind(component.created_at)
        .execute(self.pool())
        .await?;
        Ok(added.rows_affected() == 1)
    }

    /// The scope's component `digest`, if it stored it.
    pub async fn pipeline_component(
        &self,
        scope: &PipelineScope,
        digest: &str,
    ) -> Result<Option<StoredComponent>> {
        let row = sqlx::query(
            "SELECT digest, bytes, world, created_by, created_at FROM pipeline_components \
             WHERE org = $1 AND zone = $2 AND digest = $3",
        )
        .bind(&scope.org)
        .bind(scope.zone_key())
        .bind(digest)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(component_of).transpose()
    }

    /// Components any scope stored at or after `since`, oldest first, a
    /// page of `limit` from `offset`: what a replica compiles in the
    /// background.
    pub async fn pipeline_components_since(
        &self,
        since: i64,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<StoredComponent>> {
        let rows = sqlx::query(
            "SELECT digest, bytes, world, created_by, created_at FROM pipeline_components \
             WHERE created_at >= $1 ORDER BY created_at, org, zone, digest LIMIT $2 OFFSET $3",
        )
        .bind(since)
        .bind(limit)
        .bind(offset)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(component_of).collect()
    }

    /// Adds the scope's next `kind` version; its number.
    pub async fn add_pipeline_version(
        &self,
        scope: &PipelineScope,
        kind: &str,
        new: &PipelineVersion,
    ) -> Result<i64> {
        let insert = || {
            sqlx::query(
                "INSERT INTO pipeline_versions (org, zone, kind, version, digest, manifest, \
                 created_by, created_at) \
                 SELECT $1, $2, $3, COALESCE(MAX(version), 0) + 1, $4, $5, $6, $7 \
                 FROM pipeline_versions WHERE org = $1 AND zone = $2 AND kind = $3 \
                 ON CONFLICT (org, zone, kind, version) DO NOTHING RETURNING version",
            )
            .bind(&scope.org)
            .bind(scope.zone_key())
            .bind(kind)
            .bind(&new.digest)
            .bind(&new.manifest)
            .bind(&new.created_by)
            .bind(new.created_at)
        };
        self.next_number(insert, "version").await
    }

    /// Runs `insert` (which returns the number it took, or no row when
    /// another replica took that number first) until it takes one.
    async fn next_number<'q>(
        &self,
        insert: impl Fn() -> AnyQuery<'q>,
        column: &str,
    ) -> Result<i64> {
        for _ in 0..NUMBER_ATTEMPTS {
            if let Some(row) = insert().fetch_optional(self.pool()).await? {
                return Ok(row.try_get(column)?);
            }
        }
        Err(super::Error::Corrupt(format!(
            "no free {column} number after {NUMBER_ATTEMPTS} attempts"
        )))
    }

    /// The scope's `kind` versions, newest first (at most `limit`).
    pub async fn pipeline_versions(
        &self,
        scope: &PipelineScope,
        kind: &str,
        limit: i64,
    ) -> Result<Vec<PipelineVersion>> {
        let rows = sqlx::query(
            "SELECT version, digest, manifest, created_by, created_at FROM pipeline_versions \
             WHERE org = $1 AND zone = $2 AND kind = $3 ORDER BY version DESC LIMIT $4",
        )
        .bind(&scope.org)
        .bind(scope.zone_key())
        .bind(kind)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(version_of).collect()
    }

    /// The scope's `kind` version `version`.
    pub async fn pipeline_version(
        &self,
        scope: &PipelineScope,
        kind: &str,
        version: i64,
    ) -> Result<Option<PipelineVersion>> {
        let row = sqlx::query(
            "SELECT version, digest, manifest, created_by, created_at FROM pipeline_versions \
             WHERE org = $1 AND zone = $2 AND kind = $3 AND version = $4",
        )
        .bind(&scope.org)
        .bind(scope.zone_key())
        .bind(kind)
        .bind(version)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(version_of).transpose()
    }

    /// Records an activation as the scope's latest.
    pub async fn activate_pipeline(
        &self,
        scope: &PipelineScope,
        kind: &str,
        activation: &Activation,
    ) -> Result<()> {
        let insert = || {
            sqlx::query(
                "INSERT INTO pipeline_activations (org, zone, kind, seq, version, \
                 activated_by, activated_at) \
                 SELECT $1, $2, $3, COALESCE(MAX(seq), 0) + 1, $4, $5, $6 \
                 FROM pipeline_activations WHERE org = $1 AND zone = $2 AND kind = $3 \
                 ON CONFLICT (org, zone, kind, seq) DO NOTHING RETURNING seq",
            )
            .bind(&scope.org)
            .bind(scope.zone_key())
            .bind(kind)
            .bind(activation.version)
            .bind(&activation.activated_by)
            .bind(activation.activated_at)
        };
        self.next_number(insert, "seq").await.map(drop)
    }

    /// The scope's `kind` activations, newest first (at most `limit`).
    pub async fn pipeline_activations(
        &self,
        scope: &PipelineScope,
        kind: &str,
        limit: i64,
    ) -> Result<Vec<Activation>> {
        let rows = sqlx::query(
            "SELECT version, activated_by, activated_at FROM pipeline_activations \
             WHERE org = $1 AND zone = $2 AND kind = $3 ORDER BY seq DESC LIMIT $4",
        )
        .bind(&scope.org)
        .bind(scope.zone_key())
        .bind(kind)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(activation_of).collect()
    }

    /// Records what judged `load_id` (a rerun of its commit replaces it).
    pub async fn record_load_pipeline(&self, load_id: &str, record: &LoadPipeline) -> Result<()> {
        sqlx::query(
            "INSERT INTO load_pipelines (load_id, source, version, digest, steps_json, \
             recorded_at) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (load_id) DO UPDATE SET source = excluded.source, \
             version = excluded.version, digest = excluded.digest, \
             steps_json = excluded.steps_json, recorded_at = excluded.recorded_at",
        )
        .bind(load_id)
        .bind(&record.source)
        .bind(record.version)
        .bind(&record.digest)
        .bind(&record.steps_json)
        .bind(record.recorded_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// What judged `load_id`, once its commit ran.
    pub async fn load_pipeline(&self, load_id: &str) -> Result<Option<LoadPipeline>> {
        let row = sqlx::query(
            "SELECT source, version, digest, steps_json, recorded_at FROM load_pipelines \
             WHERE load_id = $1",
        )
        .bind(load_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|row| {
            Ok(LoadPipeline {
                source: row.try_get("source")?,
                version: row.try_get("version")?,
                digest: row.try_get("digest")?,
                steps_json: row.try_get("steps_json")?,
                recorded_at: row.try_get("recorded_at")?,
            })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(zone: Option<&str>) -> PipelineScope {
        PipelineScope {
            org: "demo".into(),
            zone: zone.map(String::from),
        }
    }

    fn version(manifest: &str) -> PipelineVersion {
        PipelineVersion {
            version: 0,
            digest: format!("sha256:{manifest}"),
            manifest: manifest.into(),
            created_by: "admin".into(),
            created_at: 10,
        }
    }

    #[tokio::test]
    async fn versions_are_numbered_per_scope_and_kind_and_activations_keep_their_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).await.unwrap();
        let (org, zone) = (scope(None), scope(Some("lab")));
        assert_eq!(
            store
                .add_pipeline_version(&org, "load", &version("a"))
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            store
                .add_pipeline_version(&org, "load", &version("b"))
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            store
                .add_pipeline_version(&org, "daily", &version("c"))
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            store
                .add_pipeline_version(&zone, "load", &version("d"))
                .await
                .unwrap(),
            1
        );
        let listed = store.pipeline_versions(&org, "load", 10).await.unwrap();
        assert_eq!(listed.iter().map(|v| v.version).collect::<Vec<_>>(), [2, 1]);
        assert_eq!(
            store
                .pipeline_version(&zone, "load", 1)
                .await
                .unwrap()
                .unwrap()
                .manifest,
            "d"
        );
        assert!(
            store
                .pipeline_version(&zone, "load", 2)
                .await
                .unwrap()
                .is_none()
        );

        for (version, at) in [(Some(2), 1), (Some(1), 2), (None, 3)] {
            let activation = Activation {
                version,
                activated_by: "admin".into(),
                activated_at: at,
            };
            store
                .activate_pipeline(&org, "load", &activation)
                .await
                .unwrap();
        }
        let history = store.pipeline_activations(&org, "load", 10).await.unwrap();
        assert_eq!(
            history.iter().map(|a| a.version).collect::<Vec<_>>(),
            [None, Some(1), Some(2)]
        );
        assert!(
            store
                .pipeline_activations(&zone, "load", 10)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_component_is_added_once_per_scope_and_listed_by_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).await.unwrap();
        let component = StoredComponent {
            digest: "sha256:00".into(),
            bytes: 3,
            world: "step".into(),
            created_by: "admin".into(),
            created_at: 5,
        };
        assert!(
            store
                .add_pipeline_component(&scope(None), &component)
                .await
                .unwrap()
        );
        assert!(
            !store
                .add_pipeline_component(&scope(None), &component)
                .await
                .unwrap()
        );
        assert!(
            store
                .add_pipeline_component(&scope(Some("lab")), &component)
                .await
                .unwrap()
        );
        assert_eq!(
            store
                .pipeline_component(&scope(None), "sha256:00")
                .await
                .unwrap(),
            Some(component.clone())
        );
        assert!(
            store
                .pipeline_component(&scope(None), "sha256:01")
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            store
                .pipeline_components_since(5, 10, 0)
                .await
                .unwrap()
                .len(),
            2
        );
        assert!(
            store
                .pipeline_components_since(6, 10, 0)
                .await
                .unwrap()
                .is_empty()
        );
    }
}
