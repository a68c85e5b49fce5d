//! The retired-file sweeper. A DROP TABLE or a daily refresh's swap unlists a
//! table's files in the catalog and, in the same transaction, records them in
//! `retired_files`; this sweeper deletes them from the object store once
//! `grace` (the query time limit) has passed, so a query planned on the old
//! file list just before still reads it to its end. The retention sweep
//! (`retention/`) runs this module's sweeps on one replica at a time;
//! deleting a file twice would be harmless anyway, and a file is forgotten
//! only once it is gone.
//!
//! It also removes what a killed process left half-written on a local-disk
//! lake: the object store writes `<path>#<n>` and renames it when the write
//! completes, and hides such files from listings, so nothing else ever sees
//! them. One untouched for `INTERRUPTED_WRITE_AGE` belongs to no live write.

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, SystemTime},
};

use object_store::{ObjectStoreExt as _, path::Path as ObjectPath};

use crate::{clock::SharedClock, lake::Lake, store::Store};

/// Retired files looked at per store round trip.
const BATCH: i64 = 500;

/// A temporary file untouched this long is a killed write's: a live write
/// touches its file as its rows arrive, and no commit, query or daily run
/// leaves one partition's file idle for a day.
pub const INTERRUPTED_WRITE_AGE: Duration = Duration::from_secs(24 * 3600);

pub struct RetiredFileSweeper {
    store: Store,
    lake: Lake,
    clock: SharedClock,
    grace: Duration,
}

impl RetiredFileSweeper {
    pub fn new(store: Store, lake: Lake, clock: SharedClock, grace: Duration) -> Arc<Self> {
        Arc::new(Self {
            store,
            lake,
            clock,
            grace,
        })
    }

    /// Deletes the files retired more than `grace` ago; returns how many are
    /// gone. A file the object store refuses to delete stays recorded and is
    /// tried again on the next sweep.
    pub async fn sweep(&self) -> Result<usize, crate::store::Error> {
        let grace = i64::try_from(self.grace.as_micros()).unwrap_or(i64::MAX);
        let retired_before = self.clock.now().timestamp_micros().saturating_sub(grace);
        let objects = self.lake.object_store();
        let mut swept = 0;
        loop {
            let due = self.store.retired_files_due(retired_before, BATCH).await?;
            if due.is_empty() {
                return Ok(swept);
            }
            let mut gone = Vec::with_capacity(due.len());
            for path in &due {
                match objects.delete(&ObjectPath::from(path.as_str())).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => gone.push(path.clone()),
                    Err(e) => tracing::warn!(%path, error = %e, "could not delete a retired file"),
                }
            }
            self.store.forget_retired_files(&gone).await?;
            swept += gone.len();
            // A short batch was the last; a batch with failures is left for
            // the next sweep rather than read again at once.
            if due.len() < BATCH as usize || gone.len() < due.len() {
                return Ok(swept);
            }
        }
    }

    /// Deletes the temporary files of interrupted writes (module header)
    /// last modified before `older_than`; returns how many. Nothing to do
    /// for a lake on S3, whose unfinished multipart uploads the bucket's
    /// lifecycle rule aborts.
    pub async fn sweep_interrupted_writes(&self, older_than: SystemTime) -> std::io::Result<usize> {
        let Some(root) = self.lake.local_root().map(Path::to_path_buf) else {
            return Ok(0);
        };
        tokio::task::spawn_blocking(move || remove_interrupted_writes(&root, older_than))
            .await
            .map_err(std::io::Error::other)?
    }
}

/// `name#<digits>`: the object store's temporary name for a write in progress.
fn is_temporary_write(name: &str) -> bool {
    name.rsplit_once('#').is_some_and(|(stem, suffix)| {
        !stem.is_empty() && !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit())
    })
}

fn remove_interrupted_writes(dir: &Path, older_than: SystemTime) -> std::io::Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            removed += remove_interrupted_writes(&entry.path(), older_than)?;
        } else if kind.is_file()
            && is_temporary_write(&entry.file_name().to_string_lossy())
            && entry.metadata()?.modified()? < older_than
        {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_write_names() {
        assert!(is_temporary_write("part-0.parquet#1"));
        assert!(is_temporary_write("x.csv#12"));
        for kept in ["part-0.parquet", "a#b", "a#", "#1", "a#1b"] {
            assert!(!is_temporary_write(kept), "{kept}");
        }
    }
}
