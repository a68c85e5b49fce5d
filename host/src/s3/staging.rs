//! The S3 operations the temporary credentials of an upload descriptor allow,
//! on top of s3s (which parses requests, verifies SigV4 signatures and
//! renders S3's XML errors): PutObject and the multipart upload
//! (CreateMultipartUpload, UploadPart, CompleteMultipartUpload,
//! AbortMultipartUpload) of exactly the descriptor's key, for one hour.
//! Everything else is AccessDenied before any byte of the body is read.
//!
//! Bodies stream into the lake's object store: a part or an object is never
//! held in memory whole. Multipart parts wait under `_staging/_parts/<load>/`
//! and are concatenated into the object when the upload completes.

use std::sync::Arc;

use futures::StreamExt as _;
use object_store::{ObjectStore, ObjectStoreExt as _, path::Path as ObjectPath};
use s3s::{
    S3, S3Error, S3Request, S3Response, S3Result,
    access::{S3Access, S3AccessContext},
    auth::{S3Auth, SecretKey},
    dto::{
        AbortMultipartUploadInput, AbortMultipartUploadOutput, CompleteMultipartUploadInput,
        CompleteMultipartUploadOutput, CreateMultipartUploadInput, CreateMultipartUploadOutput,
        ETag, PutObjectInput, PutObjectOutput, UploadPartInput, UploadPartOutput,
    },
    path::S3Path,
    s3_error,
};

use super::{
    refusal::{LOAD_CLOSED, internal, upload_refused},
    staged_object::{StagedObject, StreamError, stream_to_object},
};
use crate::load::{
    LoadService,
    grant::{UploadAttempt, UploadGrant},
    parts_prefix, staging_path,
};

/// The operations upload credentials allow.
const ALLOWED_OPERATIONS: &[&str] = &[
    "PutObject",
    "CreateMultipartUpload",
    "UploadPart",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
];

/// How much of a part is read at once when parts are joined.
const COPY_BLOCK_BYTES: u64 = 8 * 1024 * 1024;

/// S3's limit on part numbers.
const MAX_PART_NUMBER: i32 = 10_000;

/// Looks up the secret of an access key: derived from it, never stored.
pub struct GrantAuth {
    pub loads: Arc<LoadService>,
}

#[async_trait::async_trait]
impl S3Auth for GrantAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        let shaped = access_key.len() == 20
            && access_key.starts_with("ASIA")
            && access_key.bytes().all(|b| b.is_ascii_alphanumeric());
        if !shaped {
            return Err(s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            ));
        }
        Ok(SecretKey::from(self.loads.grants().secret_for(access_key)))
    }
}

/// Decides every request before its body is read: signed credentials (s3s
/// checked their signature), an allowed operation on one object, and the
/// upload check of its session token (`LoadService::check_upload`: a valid
/// unexpired grant of those credentials, for its own bucket and key, on a
/// load that still takes files).
pub struct GrantAccess {
    pub loads: Arc<LoadService>,
}

#[async_trait::async_trait]
impl S3Access for GrantAccess {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let Some(credentials) = cx.credentials() else {
            return Err(s3_error!(AccessDenied, "Anonymous access is not allowed."));
        };
        let token = cx
            .headers()
            .get("x-amz-security-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| query_parameter(cx.uri(), "X-Amz-Security-Token"))
            .ok_or_else(|| {
                s3_error!(
                    AccessDenied,
                    "These credentials need their session token (x-amz-security-token)."
                )
            })?;
        let operation = cx.s3_op().name();
        if !ALLOWED_OPERATIONS.contains(&operation) {
            return Err(s3_error!(
                AccessDenied,
                "Upload credentials do not allow {operation}."
            ));
        }
        let S3Path::Object { bucket, key } = cx.s3_path() else {
            return Err(s3_error!(
                AccessDenied,
                "Upload credentials allow one key only."
            ));
        };
        let grant = self
            .loads
            .check_upload(UploadAttempt {
                session_token: &token,
                access_key_id: &credentials.access_key,
                bucket,
                object_key: key,
            })
            .await
            .map_err(|refused| S3Error::from(upload_refused(refused)))?;
        cx.extensions_mut().insert(grant);
        Ok(())
    }
}

fn query_parameter(uri: &http::Uri, name: &str) -> Option<String> {
    url::form_urlencoded::parse(uri.query()?.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The staging area as an S3 bucket.
pub struct StagingBucket {
    pub loads: Arc<LoadService>,
    pub store: Arc<dyn ObjectStore>,
}

fn grant_of<T>(req: &S3Request<T>) -> S3Result<UploadGrant> {
    req.extensions
        .get::<UploadGrant>()
        .cloned()
        .ok_or_else(|| s3_error!(AccessDenied, "Request was not authorised."))
}

fn new_etag() -> ETag {
    ETag::Strong(crate::store::new_id())
}

/// Upload ids are ours (hex); anything else cannot name a part folder.
fn checked_upload_id(upload_id: &str) -> S3Result<&str> {
    if upload_id.len() == 32 && upload_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(upload_id)
    } else {
        Err(s3_error!(
            NoSuchUpload,
            "The specified multipart upload does not exist."
        ))
    }
}

fn part_folder(grant: &UploadGrant, upload_id: &str) -> ObjectPath {
    parts_prefix(&grant.load_id)
        .join(grant.file_key.as_str())
        .join(upload_id)
}

fn part_path(grant: &UploadGrant, upload_id: &str, part_number: i32) -> ObjectPath {
    part_folder(grant, upload_id).join(format!("{part_number:05}").as_str())
}

fn s3_stream_error(e: StreamError) -> S3Error {
    match e {
        StreamError::TooLarge => s3_error!(
            EntityTooLarge,
            "Your proposed upload exceeds the maximum allowed object size."
        ),
        StreamError::TooSmall => s3_error!(
            EntityTooSmall,
            "Your proposed upload is smaller than the minimum allowed object size."
        ),
        StreamError::LoadNotOpen => s3_error!(AccessDenied, "{LOAD_CLOSED}"),
        StreamError::Body(why) => s3_error!(IncompleteBody, "{why}"),
        failed @ (StreamError::Store(_) | StreamError::Load(_)) => {
            internal("writing an upload", &failed).into()
        }
    }
}

impl StagingBucket {
    fn max_bytes(&self) -> u64 {
        self.loads.config().max_file_bytes
    }

    async fn finish_object(&self, grant: &UploadGrant, size: u64) -> S3Result<()> {
        let recorded = self
            .loads
            .record_upload(grant, size)
            .await
            .map_err(|e| S3Error::from(internal("recording an upload", &e)))?;
        if recorded {
            Ok(())
        } else {
            Err(s3_error!(AccessDenied, "{LOAD_CLOSED}"))
        }
    }
}

#[async_trait::async_trait]
impl S3 for StagingBucket {
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let grant = grant_of(&req)?;
        let body = req
            .input
            .body
            .ok_or_else(|| s3_error!(IncompleteBody, "The request has no body."))?;
        let size = stream_to_object(
            &self.store,
            &staging_path(&grant.object_key),
            body,
            0..=self.max_bytes(),
            self.loads.accepts_upload(&grant),
        )
        .await
        .map_err(s3_stream_error)?;
        self.finish_object(&grant, size).await?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(new_etag()),
            size: Some(size as i64),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        grant_of(&req)?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(req.input.bucket),
            key: Some(req.input.key),
            upload_id: Some(crate::store::new_id()),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let grant = grant_of(&req)?;
        let input = req.input;
        let upload_id = checked_upload_id(&input.upload_id)?;
        if !(1..=MAX_PART_NUMBER).contains(&input.part_number) {
            return Err(s3_error!(
                InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive."
            ));
        }
        let body = input
            .body
            .ok_or_else(|| s3_error!(IncompleteBody, "The request has no body."))?;
        stream_to_object(
            &self.store,
            &part_path(&grant, upload_id, input.part_number),
            body,
            0..=self.max_bytes(),
            self.loads.accepts_upload(&grant),
        )
        .await
        .map_err(s3_stream_error)?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(new_etag()),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let grant = grant_of(&req)?;
        let input = req.input;
        let upload_id = checked_upload_id(&input.upload_id)?.to_string();
        let numbers: Vec<i32> = input
            .multipart_upload
            .and_then(|u| u.parts)
            .unwrap_or_default()
            .iter()
            .map(|p| p.part_number.unwrap_or(0))
            .collect();
        if numbers.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "You must specify at least one part."
            ));
        }
        if numbers.windows(2).any(|w| w[0] >= w[1]) {
            return Err(s3_error!(
                InvalidPartOrder,
                "The list of parts was not in ascending order."
            ));
        }
        // Every part must be there before the object is touched.
        for &number in &numbers {
            if self
                .store
                .head(&part_path(&grant, &upload_id, number))
                .await
                .is_err()
            {
                return Err(s3_error!(
                    InvalidPart,
                    "One or more of the specified parts could not be found."
                ));
            }
        }
        let size = self.concatenate(&grant, &upload_id, &numbers).await?;
        self.delete_parts(&grant, &upload_id).await;
        self.finish_object(&grant, size).await?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            e_tag: Some(new_etag()),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let grant = grant_of(&req)?;
        let upload_id = checked_upload_id(&req.input.upload_id)?.to_string();
        self.delete_parts(&grant, &upload_id).await;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }
}

impl StagingBucket {
    /// Writes the parts, in order, into the descriptor's object.
    async fn concatenate(
        &self,
        grant: &UploadGrant,
        upload_id: &str,
        numbers: &[i32],
    ) -> S3Result<u64> {
        let mut object = StagedObject::create(
            &self.store,
            &staging_path(&grant.object_key),
            self.max_bytes(),
        )
        .await
        .map_err(s3_stream_error)?;
        for &number in numbers {
            let path = part_path(grant, upload_id, number);
            // Large ranges: a plain `get` streams local files in 8 KiB reads.
            let copied = async {
                let size = self.store.head(&path).await?.size;
                let mut offset = 0;
                while offset < size {
                    let end = (offset + COPY_BLOCK_BYTES).min(size);
                    let block = self.store.get_range(&path, offset..end).await?;
                    offset = end;
                    if let Err(e) = object.write(block).await {
                        return Ok(Err(e));
                    }
                }
                Ok::<_, object_store::Error>(Ok(()))
            }
            .await;
            let failure = match copied {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => s3_stream_error(e),
                Err(e) => internal("reading an upload's part", &e).into(),
            };
            object.abort().await;
            return Err(failure);
        }
        object
            .finish_while(self.loads.accepts_upload(grant))
            .await
            .map_err(s3_stream_error)
    }

    async fn delete_parts(&self, grant: &UploadGrant, upload_id: &str) {
        let folder = part_folder(grant, upload_id);
        let mut listing = self.store.list(Some(&folder));
        while let Some(Ok(meta)) = listing.next().await {
            let _ = self.store.delete(&meta.location).await;
        }
    }
}
