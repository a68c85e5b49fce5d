//! Loads (spec "Load", "POST /load", "POST /load/{load_id}/file", "GET
//! /load/{load_id}"): the load lifecycle up to its commit, and upload
//! descriptors for the files. Knows no HTTP; parquet is never opened here
//! (checking files is the pipeline's business).
//!
//! Uploaded files land in the lake's object store under `_staging/` (a name no
//! database can have), at the object key of their descriptor; nothing there is
//! visible to queries, which read only catalogued files. Staged files of loads
//! left OPEN longer than `uploads.staging_ttl_s` are removed by
//! [`LoadService::sweep_stale_staging`], which the retention sweep runs
//! (`retention/`).

pub mod commit;
pub mod dry_run;
mod earlier_attempts;
pub mod grant;
pub mod parquet_envelope;
pub mod parquet_schema_depth;
mod shadow;
pub mod staged;
mod staged_scan;
pub mod staged_sql;
mod staged_versions;

use std::sync::Arc;

use futures::StreamExt as _;
use object_store::{ObjectStoreExt as _, path::Path as ObjectPath};
use url::Url;

use crate::{
    auth::LakeCaller,
    clock::SharedClock,
    config::UploadsConfig,
    engine::layout::is_plain_name,
    lake::{Lake, signing::LinkSigner},
    store::{
        self, Store,
        loads::{LoadFile, LoadRecord, LoadState, NewLoad},
    },
};
use grant::{GrantSigner, TemporaryCredentials, UPLOAD_GRANT_LIFETIME_S, UploadGrant};

/// The only load type (spec "POST /load").
pub const APPEND_ONLY: &str = "APPEND_ONLY";

/// Where staged uploads live in the lake's object store.
pub const STAGING_PREFIX: &str = "_staging";

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file_key that breaks the rule of POST /load/{id}/file.
    #[error("the file_key breaks the rule")]
    BadFileKey,
    /// Unknown load, or another user's.
    #[error("load not found")]
    NotFound,
    /// The load is no longer OPEN.
    #[error("load already committed")]
    AlreadyCommitted,
    /// The metadata store failed.
    #[error("internal: {0}")]
    Store(#[from] store::Error),
    /// The lake's object store failed while staged files were `what`
    /// ("listing" or "removing").
    #[error("internal: {what} staging: {source}")]
    Staging {
        what: &'static str,
        #[source]
        source: object_store::Error,
    },
}

/// A POST /load request, checked at the edge (`api/load_body.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadRequest {
    pub table_name: String,
    pub load_as_service_client_id: Option<String>,
    pub partitions: Vec<String>,
}

/// The file_key rule of POST /load/{id}/file: a plain name, so an object
/// key never gains a level or leaves its load's prefix.
pub fn check_file_key(file_key: &str) -> Result<(), LoadError> {
    if is_plain_name(file_key) {
        Ok(())
    } else {
        Err(LoadError::BadFileKey)
    }
}

/// An upload descriptor (spec "Upload descriptor").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadDescriptor {
    /// Where the form POST goes: `<endpoint>/<bucket>`.
    pub post_url: String,
    pub object_key: String,
    pub bucket: String,
    pub policy: String,
    pub signature: String,
    pub credentials: TemporaryCredentials,
}

/// The load lifecycle up to the commit.
pub struct LoadService {
    store: Store,
    lake: Lake,
    clock: SharedClock,
    config: UploadsConfig,
    grants: GrantSigner,
    /// How callers reach the upload endpoint.
    endpoint: Url,
}

impl std::fmt::Debug for LoadService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadService")
            .field("endpoint", &self.endpoint.as_str())
            .finish_non_exhaustive()
    }
}

fn micros(clock: &SharedClock) -> i64 {
    clock.now().timestamp_micros()
}

impl LoadService {
    /// `endpoint` is the upload endpoint's address as callers reach it.
    pub async fn new(
        store: Store,
        lake: Lake,
        clock: SharedClock,
        config: UploadsConfig,
        endpoint: Url,
    ) -> Result<Arc<Self>, LoadError> {
        let key = store
            .shared_secret("upload-grant-key", LinkSigner::generate_key, micros(&clock))
            .await?;
        let grants = GrantSigner::new(LinkSigner::new(key.as_bytes()));
        Ok(Arc::new(Self {
            store,
            lake,
            clock,
            config,
            grants,
            endpoint,
        }))
    }

    pub fn grants(&self) -> &GrantSigner {
        &self.grants
    }

    pub fn config(&self) -> &UploadsConfig {
        &self.config
    }

    pub fn now_seconds(&self) -> i64 {
        self.clock.unix_seconds()
    }

    /// POST /load: a new OPEN load owned by the caller.
    pub async fn create(
        &self,
        caller: &LakeCaller,
        request: LoadRequest,
    ) -> Result<LoadRecord, LoadError> {
        let load = NewLoad {
            id: store::new_id(),
            org: caller.org.clone(),
            zone: caller.zone.clone(),
            owner_sub: caller.sub.clone(),
            load_type: APPEND_ONLY.into(),
            table_name: request.table_name,
            load_as_service_client_id: request.load_as_service_client_id,
            partitions: request.partitions,
        };
        Ok(self.store.insert_load(&load, micros(&self.clock)).await?)
    }

    /// A load of the caller: theirs, on this org or zone; anything else is
    /// NotFound, so nobody learns that another user's load exists.
    pub async fn get(&self, caller: &LakeCaller, load_id: &str) -> Result<LoadRecord, LoadError> {
        let record = self.store.load(load_id).await?.ok_or(LoadError::NotFound)?;
        let load = &record.load;
        if load.owner_sub != caller.sub || load.org != caller.org || load.zone != caller.zone {
            return Err(LoadError::NotFound);
        }
        Ok(record)
    }

    /// POST /load/{id}/file: a descriptor for one file of an OPEN load. Without
    /// a file_key the file gets a fresh one; the same file_key again overwrites.
    pub async fn add_file(
        &self,
        caller: &LakeCaller,
        load_id: &str,
        file_key: Option<&str>,
    ) -> Result<UploadDescriptor, LoadError> {
        if let Some(key) = file_key {
            check_file_key(key)?;
        }
        let record = self.get(caller, load_id).await?;
        if record.state != LoadState::Open {
            return Err(LoadError::AlreadyCommitted);
        }
        let file_key = match file_key {
            Some(key) => key.to_string(),
            None => format!("file_{}", store::new_id()),
        };
        let object_key = object_key(&record.load, &file_key);
        let now = micros(&self.clock);
        self.store
            .request_load_file(&LoadFile {
                load_id: load_id.to_string(),
                file_key: file_key.clone(),
                object_key: object_key.clone(),
                requested_at: now,
                uploaded_at: None,
                size_bytes: None,
            })
            .await?;
        self.store.touch_load(load_id, now).await?;
        let grant = UploadGrant {
            access_key_id: GrantSigner::new_access_key_id(),
            load_id: load_id.to_string(),
            file_key,
            bucket: self.config.bucket.clone(),
            object_key: object_key.clone(),
            expires_at: self.clock.unix_seconds() + UPLOAD_GRANT_LIFETIME_S,
        };
        let credentials = self.grants.credentials(&grant);
        let (policy, signature) =
            self.grants
                .post_policy(&grant, &credentials, self.config.max_file_bytes);
        Ok(UploadDescriptor {
            post_url: format!(
                "{}/{}",
                self.endpoint.as_str().trim_end_matches('/'),
                self.config.bucket
            ),
            object_key,
            bucket: self.config.bucket.clone(),
            policy,
            signature,
            credentials,
        })
    }

    /// POST /load/{id}/commit: OPEN → PROCESSING with the check_sum and the
    /// caller's access, for a commit worker to run the pipeline.
    pub async fn commit(
        &self,
        caller: &LakeCaller,
        load_id: &str,
        check_sum: &[(String, String)],
    ) -> Result<(), LoadError> {
        let record = self.get(caller, load_id).await?;
        if record.state != LoadState::Open {
            return Err(LoadError::AlreadyCommitted);
        }
        let check_sum_json = serde_json::to_string(check_sum).expect("pairs serialise");
        let access_json = serde_json::to_string(&caller.grant).expect("grant serialises");
        let committed = self
            .store
            .commit_load(load_id, &check_sum_json, &access_json, micros(&self.clock))
            .await?;
        if committed {
            crate::observability::jobs::load_committed(load_id);
            Ok(())
        } else {
            Err(LoadError::AlreadyCommitted)
        }
    }

    /// Whether `grant` may still write: its load is OPEN and its file was
    /// requested. Checked by the upload endpoint before it takes any bytes.
    pub async fn accepts_upload(&self, grant: &UploadGrant) -> Result<bool, LoadError> {
        let Some(record) = self.store.load(&grant.load_id).await? else {
            return Ok(false);
        };
        if record.state != LoadState::Open {
            return Ok(false);
        }
        let files = self.store.load_files(&grant.load_id).await?;
        Ok(files
            .iter()
            .any(|f| f.file_key == grant.file_key && f.object_key == grant.object_key))
    }

    /// Records a finished upload; false when the load stopped taking files
    /// while the bytes were arriving (the object is then removed).
    pub async fn record_upload(&self, grant: &UploadGrant, size: u64) -> Result<bool, LoadError> {
        let now = micros(&self.clock);
        let recorded = self
            .store
            .record_upload(&grant.load_id, &grant.file_key, size as i64, now)
            .await?;
        if recorded {
            self.store.touch_load(&grant.load_id, now).await?;
        } else {
            let _ = self
                .lake
                .object_store()
                .delete(&staging_path(&grant.object_key))
                .await;
        }
        Ok(recorded)
    }

    /// Removes the staged files of loads left OPEN longer than
    /// `uploads.staging_ttl_s`; returns how many loads were cleaned.
    pub async fn sweep_stale_staging(&self) -> Result<usize, LoadError> {
        let now = micros(&self.clock);
        let before = now - (self.config.staging_ttl_s as i64) * 1_000_000;
        let mut cleaned = 0;
        for record in self.store.stale_open_loads(before, 100).await? {
            if !self
                .store
                .expire_staging(&record.load.id, before, now)
                .await?
            {
                continue;
            }
            for prefix in [
                staging_path(&load_prefix(&record.load)),
                parts_prefix(&record.load.id),
            ] {
                self.delete_prefix(&prefix).await?;
            }
            cleaned += 1;
        }
        Ok(cleaned)
    }

    async fn delete_prefix(&self, prefix: &ObjectPath) -> Result<(), LoadError> {
        delete_prefix(&self.lake, prefix).await
    }
}

/// The folder of a load's files in the upload bucket: `<org>/<zone or ->/<load>`.
pub fn load_prefix(load: &NewLoad) -> String {
    format!(
        "{}/{}/{}",
        load.org,
        load.zone.as_deref().unwrap_or("-"),
        load.id
    )
}

/// Deletes every object under `prefix` (staging of a load).
pub async fn delete_prefix(lake: &Lake, prefix: &ObjectPath) -> Result<(), LoadError> {
    let store = lake.object_store();
    let mut listing = store.list(Some(prefix));
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(|source| LoadError::Staging {
            what: "listing",
            source,
        })?;
        match store.delete(&meta.location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(source) => {
                return Err(LoadError::Staging {
                    what: "removing",
                    source,
                });
            }
        }
    }
    Ok(())
}

/// The object key of a load's file in the upload bucket.
pub fn object_key(load: &NewLoad, file_key: &str) -> String {
    format!("{}/{file_key}.parquet", load_prefix(load))
}

/// Where an uploaded object lives in the lake's object store.
pub fn staging_path(object_key: &str) -> ObjectPath {
    ObjectPath::from(format!("{STAGING_PREFIX}/{object_key}"))
}

/// Where the parts of a load's multipart uploads wait for completion.
pub fn parts_prefix(load_id: &str) -> ObjectPath {
    ObjectPath::from(format!("{STAGING_PREFIX}/_parts/{load_id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_keys_are_snake_names() {
        assert!(check_file_key("part_01").is_ok());
        for bad in ["", "Part", "a-b", "a/b", "../x", "a.parquet"] {
            assert!(check_file_key(bad).is_err(), "{bad}");
        }
        assert!(check_file_key(&"a".repeat(129)).is_err());
    }
}
