//! The versions of a load's staged objects, seen when its commit starts:
//! an upload that replaced a file while the commit ran (its last byte
//! arriving after the file was validated) fails the commit before anything
//! is recorded, naming the file.

use object_store::{ObjectStoreExt as _, path::Path as ObjectPath};

use super::staging_path;
use crate::{lake::Lake, store::loads::LoadFile};

/// An object's version: size, ETag, last-modified time.
type ObjectVersion = (u64, Option<String>, i64);

/// Each uploaded file's staged object and its version, `None` where it is
/// gone.
pub(super) struct StagedVersions(Vec<(String, ObjectPath, Option<ObjectVersion>)>);

impl StagedVersions {
    /// The versions of the staged objects of `files` (the uploaded ones).
    pub(super) async fn of(lake: &Lake, files: &[LoadFile]) -> Self {
        let mut versions = Vec::with_capacity(files.len());
        for file in files.iter().filter(|f| f.uploaded_at.is_some()) {
            let path = staging_path(&file.object_key);
            let version = version_of(lake, &path).await;
            versions.push((file.file_key.clone(), path, version));
        }
        Self(versions)
    }

    /// The first file whose staged object is no longer the version seen.
    pub(super) async fn first_replaced(&self, lake: &Lake) -> Option<String> {
        for (key, path, version) in &self.0 {
            if &version_of(lake, path).await != version {
                return Some(key.clone());
            }
        }
        None
    }
}

async fn version_of(lake: &Lake, path: &ObjectPath) -> Option<ObjectVersion> {
    let meta = lake.object_store().head(path).await.ok()?;
    Some((meta.size, meta.e_tag, meta.last_modified.timestamp_micros()))
}
