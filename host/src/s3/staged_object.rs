//! One object written to the lake's store from an upload's body, streamed
//! (never held whole), within a size range, and completed only while its
//! load still takes files: whatever goes wrong, the previous object (or
//! none) stays. The S3 operations (`staging.rs`) and the form POST
//! (`form.rs`) both write through it.

use std::{ops::RangeInclusive, sync::Arc};

use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use object_store::{ObjectStore, ObjectStoreExt as _, WriteMultipart, path::Path as ObjectPath};

use crate::load::LoadError;

/// An object being written to the store: it appears only when
/// `finish_while` succeeds (a failed or aborted one leaves nothing, or the old object).
pub struct StagedObject {
    writer: WriteMultipart,
    size: u64,
    max_bytes: u64,
}

impl StagedObject {
    pub async fn create(
        store: &Arc<dyn ObjectStore>,
        path: &ObjectPath,
        max_bytes: u64,
    ) -> Result<Self, StreamError> {
        let upload = store
            .put_multipart(path)
            .await
            .map_err(StreamError::Store)?;
        Ok(Self {
            writer: WriteMultipart::new_with_chunk_size(upload, 8 * 1024 * 1024),
            size: 0,
            max_bytes,
        })
    }

    /// Appends a chunk; at most four chunks are in flight to the store.
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), StreamError> {
        self.size += chunk.len() as u64;
        if self.size > self.max_bytes {
            return Err(StreamError::TooLarge);
        }
        self.writer
            .wait_for_capacity(4)
            .await
            .map_err(StreamError::Store)?;
        self.writer.put(chunk);
        Ok(())
    }

    pub async fn abort(self) {
        let _ = self.writer.abort().await;
    }

    /// Completes the object when `load_takes_files` (asked now, after the
    /// last byte) still says its load takes files; returns its size. An
    /// upload that ends after its load left OPEN is dropped before it
    /// replaces anything: a commit works on the files it validated.
    pub async fn finish_while(
        self,
        load_takes_files: impl Future<Output = Result<bool, LoadError>>,
    ) -> Result<u64, StreamError> {
        match load_takes_files.await {
            Ok(true) => {}
            Ok(false) => {
                self.abort().await;
                return Err(StreamError::LoadNotOpen);
            }
            Err(e) => {
                self.abort().await;
                return Err(StreamError::Load(e));
            }
        }
        self.writer.finish().await.map_err(StreamError::Store)?;
        Ok(self.size)
    }
}

/// Streams `body` into a new object at `path` (see [`StagedObject`]) whose
/// size must be within `sizes` and whose load must still take files when
/// the body has ended (`load_takes_files`): otherwise the previous object
/// (or none) stays.
pub async fn stream_to_object<S, E>(
    store: &Arc<dyn ObjectStore>,
    path: &ObjectPath,
    mut body: S,
    sizes: RangeInclusive<u64>,
    load_takes_files: impl Future<Output = Result<bool, LoadError>>,
) -> Result<u64, StreamError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    let mut object = StagedObject::create(store, path, *sizes.end()).await?;
    while let Some(chunk) = body.next().await {
        let written = match chunk {
            Ok(chunk) => object.write(chunk).await,
            Err(e) => Err(StreamError::Body(e.into())),
        };
        if let Err(e) = written {
            object.abort().await;
            return Err(e);
        }
    }
    if object.size < *sizes.start() {
        object.abort().await;
        return Err(StreamError::TooSmall);
    }
    object.finish_while(load_takes_files).await
}

/// Why an upload's object was not written.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("the body could not be read: {0}")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    #[error("the object is larger than allowed")]
    TooLarge,
    #[error("the object is smaller than allowed")]
    TooSmall,
    #[error("the load of these credentials no longer takes files")]
    LoadNotOpen,
    /// The lake's store failed: ours, never shown to the uploader.
    #[error("the lake's store failed")]
    Store(#[source] object_store::Error),
    /// The load could not be read: ours, never shown to the uploader.
    #[error("the upload's load could not be read")]
    Load(#[source] LoadError),
}
