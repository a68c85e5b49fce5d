//! Byte ranges of lake files kept in memory after a query read them, so the
//! next query reading the same pages takes them from memory: no read, no
//! copy out of the page cache (from disk) and no request (from S3).
//!
//! Lake files never change in place (a load writes new paths, a rewrite
//! retires old ones), so a kept range never goes stale: a path read again
//! holds the same bytes. A kept range of a file deleted since is only
//! memory until it is evicted, least recently used first, to keep the total
//! under the budget (`query.read_cache_bytes`).
//!
//! A range enters a full cache only when it was asked for more often
//! lately than the range it would evict (TinyLFU's admission; the counts
//! are `read_frequency.rs`'s, whose fixed memory is counted in the budget).
//! So a scan larger than the budget, each of its ranges asked once, leaves
//! the cache as it found it, rather than replacing every kept range with
//! one nobody asks for again; ranges asked for again and again (a table's
//! small files, a point lookup's pages) stay.
//!
//! Only ranged reads (`get_ranges`: the parquet reader's pages and column
//! chunks) are kept, each range as asked; a range of more than an eighth of
//! the budget is never kept, so one large read cannot empty the cache, nor
//! is an empty one. Each kept range counts its bytes, its path and its
//! bookkeeping (`ENTRY_BYTES`) against the budget. On S3, object_store reads
//! nearby ranges together and answers slices of that one read: a kept slice
//! would hold the whole read, so there a range is kept as a copy (on disk
//! each range is read into a buffer of its own, kept as it is). Everything
//! else goes to the lake's store unchanged.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    ops::Range,
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result, path::Path,
};

use super::read_frequency::ReadFrequency;
use crate::observability::metrics;

/// A kept range: the file and the bytes asked for.
type Key = (Path, u64, u64);

/// What a kept range costs beyond its bytes and its path: the two maps'
/// entries and the `Bytes` handle.
const ENTRY_BYTES: usize = 128;

/// What keeping `bytes` of the file at `path` costs against the budget.
fn cost(path: &Path, bytes: &Bytes) -> usize {
    bytes.len() + path.as_ref().len() + ENTRY_BYTES
}

/// The lake's store with recent ranged reads kept in memory.
pub struct ReadCache {
    inner: Arc<dyn ObjectStore>,
    budget: usize,
    /// Whether the inner store's ranges may be slices of larger reads.
    copies: bool,
    kept: Mutex<Kept>,
}

/// The kept ranges, their order of last use, and how often ranges were
/// asked for.
struct Kept {
    ranges: HashMap<Key, (Bytes, u64)>,
    by_use: BTreeMap<u64, Key>,
    /// What the kept ranges cost (`cost`).
    bytes: usize,
    /// The budget less the sketch's memory: what the kept ranges may cost.
    room: usize,
    clock: u64,
    frequency: ReadFrequency,
}

impl Kept {
    fn new(budget: usize) -> Self {
        let frequency = ReadFrequency::for_budget(budget);
        Self {
            ranges: HashMap::new(),
            by_use: BTreeMap::new(),
            bytes: 0,
            room: budget.saturating_sub(frequency.bytes()),
            clock: 0,
            frequency,
        }
    }

    /// The kept range of `key`, if any; the request is counted.
    fn get(&mut self, key: &Key) -> Option<Bytes> {
        self.frequency.count(key);
        self.clock += 1;
        let clock = self.clock;
        let (bytes, used) = self.ranges.get_mut(key)?;
        self.by_use.remove(used);
        *used = clock;
        self.by_use.insert(clock, key.clone());
        Some(bytes.clone())
    }

    /// Keeps `bytes` of `key` when there is room, or when it was asked for
    /// more often than the least recently used range, which then goes (with
    /// as many after it as the room needs).
    fn insert(&mut self, key: Key, bytes: Bytes) {
        if self.ranges.contains_key(&key) {
            return;
        }
        let added = cost(&key.0, &bytes);
        if self.bytes + added > self.room {
            let victim = self.by_use.first_key_value().map(|(_, oldest)| oldest);
            let asked = |key: &Key| self.frequency.estimate(key);
            if victim.is_none_or(|victim| asked(&key) <= asked(victim)) {
                return;
            }
        }
        while self.bytes + added > self.room {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some((evicted, _)) = self.ranges.remove(&oldest) {
                self.bytes -= cost(&oldest.0, &evicted);
            }
        }
        self.clock += 1;
        self.bytes += added;
        self.by_use.insert(self.clock, key.clone());
        self.ranges.insert(key, (bytes, self.clock));
    }
}

impl ReadCache {
    /// `inner` with up to `budget` bytes of ranges kept; `copies` when its
    /// ranges may be slices of larger reads (S3), so each is kept as a copy.
    pub fn new(inner: Arc<dyn ObjectStore>, budget: usize, copies: bool) -> Self {
        Self {
            inner,
            budget,
            copies,
            kept: Mutex::new(Kept::new(budget)),
        }
    }

    /// What the kept ranges cost now (their bytes, paths and bookkeeping,
    /// and the request counts).
    pub fn kept_bytes(&self) -> usize {
        let kept = self.lock();
        kept.bytes + kept.frequency.bytes()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        crate::locks::locked(&self.kept)
    }

    fn keeps(&self, bytes: &Bytes) -> bool {
        !bytes.is_empty() && bytes.len() <= self.budget / 8
    }

    /// `bytes` as the cache holds them: a copy when they may be a slice.
    fn to_keep(&self, bytes: &Bytes) -> Bytes {
        if self.copies {
            Bytes::copy_from_slice(bytes)
        } else {
            bytes.clone()
        }
    }
}

impl fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadCache")
            .field("inner", &self.inner)
            .field("budget", &self.budget)
            .finish()
    }
}

impl fmt::Display for ReadCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReadCache({})", self.inner)
    }
}

#[async_trait::async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for ReadCache {
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let key = |range: &Range<u64>| (location.clone(), range.start, range.end);
        let mut found: Vec<Option<Bytes>> = {
            let mut kept = self.lock();
            ranges.iter().map(|range| kept.get(&key(range))).collect()
        };
        let missing: Vec<Range<u64>> = ranges
            .iter()
            .zip(&found)
            .filter(|(_, found)| found.is_none())
            .map(|(range, _)| range.clone())
            .collect();
        let hit: usize = found.iter().flatten().map(Bytes::len).sum();
        if missing.is_empty() {
            metrics::read_cache(hit as u64, 0);
            return Ok(found.into_iter().flatten().collect());
        }
        let read = self.inner.get_ranges(location, &missing).await?;
        if read.len() != missing.len() {
            return Err(object_store::Error::Generic {
                store: "ReadCache",
                source: format!("{} ranges read for {} asked", read.len(), missing.len()).into(),
            });
        }
        let mut read = read.into_iter();
        let mut kept = self.lock();
        for (range, slot) in ranges.iter().zip(found.iter_mut()) {
            if slot.is_none() {
                let Some(bytes) = read.next() else { break };
                if self.keeps(&bytes) {
                    kept.insert(key(range), self.to_keep(&bytes));
                }
                *slot = Some(bytes);
            }
        }
        drop(kept);
        let all: usize = found.iter().flatten().map(Bytes::len).sum();
        metrics::read_cache(hit as u64, (all - hit) as u64);
        Ok(found.into_iter().flatten().collect())
    }

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
        self.inner.get_opts(location, options).await
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
#[path = "read_cache_tests.rs"]
mod tests;
