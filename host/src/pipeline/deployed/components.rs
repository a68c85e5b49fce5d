//! Components stored by content: `PUT /v2/pipeline/components/sha256:<hex>`
//! checks the digest, the size and the world, compiles the component (so
//! this replica never compiles it inside a commit), writes its bytes to the
//! lake's object store under `_pipeline/components/<hex>.wasm` (a name no
//! database can have) and makes it the scope's. Bytes are read back only
//! through [`Deployments::component_bytes`]: within the cap, and checked
//! against their digest.

use bytes::Bytes;
use object_store::{ObjectStoreExt as _, PutPayload, path::Path as ObjectPath};
use sha2::{Digest as _, Sha256};

use super::{DeployError, Deployments};
use crate::{
    pipeline::{
        PipelineKind,
        manifest::{DIGEST_PREFIX, is_digest},
    },
    store::pipelines::{PipelineScope, StoredComponent},
};

/// A stored component as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentInfo {
    /// `sha256:<hex>`.
    pub digest: String,
    pub bytes: u64,
    pub kind: PipelineKind,
    pub created_by: String,
    pub created_at: i64,
}

/// What a `PUT` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// Stored now (201).
    Created(ComponentInfo),
    /// The scope had stored it already (200).
    Existing(ComponentInfo),
}

/// `sha256:<hex>` of `bytes`.
pub(super) fn digest_of(bytes: &[u8]) -> String {
    format!("{DIGEST_PREFIX}{}", hex::encode(Sha256::digest(bytes)))
}

/// Where a component's bytes are kept in the lake.
fn object_path(digest: &str) -> ObjectPath {
    let hex = digest.strip_prefix(DIGEST_PREFIX).unwrap_or(digest);
    ObjectPath::from(format!("_pipeline/components/{hex}.wasm"))
}

fn info_of(row: StoredComponent) -> Result<ComponentInfo, DeployError> {
    let kind = PipelineKind::of_world(&row.world).ok_or_else(|| {
        DeployError::Store(crate::store::Error::Corrupt(format!(
            "component world {:?}",
            row.world
        )))
    })?;
    Ok(ComponentInfo {
        digest: row.digest,
        bytes: u64::try_from(row.bytes).unwrap_or_default(),
        kind,
        created_by: row.created_by,
        created_at: row.created_at,
    })
}

impl Deployments {
    /// The largest component stored (`pipeline.max_component_bytes`).
    pub fn max_component_bytes(&self) -> u64 {
        self.config.max_component_bytes
    }

    /// Refuses a path's digest that is not `sha256:` and 64 lowercase hex.
    pub fn check_digest(digest: &str) -> Result<(), DeployError> {
        if is_digest(digest) {
            Ok(())
        } else {
            Err(DeployError::BadDigest(digest.chars().take(80).collect()))
        }
    }

    /// Stores `bytes` as the scope's component `digest`, by `who`.
    pub async fn put_component(
        &self,
        scope: &PipelineScope,
        digest: &str,
        bytes: Bytes,
        who: &str,
    ) -> Result<Stored, DeployError> {
        Self::check_digest(digest)?;
        if bytes.len() as u64 > self.config.max_component_bytes {
            return Err(DeployError::TooLarge {
                cap: self.config.max_component_bytes,
            });
        }
        let actual = digest_of(&bytes);
        if actual != digest {
            return Err(DeployError::DigestMismatch {
                declared: digest.to_string(),
                actual,
            });
        }
        if let Some(row) = self.store.pipeline_component(scope, digest).await? {
            return Ok(Stored::Existing(info_of(row)?));
        }
        let kind = {
            let (engine, digest, wasm) = (self.engine.clone(), digest.to_string(), bytes.clone());
            tokio::task::spawn_blocking(move || engine.world_of(&digest, &wasm)).await?
        }
        .map_err(DeployError::NotUsable)?;
        tracing::info!(org = %scope.org, zone = ?scope.zone, %digest, world = kind.world(),
            bytes = bytes.len(), "a pipeline component was stored and compiled");
        let row = StoredComponent {
            digest: digest.to_string(),
            bytes: bytes.len() as i64,
            world: kind.world().to_string(),
            created_by: who.to_string(),
            created_at: self.now(),
        };
        self.lake
            .object_store()
            .put(&object_path(digest), PutPayload::from(bytes))
            .await?;
        if self.store.add_pipeline_component(scope, &row).await? {
            Ok(Stored::Created(info_of(row)?))
        } else {
            // Another request stored it meanwhile: its row is the one kept.
            let kept = self.store.pipeline_component(scope, digest).await?;
            Ok(Stored::Existing(info_of(kept.unwrap_or(row))?))
        }
    }

    /// The scope's component `digest`.
    pub async fn component(
        &self,
        scope: &PipelineScope,
        digest: &str,
    ) -> Result<ComponentInfo, DeployError> {
        Self::check_digest(digest)?;
        match self.store.pipeline_component(scope, digest).await? {
            Some(row) => info_of(row),
            None => Err(DeployError::ComponentNotFound(digest.to_string())),
        }
    }

    /// The bytes of a stored component: at most the cap, and those of its
    /// digest (a damaged object is refused, never compiled).
    pub(super) async fn component_bytes(&self, digest: &str) -> Result<Bytes, DeployError> {
        let object = self.lake.object_store().get(&object_path(digest)).await?;
        if object.meta.size > self.config.max_component_bytes {
            return Err(DeployError::TooLarge {
                cap: self.config.max_component_bytes,
            });
        }
        let bytes = object.bytes().await?;
        if digest_of(&bytes) != digest {
            return Err(DeployError::Damaged(digest.to_string()));
        }
        Ok(bytes)
    }

    /// Makes the stored component `digest` ready for a `kind` pipeline on
    /// this replica; true when it had to be compiled (or loaded compiled)
    /// now, false when it was ready.
    pub(super) async fn ready(
        &self,
        kind: PipelineKind,
        digest: &str,
    ) -> Result<bool, DeployError> {
        if self.engine.is_ready(kind, digest) {
            return Ok(false);
        }
        let bytes = self.component_bytes(digest).await?;
        let (engine, digest) = (self.engine.clone(), digest.to_string());
        tokio::task::spawn_blocking(move || engine.ready_stored(kind, &digest, &bytes))
            .await?
            .map_err(DeployError::NotUsable)?;
        Ok(true)
    }
}
