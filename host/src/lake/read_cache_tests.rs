//! Unit tests of the read cache: ranges kept, evicted least recently used
//! first, admitted to a full cache only when asked for more often than
//! what they would evict, and counted under the cap.

use object_store::{ObjectStoreExt as _, memory::InMemory};

use super::*;

const PATH: &str = "db/table/file.parquet";

/// What one kept range of `len` bytes of `PATH` costs.
fn entry(len: usize) -> usize {
    cost(&Path::from(PATH), &Bytes::from(vec![0; len]))
}

/// The request counts' memory in a cache of a small budget.
fn sketch() -> usize {
    ReadFrequency::for_budget(0).bytes()
}

/// A cache of `budget` over an in-memory store holding `PATH` (bytes
/// 0..=255 repeated), and the store itself.
async fn cache_of(budget: usize, copies: bool) -> (ReadCache, Arc<InMemory>, Path) {
    let inner = Arc::new(InMemory::new());
    let path = Path::from(PATH);
    let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    inner.put(&path, data.into()).await.unwrap();
    (ReadCache::new(inner.clone(), budget, copies), inner, path)
}

async fn cache(budget: usize) -> (ReadCache, Arc<InMemory>, Path) {
    cache_of(budget, false).await
}

/// One range read through `cache`.
async fn read_one(cache: &ReadCache, path: &Path, range: Range<u64>) -> Result<Bytes> {
    let mut read = cache.get_ranges(path, std::slice::from_ref(&range)).await?;
    Ok(read.remove(0))
}

fn bytes_of(range: &Range<u64>) -> Bytes {
    (range.start..range.end).map(|i| i as u8).collect()
}

#[tokio::test]
async fn a_range_read_again_comes_from_memory_in_the_order_asked() {
    let (cache, inner, path) = cache(8000).await;
    let first = [0..100, 500..600];
    assert_eq!(
        cache.get_ranges(&path, &first).await.unwrap(),
        first.iter().map(bytes_of).collect::<Vec<_>>()
    );
    assert_eq!(cache.kept_bytes(), sketch() + 2 * entry(100));

    // The file is gone from the store: kept ranges still answer, in the
    // order asked, and a range not kept goes to the store and fails there.
    inner.delete(&path).await.unwrap();
    let again = [500..600, 0..100];
    assert_eq!(
        cache.get_ranges(&path, &again).await.unwrap(),
        again.iter().map(bytes_of).collect::<Vec<_>>()
    );
    let error = cache
        .get_ranges(&path, &[0..100, 100..200])
        .await
        .unwrap_err();
    assert!(
        matches!(error, object_store::Error::NotFound { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn the_least_recently_used_range_goes_first_to_stay_under_the_budget() {
    let budget = sketch() + 8 * entry(100);
    let (cache, inner, path) = cache(budget).await;
    let ranges: Vec<Range<u64>> = (0..8).map(|i| i * 100..i * 100 + 100).collect();
    cache.get_ranges(&path, &ranges).await.unwrap();
    assert_eq!(cache.kept_bytes(), budget);
    // Range 0 is used again, so range 1 is now the oldest. A new range
    // asked for once is not kept (asked as often as range 1); asked for a
    // second time, it takes range 1's place.
    read_one(&cache, &path, 0..100).await.unwrap();
    read_one(&cache, &path, 1000..1100).await.unwrap();
    assert_eq!(cache.kept_bytes(), budget);
    read_one(&cache, &path, 1000..1100).await.unwrap();
    assert_eq!(cache.kept_bytes(), budget);

    inner.delete(&path).await.unwrap();
    assert!(read_one(&cache, &path, 0..100).await.is_ok());
    assert!(read_one(&cache, &path, 1000..1100).await.is_ok());
    assert!(read_one(&cache, &path, 200..300).await.is_ok());
    assert!(read_one(&cache, &path, 100..200).await.is_err());
}

#[tokio::test]
async fn a_scan_larger_than_the_cache_leaves_the_ranges_asked_again() {
    let budget = sketch() + 4 * entry(100);
    let (cache, inner, path) = cache(budget).await;
    let hot: Vec<Range<u64>> = (0..4).map(|i| i * 100..i * 100 + 100).collect();
    for _ in 0..2 {
        cache.get_ranges(&path, &hot).await.unwrap();
    }
    // A scan of 30 ranges, each asked once, twice over: none is asked more
    // often than the kept ones.
    let scan: Vec<Range<u64>> = (4..34).map(|i| i * 100..i * 100 + 100).collect();
    for _ in 0..2 {
        cache.get_ranges(&path, &scan).await.unwrap();
    }
    assert_eq!(cache.kept_bytes(), budget);
    inner.delete(&path).await.unwrap();
    assert!(cache.get_ranges(&path, &hot).await.is_ok());
    assert!(read_one(&cache, &path, 400..500).await.is_err());
}

#[tokio::test]
async fn a_range_over_an_eighth_of_the_budget_or_empty_is_never_kept() {
    let (cache, inner, path) = cache(8000).await;
    cache.get_ranges(&path, &[0..100, 100..1101]).await.unwrap();
    assert_eq!(cache.kept_bytes(), sketch() + entry(100));
    assert!(!cache.keeps(&Bytes::new()));
    inner.delete(&path).await.unwrap();
    assert!(read_one(&cache, &path, 0..100).await.is_ok());
    assert!(read_one(&cache, &path, 100..1101).await.is_err());
}

#[tokio::test]
async fn ranges_that_may_be_slices_of_a_larger_read_are_kept_as_copies() {
    for copies in [false, true] {
        let (cache, _, path) = cache_of(8000, copies).await;
        let read = read_one(&cache, &path, 0..100).await.unwrap();
        let kept = read_one(&cache, &path, 0..100).await.unwrap();
        assert_eq!(kept, read);
        assert_eq!(kept.as_ptr() == read.as_ptr(), !copies, "copies: {copies}");
    }
}

#[test]
fn a_budget_of_nothing_makes_no_cache() {
    let dir = tempfile::tempdir().unwrap();
    let lake = crate::lake::Lake::local(dir.path()).unwrap();
    assert!(lake.read_cache(0).is_none());
    assert!(lake.read_cache(1).is_some());
}
