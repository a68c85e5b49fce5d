//! The lake's object store: where data files live and how they are named.
//! Local disk under `data_dir/lake` by default; `lake_url`
//! `s3://bucket/prefix` puts it on S3 (or any S3-compatible store, configured by
//! the standard `AWS_*` variables: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`), or `file:///path` on
//! another directory. Which files a table has is the catalog's business
//! (`store::catalog`), never a listing.
//!
//! Layout: `lake/<database>/<table>/service_client_id=<id>/svc$load_id=<load>/<file>.parquet`;
//! query results under `lake/_results/` (a name no database can have), each
//! as `<query>-<attempt>.csv` with its typed copies beside it
//! (`result_file_path`: `.arrows`, `.parquet`).

mod local_disk;
mod prefixed;
pub mod presigned;
mod read_cache;
mod read_frequency;
pub mod signing;

use std::{path::Path, str::FromStr as _, sync::Arc};

use datafusion::{
    arrow::datatypes::{DataType, Field, Schema, SchemaRef},
    execution::object_store::ObjectStoreUrl,
};
use futures::{StreamExt as _, TryStreamExt as _, stream::BoxStream};
use object_store::{
    GetOptions, GetRange, GetResultPayload, ObjectStore, ObjectStoreExt as _, aws::AmazonS3Builder,
    local::LocalFileSystem, path::Path as ObjectPath, signer::Signer,
};
use serde::{Deserialize, Serialize};

pub use read_cache::ReadCache;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    #[error("schema: {0}")]
    Schema(String),
    #[error("lake directory: {0}")]
    Io(#[from] std::io::Error),
    #[error("storage.lake_url: {0}")]
    Url(String),
    /// S3 answered a write with 404: the lake's bucket does not exist.
    #[error(
        "the bucket \"{bucket}\" does not exist (create it: aws s3 mb s3://{bucket}, with \
         --endpoint-url $AWS_ENDPOINT_URL on an S3-compatible store)"
    )]
    BucketMissing {
        bucket: String,
        #[source]
        source: object_store::Error,
    },
}

/// The object the readiness probe asks for; no database can have this name.
const PROBE_OBJECT: &str = "_readyz/probe";

/// What the probe writes on S3 when its object is not there yet.
const PROBE_BODY: &[u8] = b"lakehost readiness probe\n";

/// The lake's object store and the URL DataFusion knows it by.
#[derive(Clone, Debug)]
pub struct Lake {
    store: Arc<dyn ObjectStore>,
    url: ObjectStoreUrl,
    /// On S3: the bucket's signer and the lake's key prefix, for presigned GETs.
    presigner: Option<(Arc<dyn Signer>, ObjectPath)>,
    /// On local disk: the lake's directory.
    root: Option<std::path::PathBuf>,
    /// On S3: the bucket, named when it is missing.
    bucket: Option<String>,
}

impl Lake {
    /// The lake `storage` configures: `lake_url`, else `data_dir/lake`.
    pub fn from_config(storage: &crate::config::StorageConfig) -> Result<Self, Error> {
        match storage.lake_url.as_deref() {
            None => Self::local(&storage.data_dir),
            Some(url) => Self::from_url(url),
        }
    }

    /// The local-disk lake under `data_dir/lake`.
    pub fn local(data_dir: &Path) -> Result<Self, Error> {
        Self::directory(&data_dir.join("lake"))
    }

    fn directory(root: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(root)?;
        let store = local_disk::LocalLakeStore::new(LocalFileSystem::new_with_prefix(root)?);
        Ok(Self {
            store: Arc::new(store),
            url: ObjectStoreUrl::parse("lakehost://lake/").expect("static URL"),
            presigner: None,
            root: Some(root.to_path_buf()),
            bucket: None,
        })
    }

    /// `s3://bucket[/prefix]` (credentials and endpoint from `AWS_*`) or `file:///dir`.
    pub fn from_url(lake_url: &str) -> Result<Self, Error> {
        let parsed = url::Url::parse(lake_url).map_err(|e| Error::Url(e.to_string()))?;
        match parsed.scheme() {
            "file" => {
                let path = parsed
                    .to_file_path()
                    .map_err(|_| Error::Url(format!("{lake_url} is not a local path")))?;
                Self::directory(&path)
            }
            "s3" => {
                let bucket = parsed
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| Error::Url(format!("{lake_url} names no bucket")))?;
                let s3 = Arc::new(
                    AmazonS3Builder::from_env()
                        .with_bucket_name(bucket)
                        .build()?,
                );
                let prefix = ObjectPath::from(parsed.path().trim_matches('/'));
                let store: Arc<dyn ObjectStore> = if prefix.as_ref().is_empty() {
                    s3.clone()
                } else {
                    Arc::new(prefixed::PrefixedStore::new(s3.clone(), prefix.clone()))
                };
                Ok(Self {
                    store,
                    url: ObjectStoreUrl::parse("lakehost://lake/").expect("static URL"),
                    presigner: Some((s3, prefix)),
                    root: None,
                    bucket: Some(bucket.to_string()),
                })
            }
            other => Err(Error::Url(format!("scheme {other}: use s3:// or file://"))),
        }
    }

    /// A presigned GET of `path` valid for `expires_in`, when the lake is on S3
    /// (`None` on local disk, where the server signs its own links).
    pub async fn presigned_get(
        &self,
        path: &str,
        expires_in: std::time::Duration,
    ) -> Result<Option<url::Url>, Error> {
        let Some((signer, prefix)) = &self.presigner else {
            return Ok(None);
        };
        let full: ObjectPath = prefix
            .parts()
            .chain(ObjectPath::from(path).parts())
            .collect();
        let url = signer
            .signed_url(reqwest::Method::GET, &full, expires_in)
            .await?;
        Ok(Some(url))
    }

    /// Whether the lake answers: its directory is there (local disk), or its
    /// bucket is (S3). A HEAD of an object nobody else writes asks the store;
    /// on S3 its 404 cannot tell a missing object from a missing bucket (a
    /// HEAD's answer has no body), so then the object is written: S3 answers
    /// a PUT with 404 only when the bucket does not exist. After that first
    /// write a probe is one HEAD, and a bucket created later makes the next
    /// probe pass. Callers bound the wait: an S3 client retries for a while.
    pub async fn probe(&self) -> Result<(), Error> {
        let probe = ObjectPath::from(PROBE_OBJECT);
        if let Some(root) = &self.root {
            tokio::fs::metadata(root).await?;
        }
        match self.store.head(&probe).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::NotFound { .. }) if self.root.is_some() => Ok(()),
            Err(object_store::Error::NotFound { .. }) => {
                match self.store.put(&probe, PROBE_BODY.into()).await {
                    Ok(_) => Ok(()),
                    Err(source @ object_store::Error::NotFound { .. }) => {
                        Err(Error::BucketMissing {
                            bucket: self.bucket.clone().unwrap_or_default(),
                            source,
                        })
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a result in every format it was kept in (`csv_path` is its
    /// `result_path`); formats never written are not an error.
    pub async fn delete_result(&self, csv_path: &str) {
        for format in ResultFormat::ALL {
            let path = result_file_path(csv_path, format);
            match self.store.delete(&ObjectPath::from(path.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => tracing::warn!(%path, error = %e, "could not delete a result file"),
            }
        }
    }

    /// The lake's directory when it is on local disk.
    pub fn local_root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    /// The lake's store with up to `budget` bytes of recent ranged reads
    /// kept in memory (`ReadCache`); none for a budget of 0.
    pub fn read_cache(&self, budget: u64) -> Option<Arc<ReadCache>> {
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        // Only the lake on disk reads each range into a buffer of its own.
        let copies = self.root.is_none();
        (budget > 0).then(|| Arc::new(ReadCache::new(self.store.clone(), budget, copies)))
    }

    pub fn object_store_url(&self) -> &ObjectStoreUrl {
        &self.url
    }
}

/// Where a query's result lives: per org or zone, per user (a hash of `sub`),
/// per roles-and-service-clients fingerprint, per run of the query. A change of
/// the caller's access changes the place, so earlier results are out of reach.
pub fn result_path(
    org: &str,
    zone: Option<&str>,
    sub: &str,
    fingerprint: &str,
    query_id: &str,
    attempt: i64,
) -> String {
    use sha2::Digest as _;
    let user = hex::encode(sha2::Sha256::digest(sub.as_bytes()));
    format!(
        "_results/{org}/{}/{}/{fingerprint}/{query_id}-{attempt}.csv",
        zone.unwrap_or("-"),
        &user[..16]
    )
}

/// The forms a query's result is kept in, side by side under one name: the
/// spec's CSV, written while the query runs; an Arrow IPC stream of the same
/// batches with the engine's types (`query.typed_results`); and Parquet, made
/// from the Arrow file when first asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultFormat {
    Csv,
    Arrow,
    Parquet,
}

impl ResultFormat {
    pub const ALL: [ResultFormat; 3] = [
        ResultFormat::Csv,
        ResultFormat::Arrow,
        ResultFormat::Parquet,
    ];

    /// The file name extension: `.arrows` is the Arrow IPC *stream* format's
    /// (`.arrow` names the file format, which this is not).
    pub fn extension(self) -> &'static str {
        match self {
            ResultFormat::Csv => "csv",
            ResultFormat::Arrow => "arrows",
            ResultFormat::Parquet => "parquet",
        }
    }

    /// The registered media type of the format.
    pub fn media_type(self) -> &'static str {
        match self {
            ResultFormat::Csv => "text/csv; charset=utf-8",
            ResultFormat::Arrow => "application/vnd.apache.arrow.stream",
            ResultFormat::Parquet => "application/vnd.apache.parquet",
        }
    }

    /// The format of a result file, by its extension.
    pub fn of_path(path: &str) -> Option<ResultFormat> {
        let extension = path.rsplit_once('.')?.1;
        Self::ALL.into_iter().find(|f| f.extension() == extension)
    }
}

/// The result file in `format` beside the CSV at `csv_path` (a `result_path`).
pub fn result_file_path(csv_path: &str, format: ResultFormat) -> String {
    let stem = csv_path.strip_suffix(".csv").unwrap_or(csv_path);
    format!("{stem}.{}", format.extension())
}

/// Bytes a file on local disk is read in at a time when streamed.
const LOCAL_READ_CHUNK: u64 = 1 << 20;

/// The bytes of the object at `path` (or of `range` in it) as a stream, for
/// downloads. A file on local disk is read a megabyte at a time: object
/// store's own stream reads 8 KiB per blocking call, which caps a download at
/// a few hundred MB/s.
pub async fn object_bytes(
    store: &dyn ObjectStore,
    path: &str,
    range: Option<std::ops::Range<u64>>,
) -> Result<BoxStream<'static, std::io::Result<bytes::Bytes>>, object_store::Error> {
    let options = GetOptions {
        range: range.map(GetRange::Bounded),
        ..GetOptions::default()
    };
    let object = store.get_opts(&ObjectPath::from(path), options).await?;
    let range = object.range.clone();
    match object.payload {
        GetResultPayload::File(file, _) => {
            let chunks = futures::stream::try_unfold(
                (file, range.start, range.end),
                |(mut file, at, end)| async move {
                    if at >= end {
                        return Ok(None);
                    }
                    tokio::task::spawn_blocking(move || {
                        use std::io::{Read as _, Seek as _};
                        file.seek(std::io::SeekFrom::Start(at))?;
                        let length = (end - at).min(LOCAL_READ_CHUNK);
                        let mut buffer = Vec::with_capacity(length as usize);
                        (&mut file).take(length).read_to_end(&mut buffer)?;
                        if buffer.is_empty() {
                            return Err(std::io::ErrorKind::UnexpectedEof.into());
                        }
                        let next = at + buffer.len() as u64;
                        Ok(Some((bytes::Bytes::from(buffer), (file, next, end))))
                    })
                    .await
                    .map_err(std::io::Error::other)?
                },
            );
            Ok(chunks.boxed())
        }
        GetResultPayload::Stream(stream) => Ok(stream.map_err(std::io::Error::other).boxed()),
    }
}

/// Where a data file of a table lives.
pub fn data_file_path(
    database: &str,
    table: &str,
    service_client: i64,
    load_id: &str,
    file_name: &str,
) -> String {
    format!(
        "{database}/{table}/service_client_id={service_client}/svc$load_id={load_id}/{file_name}.parquet"
    )
}

/// A table schema as stored in the catalog: `{"fields":[{"name","type","nullable"}]}`
/// with Arrow's own type names, so it round-trips through `DataType::from_str`.
#[derive(Serialize, Deserialize)]
struct StoredSchema {
    fields: Vec<StoredField>,
}

#[derive(Serialize, Deserialize)]
struct StoredField {
    name: String,
    #[serde(rename = "type")]
    data_type: String,
    nullable: bool,
}

pub fn schema_to_json(schema: &Schema) -> String {
    let stored = StoredSchema {
        fields: schema
            .fields()
            .iter()
            .map(|f| StoredField {
                name: f.name().clone(),
                data_type: f.data_type().to_string(),
                nullable: f.is_nullable(),
            })
            .collect(),
    };
    serde_json::to_string(&stored).expect("schema serialises")
}

pub fn schema_from_json(text: &str) -> Result<SchemaRef, Error> {
    let stored: StoredSchema =
        serde_json::from_str(text).map_err(|e| Error::Schema(e.to_string()))?;
    let fields = stored
        .fields
        .into_iter()
        .map(|f| {
            let data_type = DataType::from_str(&f.data_type)
                .map_err(|e| Error::Schema(format!("{}: {e}", f.name)))?;
            Ok(Field::new(f.name, data_type, f.nullable))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

/// The whole object at `path`, for tests: panics when it cannot be read.
#[cfg(test)]
pub async fn stored_bytes(store: &dyn ObjectStore, path: &str) -> bytes::Bytes {
    store
        .get(&ObjectPath::from(path))
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::TimeUnit;

    #[test]
    fn result_files_sit_beside_the_csv() {
        let csv = result_path("demo", None, "user", "fp", "q1", 2);
        assert!(csv.ends_with("/fp/q1-2.csv"), "{csv}");
        for (format, name) in [
            (ResultFormat::Csv, "q1-2.csv"),
            (ResultFormat::Arrow, "q1-2.arrows"),
            (ResultFormat::Parquet, "q1-2.parquet"),
        ] {
            let path = result_file_path(&csv, format);
            assert_eq!(
                path,
                format!("{}{name}", csv.strip_suffix("q1-2.csv").unwrap())
            );
            assert_eq!(ResultFormat::of_path(&path), Some(format));
        }
        assert_eq!(ResultFormat::of_path("_results/x/q1-2"), None);
    }

    #[tokio::test]
    async fn object_bytes_reads_local_files_and_ranges_whole() {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path()).unwrap();
        let data: Vec<u8> = (0..(5 << 19) + 7).map(|i: u32| (i % 251) as u8).collect();
        let store = lake.object_store();
        store
            .put(&ObjectPath::from("_results/r.arrows"), data.clone().into())
            .await
            .unwrap();
        let read = |range: Option<std::ops::Range<u64>>| {
            let store = store.clone();
            async move {
                object_bytes(store.as_ref(), "_results/r.arrows", range)
                    .await
                    .unwrap()
                    .try_collect::<Vec<_>>()
                    .await
                    .unwrap()
            }
        };
        let chunks = read(None).await;
        assert_eq!(chunks.len(), 3, "a megabyte at a time");
        assert_eq!(chunks.concat(), data);
        let start = (1 << 20) - 10;
        let end = (2 << 20) + 5;
        assert_eq!(
            read(Some(start..end)).await.concat(),
            &data[start as usize..end as usize]
        );
        let missing = object_bytes(store.as_ref(), "_results/none", None).await;
        assert!(matches!(missing, Err(object_store::Error::NotFound { .. })));
    }

    #[test]
    fn schemas_round_trip() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, true),
            Field::new(
                "c",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("d", DataType::Decimal128(12, 2), true),
            Field::new("e", DataType::Date32, true),
        ]);
        let back = schema_from_json(&schema_to_json(&schema)).unwrap();
        assert_eq!(back.as_ref(), &schema);
    }
}
