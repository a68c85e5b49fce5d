//! The lake's key prefix on S3 (`lake_url = "s3://bucket/<prefix>"`):
//! object_store's `PrefixStore`, with the one answer it gets wrong put right.
//!
//! object_store 0.13's `PrefixStore::get_opts` hands back the inner store's
//! metadata unchanged, so a `head` (which is a `get_opts`) names the object
//! by its full key, prefix included, while every other call (lists, deletes)
//! names it relative to the prefix. Readers that go on with that location
//! (DataFusion's listing of a single file, a parquet reader given the head's
//! `ObjectMeta`) then read `<prefix>/<prefix>/...` and find nothing: every
//! load on a lake with a prefix failed. This wrapper answers with the location
//! the caller asked for. It never changes what is stored or where.

use std::{fmt, ops::Range, sync::Arc};

use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result, path::Path,
    prefix::PrefixStore,
};

/// An object store under a key prefix whose every answer names objects
/// relative to the prefix.
#[derive(Debug)]
pub struct PrefixedStore {
    inner: PrefixStore<Arc<dyn ObjectStore>>,
}

impl PrefixedStore {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        Self {
            inner: PrefixStore::new(store, prefix),
        }
    }
}

impl fmt::Display for PrefixedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner, f)
    }
}

#[async_trait::async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for PrefixedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let mut result = self.inner.get_opts(location, options).await?;
        result.meta.location = location.clone();
        Ok(result)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use object_store::{ObjectStoreExt as _, memory::InMemory};

    use super::*;

    #[tokio::test]
    async fn a_head_names_the_object_as_lists_do() {
        let store = PrefixedStore::new(Arc::new(InMemory::new()), Path::from("lake"));
        let path = Path::from("_staging/a.parquet");
        store.put(&path, PutPayload::from("x")).await.unwrap();
        assert_eq!(store.head(&path).await.unwrap().location, path);
        let listed = store
            .list_with_delimiter(Some(&Path::from("_staging")))
            .await
            .unwrap();
        assert_eq!(listed.objects[0].location, path);
    }
}
