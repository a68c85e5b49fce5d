//! Loads (spec "Load", "Load states"): a durable row per load, visible to its
//! creator only, and the files requested for it. A load is OPEN while it takes
//! files; a commit (`load::commit`) moves it to PROCESSING, then
//! SUCCESS or FAIL. Every state change is a conditional UPDATE, so two
//! replicas can never both move the same load.

use sqlx::Row as _;

use super::{
    Backend, Error, Finished, JobCaps, Result, Store,
    catalog::{self, LakeTable, NewDataFile},
};

/// The spec's ErrorType values (spec "Load failures"): what a load step's
/// FAIL may name.
pub const LOAD_ERROR_TYPES: &[&str] = &[
    "NoFilesUploaded",
    "ParquetValidation",
    "ServiceClientError",
    "CheckSumError",
    "ValidationError",
    "TooManyPartitions",
    "PermissionsError",
    "InternalError",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadState {
    Open,
    Processing,
    Success,
    Fail,
}

impl LoadState {
    pub fn as_str(self) -> &'static str {
        match self {
            LoadState::Open => "OPEN",
            LoadState::Processing => "PROCESSING",
            LoadState::Success => "SUCCESS",
            LoadState::Fail => "FAIL",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "OPEN" => LoadState::Open,
            "PROCESSING" => LoadState::Processing,
            "SUCCESS" => LoadState::Success,
            "FAIL" => LoadState::Fail,
            other => return Err(Error::Corrupt(format!("load state {other:?}"))),
        })
    }
}

/// What POST /load records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLoad {
    pub id: String,
    pub org: String,
    pub zone: Option<String>,
    pub owner_sub: String,
    pub load_type: String,
    pub table_name: String,
    pub load_as_service_client_id: Option<String>,
    pub partitions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadRecord {
    pub load: NewLoad,
    pub state: LoadState,
    pub error_type: Option<String>,
    /// The FAIL report's ErrorMessages, as JSON.
    pub error_messages_json: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// When the staged files of a load that never committed were removed.
    pub staging_removed_at: Option<i64>,
    /// What the commit asked for: the check_sum object and the caller's access.
    pub check_sum_json: Option<String>,
    pub access_json: Option<String>,
    /// Runs of the commit so far (the first plus reruns after hand-backs).
    pub attempts: i64,
    /// The step the commit's holder is in (`Some("")` before its first step);
    /// read from a claim, set means the previous holder died in that step.
    pub running_step: Option<String>,
}

/// How a commit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadEnd {
    /// The rows: the table to create (if new) and the files, recorded in the
    /// same transaction as SUCCESS.
    Success {
        new_table: Option<LakeTable>,
        table_id: String,
        files: Vec<NewDataFile>,
    },
    Fail {
        error_type: String,
        error_messages_json: String,
    },
}

/// A file asked for with POST /load/{id}/file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadFile {
    pub load_id: String,
    pub file_key: String,
    /// The object key in the upload bucket.
    pub object_key: String,
    pub requested_at: i64,
    pub uploaded_at: Option<i64>,
    pub size_bytes: Option<i64>,
}

const LOAD_COLUMNS: &str = "id, org, zone, owner_sub, load_type, table_name, \
    load_as_service_client_id, partitions_json, state, error_type, error_messages_json, \
    created_at, updated_at, staging_removed_at, check_sum_json, access_json, \
    CAST(attempts AS BIGINT) AS attempts, running_step";

fn load_from_row(row: &sqlx::any::AnyRow) -> Result<LoadRecord> {
    let zone: String = row.try_get("zone")?;
    let partitions_json: String = row.try_get("partitions_json")?;
    let partitions = serde_json::from_str(&partitions_json)
        .map_err(|e| Error::unreadable("load partitions", e))?;
    Ok(LoadRecord {
        load: NewLoad {
            id: row.try_get("id")?,
            org: row.try_get("org")?,
            zone: (!zone.is_empty()).then_some(zone),
            owner_sub: row.try_get("owner_sub")?,
            load_type: row.try_get("load_type")?,
            table_name: row.try_get("table_name")?,
            load_as_service_client_id: row.try_get("load_as_service_client_id")?,
            partitions,
        },
        state: LoadState::parse(&row.try_get::<String, _>("state")?)?,
        error_type: row.try_get("error_type")?,
        error_messages_json: row.try_get("error_messages_json")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        staging_removed_at: row.try_get("staging_removed_at")?,
        check_sum_json: row.try_get("check_sum_json")?,
        access_json: row.try_get("access_json")?,
        attempts: row.try_get("attempts")?,
        running_step: row.try_get("running_step")?,
    })
}

fn file_from_row(row: &sqlx::any::AnyRow) -> Result<LoadFile> {
    Ok(LoadFile {
        load_id: row.try_get("load_id")?,
        file_key: row.try_get("file_key")?,
        object_key: row.try_get("object_key")?,
        requested_at: row.try_get("requested_at")?,
        uploaded_at: row.try_get("uploaded_at")?,
        size_bytes: row.try_get("size_bytes")?,
    })
}

impl Store {
    pub async fn insert_load(&self, load: &NewLoad, now: i64) -> Result<LoadRecord> {
        let partitions = serde_json::to_string(&load.partitions).expect("strings serialise");
        sqlx::query(
            "INSERT INTO loads (id, org, zone, owner_sub, load_type, table_name, \
             load_as_service_client_id, partitions_json, state, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'OPEN', $9, $9)",
        )
        .bind(&load.id)
        .bind(&load.org)
        .bind(load.zone.as_deref().unwrap_or(""))
        .bind(&load.owner_sub)
        .bind(&load.load_type)
        .bind(&load.table_name)
        .bind(load.load_as_service_client_id.as_deref())
        .bind(partitions)
        .bind(now)
        .execute(self.pool())
        .await?;
        self.load(&load.id)
            .await?
            .ok_or_else(|| Error::Corrupt("inserted load vanished".into()))
    }

    pub async fn load(&self, id: &str) -> Result<Option<LoadRecord>> {
        let row = sqlx::query(&format!("SELECT {LOAD_COLUMNS} FROM loads WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(load_from_row).transpose()
    }

    /// Records that a file's descriptor was handed out. The same file_key again
    /// keeps its row and an earlier upload: the object is overwritten only when
    /// the new upload arrives.
    pub async fn request_load_file(&self, file: &LoadFile) -> Result<()> {
        sqlx::query(
            "INSERT INTO load_files (load_id, file_key, object_key, requested_at) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (load_id, file_key) DO UPDATE SET requested_at = excluded.requested_at",
        )
        .bind(&file.load_id)
        .bind(&file.file_key)
        .bind(&file.object_key)
        .bind(file.requested_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Records a finished upload of a requested file, if its load is still
    /// OPEN; false otherwise (the bytes then must not count).
    pub async fn record_upload(
        &self,
        load_id: &str,
        file_key: &str,
        size_bytes: i64,
        now: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE load_files SET uploaded_at = $1, size_bytes = $2 \
             WHERE load_id = $3 AND file_key = $4 \
             AND EXISTS (SELECT 1 FROM loads WHERE id = $3 AND state = 'OPEN')",
        )
        .bind(now)
        .bind(size_bytes)
        .bind(load_id)
        .bind(file_key)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The files requested for a load, by file_key.
    pub async fn load_files(&self, load_id: &str) -> Result<Vec<LoadFile>> {
        let rows = sqlx::query(
            "SELECT load_id, file_key, object_key, requested_at, uploaded_at, size_bytes \
             FROM load_files WHERE load_id = $1 ORDER BY file_key",
        )
        .bind(load_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(file_from_row).collect()
    }

    /// OPEN loads last changed before `before` whose staged files are still
    /// there: the ones to clean up.
    pub async fn stale_open_loads(&self, before: i64, limit: i64) -> Result<Vec<LoadRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {LOAD_COLUMNS} FROM loads WHERE state = 'OPEN' AND updated_at < $1 \
             AND staging_removed_at IS NULL ORDER BY updated_at LIMIT $2"
        ))
        .bind(before)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(load_from_row).collect()
    }

    /// Marks a stale OPEN load's staging as removed and forgets its uploads;
    /// false when the load moved on meanwhile (it was committed or touched).
    pub async fn expire_staging(
        &self,
        load_id: &str,
        updated_before: i64,
        now: i64,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE loads SET staging_removed_at = $1 \
             WHERE id = $2 AND state = 'OPEN' AND updated_at < $3 AND staging_removed_at IS NULL",
        )
        .bind(now)
        .bind(load_id)
        .bind(updated_before)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query(
            "UPDATE load_files SET uploaded_at = NULL, size_bytes = NULL WHERE load_id = $1",
        )
        .bind(load_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Marks a load as used now (a descriptor or an upload), which keeps its
    /// staged files from being cleaned up; a load whose staging was removed
    /// takes files again from here on.
    pub async fn touch_load(&self, load_id: &str, now: i64) -> Result<()> {
        sqlx::query(
            "UPDATE loads SET updated_at = $1, staging_removed_at = NULL \
             WHERE id = $2 AND state = 'OPEN'",
        )
        .bind(now)
        .bind(load_id)
        .execute(self.pool())
        .await?;
        Ok(())
    }
}

impl Store {
    /// OPEN → PROCESSING with what the commit asked for; false when the load
    /// was not OPEN (committed already).
    pub async fn commit_load(
        &self,
        id: &str,
        check_sum_json: &str,
        access_json: &str,
        now: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE loads SET state = 'PROCESSING', check_sum_json = $1, access_json = $2, \
             committed_at = $3, updated_at = $3 WHERE id = $4 AND state = 'OPEN'",
        )
        .bind(check_sum_json)
        .bind(access_json)
        .bind(now)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Claims a PROCESSING load nobody holds (or whose holder's lease ran
    /// out) for `holder` until `lease_until`. At most one worker gets it. The
    /// claim leaves `running_step` as it was: set, the previous holder died.
    /// Fair sharing as for queries (`claim_query`): a load nobody held is
    /// taken only while `holder` commits fewer than `caps.per_org` loads of
    /// its org (`caps.per_caller` of its caller), the org with the fewest
    /// first, then the oldest commit.
    pub async fn claim_load_commit(
        &self,
        holder: &str,
        now: i64,
        lease_until: i64,
        caps: JobCaps,
    ) -> Result<Option<LoadRecord>> {
        let lock = match self.backend() {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let running = |also: &str| {
            format!(
                "(SELECT count(*) FROM loads r WHERE r.state = 'PROCESSING' \
                 AND r.lease_owner = $1 AND r.lease_expires_at >= $3 AND r.org = l.org{also})"
            )
        };
        let of_org = running("");
        let of_caller = running(" AND r.owner_sub = l.owner_sub");
        let sql = format!(
            "UPDATE loads SET lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1 \
             WHERE id = (SELECT l.id FROM loads l WHERE l.state = 'PROCESSING' \
                 AND ((l.lease_owner IS NULL AND {of_org} < $4 AND {of_caller} < $5) \
                      OR l.lease_expires_at < $3) \
                 ORDER BY {of_org}, {of_caller}, l.committed_at, l.id LIMIT 1 {lock}) \
             RETURNING {LOAD_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(holder)
            .bind(lease_until)
            .bind(now)
            .bind(caps.per_org)
            .bind(caps.per_caller)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(load_from_row).transpose()
    }

    /// Records the step the commit `holder` holds is in; false when it no
    /// longer holds it.
    pub async fn mark_load_step(&self, id: &str, holder: &str, step: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE loads SET running_step = $1 \
             WHERE id = $2 AND lease_owner = $3 AND state = 'PROCESSING'",
        )
        .bind(step)
        .bind(id)
        .bind(holder)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives a commit `holder` runs back (a draining replica): nobody holds
    /// it and no step runs, so any replica claims it next and runs it again.
    /// False when `holder` no longer held it.
    pub async fn hand_back_load(&self, id: &str, holder: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE loads SET lease_owner = NULL, lease_expires_at = NULL, running_step = NULL \
             WHERE id = $1 AND lease_owner = $2 AND state = 'PROCESSING'",
        )
        .bind(id)
        .bind(holder)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Extends a commit lease the worker still holds; false when it lost it.
    pub async fn renew_load_lease(&self, id: &str, holder: &str, lease_until: i64) -> Result<bool> {
        self.renew_lease(
            "UPDATE loads SET lease_expires_at = $1 \
             WHERE id = $2 AND lease_owner = $3 AND state = 'PROCESSING'",
            id,
            holder,
            lease_until,
        )
        .await
    }

    /// Ends a commit the holder holds, with its rows (SUCCESS) or its report
    /// (FAIL), in one transaction; `Lost` (nothing written) when it no longer
    /// holds it.
    pub async fn finish_load(
        &self,
        id: &str,
        holder: &str,
        end: &LoadEnd,
        now: i64,
    ) -> Result<Finished> {
        let (state, error_type, messages) = match end {
            LoadEnd::Success { .. } => ("SUCCESS", None, None),
            LoadEnd::Fail {
                error_type,
                error_messages_json,
            } => (
                "FAIL",
                Some(error_type.as_str()),
                Some(error_messages_json.as_str()),
            ),
        };
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE loads SET state = $1, error_type = $2, error_messages_json = $3, \
             updated_at = $4, lease_owner = NULL, lease_expires_at = NULL, running_step = NULL \
             WHERE id = $5 AND lease_owner = $6 AND state = 'PROCESSING'",
        )
        .bind(state)
        .bind(error_type)
        .bind(messages)
        .bind(now)
        .bind(id)
        .bind(holder)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(Finished::Lost);
        }
        if let LoadEnd::Success {
            new_table,
            table_id,
            files,
        } = end
        {
            if let Some(table) = new_table {
                catalog::insert_table(&mut tx, table).await?;
            }
            catalog::insert_files(&mut tx, table_id, files, now).await?;
        }
        tx.commit().await?;
        Ok(Finished::Recorded)
    }
}
