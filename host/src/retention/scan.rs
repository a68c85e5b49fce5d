//! The lake scan: one listing of the lake's object store that counts the
//! bytes of each kind of storage and deletes orphans, in batches:
//! - a data file (`.parquet` outside the `_`-named folders) that no table
//!   lists and the retired-file sweep does not own: a write that died before
//!   its catalog commit (a kill -9, a lost replica);
//! - a result file (under `_results/`) whose query no longer keeps it: a
//!   retried attempt's, or one whose delete failed;
//! - a staged upload (under `_staging/`) of a load that no longer waits for
//!   it (ended, swept, or gone), whose removal at the commit's end failed.
//!
//! Only files last written more than `retention.orphan_age_s` ago are
//! candidates (the files' own times, on the process's clock, as
//! `crate::clock` says): a write still running is younger than that, since
//! the age is checked against the longest write at config load. Deployed
//! pipeline components are counted, not swept (an org may roll back to any
//! version).

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use object_store::{ObjectStoreExt as _, path::Path as ObjectPath};

use super::{SweepError, Sweeper};
use crate::{
    lake::ResultFormat,
    observability::retention::{self as figures, Stored, Swept},
};

/// Bytes stored, by kind (`lakehost_storage_bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageBytes {
    /// Lake tables' data files.
    pub lake: u64,
    /// Query results in the lake.
    pub results: u64,
    /// Small results kept in job rows.
    pub results_in_store: u64,
    /// Uploads staged for loads.
    pub staged: u64,
    /// Pipeline components deployed over the API.
    pub pipeline: u64,
}

impl StorageBytes {
    pub fn of(&self, kind: Stored) -> u64 {
        match kind {
            Stored::Lake => self.lake,
            Stored::Results => self.results,
            Stored::ResultsInStore => self.results_in_store,
            Stored::Staged => self.staged,
            Stored::Pipeline => self.pipeline,
        }
    }

    /// Sets the `lakehost_storage_bytes` gauges.
    pub fn publish(&self) {
        for kind in Stored::ALL {
            figures::storage_bytes(kind, self.of(kind));
        }
    }
}

/// What one scan found and removed.
#[derive(Debug, Default)]
pub(super) struct Scan {
    pub bytes: StorageBytes,
    pub orphan_files: u64,
    pub orphan_results: u64,
    pub orphan_staged: u64,
}

/// Where an object of the lake belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Lake,
    Results,
    Staged,
    Pipeline,
    /// Another of lakehost's own folders (the readiness probe's).
    Other,
}

fn place_of(path: &str) -> Place {
    let top = path.split('/').next().unwrap_or(path);
    match top {
        "_results" => Place::Results,
        "_staging" => Place::Staged,
        "_pipeline" => Place::Pipeline,
        top if top.starts_with('_') => Place::Other,
        _ => Place::Lake,
    }
}

/// The CSV path of the result a result file belongs to (`None`: not a
/// result file's name).
fn result_csv_of(path: &str) -> Option<String> {
    ResultFormat::of_path(path)?;
    let (stem, _) = path.rsplit_once('.')?;
    Some(format!("{stem}.csv"))
}

/// The load a staged object belongs to: `_staging/<org>/<zone>/<load>/..`
/// or `_staging/_parts/<load>/..`.
fn staged_load_of(path: &str) -> Option<String> {
    let mut segments = path.split('/').skip(1);
    let load = match segments.next()? {
        "_parts" => segments.next()?,
        _org => segments.nth(1)?,
    };
    // A load's folder, never a file directly under it.
    segments.next()?;
    (!load.is_empty()).then(|| load.to_string())
}

/// Candidates of one kind, checked against the store a batch at a time.
struct Candidates {
    kind: Swept,
    /// Path, size, and the path the store is asked about.
    files: Vec<(String, u64, String)>,
}

impl Sweeper {
    pub(super) async fn scan(&self) -> Result<Scan, SweepError> {
        let objects = self.parts.lake.object_store();
        let cutoff: DateTime<Utc> =
            (SystemTime::now() - Duration::from_secs(self.config.orphan_age_s)).into();
        let batch = usize::try_from(self.config.batch).unwrap_or(500);
        let mut scan = Scan::default();
        let mut files = Candidates::new(Swept::OrphanFiles);
        let mut results = Candidates::new(Swept::OrphanResults);
        let mut staged = Candidates::new(Swept::OrphanStaged);
        let mut listing = objects.list(None);
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| SweepError::new(Swept::OrphanFiles, e))?;
            let path = meta.location.to_string();
            let old = meta.last_modified < cutoff;
            match place_of(&path) {
                Place::Lake => {
                    scan.bytes.lake += meta.size;
                    if old && path.ends_with(".parquet") {
                        files.files.push((path.clone(), meta.size, path));
                    }
                }
                Place::Results => {
                    scan.bytes.results += meta.size;
                    if let Some(csv) = result_csv_of(&path).filter(|_| old) {
                        results.files.push((path, meta.size, csv));
                    }
                }
                Place::Staged => {
                    scan.bytes.staged += meta.size;
                    if let Some(load) = staged_load_of(&path).filter(|_| old) {
                        staged.files.push((path, meta.size, load));
                    }
                }
                Place::Pipeline => scan.bytes.pipeline += meta.size,
                Place::Other => {}
            }
            for candidates in [&mut files, &mut results, &mut staged] {
                if candidates.files.len() >= batch {
                    self.remove_orphans(candidates, &mut scan).await?;
                }
            }
        }
        self.remove_orphans(&mut files, &mut scan).await?;
        self.remove_orphans(&mut results, &mut scan).await?;
        self.remove_orphans(&mut staged, &mut scan).await?;
        let in_rows = self
            .parts
            .store
            .result_bytes_in_rows()
            .await
            .map_err(|e| SweepError::new(Swept::Results, e))?;
        scan.bytes.results_in_store = u64::try_from(in_rows).unwrap_or(0);
        Ok(scan)
    }

    /// Deletes the candidates the store no longer names; empties the list.
    async fn remove_orphans(
        &self,
        candidates: &mut Candidates,
        scan: &mut Scan,
    ) -> Result<(), SweepError> {
        let files = std::mem::take(&mut candidates.files);
        if files.is_empty() {
            return Ok(());
        }
        let kind = candidates.kind;
        let asked: Vec<String> = files.iter().map(|(_, _, asked)| asked.clone()).collect();
        let store = &self.parts.store;
        let named = match kind {
            Swept::OrphanResults => store.kept_result_paths(&asked).await,
            Swept::OrphanStaged => store.loads_keeping_staging(&asked).await,
            _ => store.named_lake_paths(&asked).await,
        }
        .map_err(|e| SweepError::new(kind, e))?;
        let objects = self.parts.lake.object_store();
        for (path, size, asked) in files {
            if named.contains(&asked) {
                continue;
            }
            match objects.delete(&ObjectPath::from(path.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    tracing::warn!(%path, error = %e, "could not delete an orphan file");
                    continue;
                }
            }
            tracing::info!(%path, kind = kind.as_str(), "orphan file deleted");
            match kind {
                Swept::OrphanResults => {
                    scan.orphan_results += 1;
                    scan.bytes.results = scan.bytes.results.saturating_sub(size);
                }
                Swept::OrphanStaged => {
                    scan.orphan_staged += 1;
                    scan.bytes.staged = scan.bytes.staged.saturating_sub(size);
                }
                _ => {
                    scan.orphan_files += 1;
                    scan.bytes.lake = scan.bytes.lake.saturating_sub(size);
                }
            }
        }
        Ok(())
    }
}

impl Candidates {
    fn new(kind: Swept) -> Self {
        Self {
            kind,
            files: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_by_the_top_folder() {
        assert_eq!(
            place_of("db1/trips/service_client_id=1/a.parquet"),
            Place::Lake
        );
        assert_eq!(place_of("_results/demo/-/u/f/q-1.csv"), Place::Results);
        assert_eq!(place_of("_staging/demo/-/l/f.parquet"), Place::Staged);
        assert_eq!(place_of("_pipeline/components/ab.wasm"), Place::Pipeline);
        assert_eq!(place_of("_readyz/probe"), Place::Other);
    }

    #[test]
    fn result_files_belong_to_their_csv() {
        for path in [
            "_results/a/q-1.csv",
            "_results/a/q-1.arrows",
            "_results/a/q-1.parquet",
        ] {
            assert_eq!(result_csv_of(path).as_deref(), Some("_results/a/q-1.csv"));
        }
        assert_eq!(result_csv_of("_results/a/q-1.tmp"), None);
        assert_eq!(result_csv_of("_results/a/q-1"), None);
    }

    #[test]
    fn staged_uploads_belong_to_their_load() {
        let load = |path| staged_load_of(path);
        assert_eq!(
            load("_staging/demo/-/l1/part_1.parquet").as_deref(),
            Some("l1")
        );
        assert_eq!(load("_staging/demo/lab/l2/a/b").as_deref(), Some("l2"));
        assert_eq!(load("_staging/_parts/l3/upload-1/2").as_deref(), Some("l3"));
        assert_eq!(load("_staging/demo/-/l1"), None);
        assert_eq!(load("_staging/_parts/l3"), None);
    }
}
