//! The retention sweeps' side of the store (issue 49, `retention/`): the
//! lease that lets one replica sweep at a time, the rows whose time is up,
//! and which lake paths the catalog or a kept result still names. Every
//! statement is bounded by a `limit`; the sweeps call again for the rest.

use std::collections::HashSet;

use sqlx::Row as _;

use super::{Result, Store};

/// A query whose result's time is up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueResult {
    pub id: String,
    /// The result's CSV path (its other forms sit beside it).
    pub result_path: String,
    /// Whether a newer query answers with the same files (result reuse):
    /// then only this row is marked, and the files stay for the newer one.
    pub shared: bool,
}

/// Rows of each kind, for the sweeps' figures and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowCounts {
    pub queries: i64,
    pub loads: i64,
    pub load_files: i64,
    pub daily_runs: i64,
    pub lake_files: i64,
    pub retired_files: i64,
    pub idempotency_keys: i64,
}

/// `$first, $first+1, ...`: `n` placeholders for an `IN (...)` list.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Store {
    /// Takes or renews the lease `name` for `holder` until `until`: true
    /// when `holder` has it (it held it, or nobody held it after `now`).
    pub async fn take_sweep_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<bool> {
        let taken = sqlx::query(
            "INSERT INTO sweep_leases (name, holder, held_until) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             held_until = excluded.held_until \
             WHERE sweep_leases.holder = excluded.holder OR sweep_leases.held_until < $4",
        )
        .bind(name)
        .bind(holder)
        .bind(until)
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(taken.rows_affected() == 1)
    }

    /// Gives the lease `name` back if `holder` has it (a draining replica).
    pub async fn release_sweep_lease(&self, name: &str, holder: &str) -> Result<()> {
        sqlx::query("DELETE FROM sweep_leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Up to `limit` finished queries that ended before `before` and still
    /// keep a result, oldest first.
    pub async fn results_due(&self, before: i64, limit: i64) -> Result<Vec<DueResult>> {
        let rows = sqlx::query(
            "SELECT q.id, q.result_path, CAST(CASE WHEN EXISTS (SELECT 1 FROM query_jobs n \
               WHERE n.result_path = q.result_path AND n.id <> q.id \
               AND n.result_expired_at IS NULL AND n.completed_at >= $1) \
             THEN 1 ELSE 0 END AS BIGINT) AS shared \
             FROM query_jobs q WHERE q.completed_at < $1 AND q.result_expired_at IS NULL \
             AND q.result_path IS NOT NULL ORDER BY q.completed_at LIMIT $2",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(DueResult {
                    id: row.try_get("id")?,
                    result_path: row.try_get("result_path")?,
                    shared: row.try_get::<i64, _>("shared")? != 0,
                })
            })
            .collect()
    }

    /// Marks the results of `ids` deleted at `now` and drops the forms their
    /// rows kept (their files are already gone).
    pub async fn expire_results(&self, ids: &[String], now: i64) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "UPDATE query_jobs SET result_expired_at = $1, result_csv = NULL, result_arrow = NULL \
             WHERE id IN ({})",
            placeholders(2, ids.len())
        );
        let mut query = sqlx::query(&sql).bind(now);
        for id in ids {
            query = query.bind(id);
        }
        query.execute(self.pool()).await?;
        Ok(())
    }

    /// Deletes up to `limit` query rows that ended before `before` and keep
    /// no result; returns how many.
    pub async fn delete_old_queries(&self, before: i64, limit: i64) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM query_jobs WHERE id IN (SELECT id FROM query_jobs \
             WHERE completed_at < $1 AND (result_path IS NULL OR result_expired_at IS NOT NULL) \
             ORDER BY completed_at LIMIT $2)",
        )
        .bind(before)
        .bind(limit)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Deletes up to `limit` loads last changed before `before` that hold
    /// nothing any more (ended, or OPEN with their staging removed), with
    /// their files' rows and what judged them; returns how many.
    pub async fn delete_old_loads(&self, before: i64, limit: i64) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let ids: Vec<String> = sqlx::query(
            "SELECT id FROM loads WHERE updated_at < $1 AND state <> 'PROCESSING' \
             AND (state <> 'OPEN' OR staging_removed_at IS NOT NULL) \
             ORDER BY updated_at LIMIT $2",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|row| row.try_get("id"))
        .collect::<std::result::Result<_, _>>()?;
        if ids.is_empty() {
            tx.rollback().await?;
            return Ok(0);
        }
        let list = placeholders(1, ids.len());
        let mut deleted = 0;
        for table in ["load_pipelines", "shadow_runs", "load_files", "loads"] {
            let column = if table == "loads" { "id" } else { "load_id" };
            let sql = format!("DELETE FROM {table} WHERE {column} IN ({list})");
            let mut query = sqlx::query(&sql);
            for id in &ids {
                query = query.bind(id);
            }
            deleted = query.execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
        Ok(deleted)
    }

    /// Deletes up to `limit` daily runs that stopped before `before`, never
    /// an org's latest (`execution_status?mode=latest` keeps answering);
    /// returns how many.
    pub async fn delete_old_daily_runs(&self, before: i64, limit: i64) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM daily_runs WHERE name IN (SELECT d.name FROM daily_runs d \
             WHERE d.stopped_at < $1 AND d.status <> 'RUNNING' \
             AND d.started_at < (SELECT MAX(l.started_at) FROM daily_runs l WHERE l.org = d.org) \
             ORDER BY d.stopped_at LIMIT $2)",
        )
        .bind(before)
        .bind(limit)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Which of `paths` a table lists or the retired-file sweep still owns.
    pub async fn named_lake_paths(&self, paths: &[String]) -> Result<HashSet<String>> {
        if paths.is_empty() {
            return Ok(HashSet::new());
        }
        let list = placeholders(1, paths.len());
        let sql = format!(
            "SELECT path FROM lake_files WHERE path IN ({list}) \
             UNION SELECT path FROM retired_files WHERE path IN ({list})"
        );
        let mut query = sqlx::query(&sql);
        for path in paths {
            query = query.bind(path);
        }
        let rows = query.fetch_all(self.pool()).await?;
        rows.iter().map(|row| Ok(row.try_get("path")?)).collect()
    }

    /// Which of `csv_paths` (results' CSV paths) a query still keeps.
    pub async fn kept_result_paths(&self, csv_paths: &[String]) -> Result<HashSet<String>> {
        if csv_paths.is_empty() {
            return Ok(HashSet::new());
        }
        let sql = format!(
            "SELECT DISTINCT result_path FROM query_jobs WHERE result_expired_at IS NULL \
             AND result_path IN ({})",
            placeholders(1, csv_paths.len())
        );
        let mut query = sqlx::query(&sql);
        for path in csv_paths {
            query = query.bind(path);
        }
        let rows = query.fetch_all(self.pool()).await?;
        rows.iter()
            .map(|row| Ok(row.try_get("result_path")?))
            .collect()
    }

    /// Which of `load_ids` still wait for their staged uploads (OPEN with
    /// their staging kept, or PROCESSING).
    pub async fn loads_keeping_staging(&self, load_ids: &[String]) -> Result<HashSet<String>> {
        if load_ids.is_empty() {
            return Ok(HashSet::new());
        }
        let sql = format!(
            "SELECT id FROM loads WHERE id IN ({}) AND (state = 'PROCESSING' \
             OR (state = 'OPEN' AND staging_removed_at IS NULL))",
            placeholders(1, load_ids.len())
        );
        let mut query = sqlx::query(&sql);
        for id in load_ids {
            query = query.bind(id);
        }
        let rows = query.fetch_all(self.pool()).await?;
        rows.iter().map(|row| Ok(row.try_get("id")?)).collect()
    }

    /// The bytes of results kept in job rows instead of the lake.
    pub async fn result_bytes_in_rows(&self) -> Result<i64> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(length(result_csv)), 0) \
             + COALESCE(SUM(length(result_arrow)), 0) AS BIGINT) AS bytes FROM query_jobs",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(row.try_get("bytes")?)
    }

    /// How many rows of each kind the store holds.
    pub async fn row_counts(&self) -> Result<RowCounts> {
        let row = sqlx::query(
            "SELECT (SELECT count(*) FROM query_jobs) AS queries, \
               (SELECT count(*) FROM loads) AS loads, \
               (SELECT count(*) FROM load_files) AS load_files, \
               (SELECT count(*) FROM daily_runs) AS daily_runs, \
               (SELECT count(*) FROM lake_files) AS lake_files, \
               (SELECT count(*) FROM retired_files) AS retired_files, \
               (SELECT count(*) FROM idempotency_keys) AS idempotency_keys",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(RowCounts {
            queries: row.try_get("queries")?,
            loads: row.try_get("loads")?,
            load_files: row.try_get("load_files")?,
            daily_runs: row.try_get("daily_runs")?,
            lake_files: row.try_get("lake_files")?,
            retired_files: row.try_get("retired_files")?,
            idempotency_keys: row.try_get("idempotency_keys")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::placeholders;

    #[test]
    fn placeholders_number_from_the_first() {
        assert_eq!(placeholders(2, 3), "$2, $3, $4");
        assert_eq!(placeholders(1, 1), "$1");
    }
}
