//! The metadata store: the lake catalog and durable jobs, in SQLite (a file
//! under `data_dir`, WAL) or Postgres (`database_url`), through one sqlx `Any`
//! pool and SQL that both dialects accept. Where they differ (claiming a job)
//! the `Backend` says which statement to send.
//!
//! Migrations live per backend in `host/migrations/<backend>/` and run at open.
//! This module never touches DataFusion or HTTP; times are microseconds since
//! the Unix epoch, passed in by callers (who read the injected clock).

pub mod catalog;
pub mod dailyrun;
pub mod database_kind;
pub mod idempotency;
pub mod idp;
pub mod job_counts;
pub mod loads;
pub mod pipeline_shadows;
pub mod pipelines;
pub mod queries;
pub mod retention;
pub mod secrets;

use std::{path::Path, str::FromStr as _};

/// The jobs' fair-sharing caps are set in `config` (the floor below); the
/// store's claims obey them.
pub use crate::config::JobCaps;

use crate::config::StorageConfig;

use sqlx::{
    AnyPool,
    any::{AnyPoolOptions, install_default_drivers},
    sqlite::{SqliteConnectOptions, SqliteJournalMode},
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} already exists")]
    AlreadyExists { what: String },
    #[error("{what} does not exist")]
    NotFound { what: String },
    /// A stored value out of its domain (a state no code writes).
    #[error("stored value is not valid: {0}")]
    Corrupt(String),
    /// A stored value that does not parse: which one, and why.
    #[error("stored value is not valid: {what}: {source}")]
    Unreadable {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The Postgres server answered, but the database `database_url` names
    /// is not there (SQLSTATE 3D000).
    #[error(
        "the database \"{database}\" does not exist: create it, owned by the role lakehost \
         connects as, with `createdb -O {user} {database}` (or in psql: \
         CREATE DATABASE \"{database}\" OWNER \"{user}\";)"
    )]
    DatabaseMissing {
        database: String,
        user: String,
        #[source]
        source: sqlx::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The stored `what` does not parse, because of `source`.
    pub fn unreadable(
        what: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Unreadable {
            what,
            source: Box::new(source),
        }
    }
}

/// How the end of a job (a query, a load commit, a daily run) went: every
/// end is conditional on its holder still holding the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// Recorded (a dropped table's files are retired, not deleted: see
    /// `retired_files`).
    Recorded,
    /// The holder no longer holds the job (cancelled, ended or taken over):
    /// nothing was written.
    Lost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The store handle; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// The orgs' catalogs as last read (`catalog::snapshot`).
    snapshots: std::sync::Arc<catalog::snapshot::Snapshots>,
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

impl Store {
    /// Opens the store `storage` configures: `database_url` when set (on
    /// Postgres, a pool of `max_connections`), else `data_dir/lakehost.db`.
    /// Runs migrations.
    pub async fn from_config(storage: &StorageConfig) -> Result<Self> {
        match storage.database_url.as_deref() {
            Some(url) if url.starts_with("postgres") => {
                Self::open_postgres_pool(url, storage.max_connections).await
            }
            Some(url) => Self::open_sqlite_url(url).await,
            None => Self::open_sqlite(&storage.data_dir.join("lakehost.db")).await,
        }
    }

    /// [`Store::from_config`] with the default pool size.
    pub async fn open(data_dir: &Path, database_url: Option<&str>) -> Result<Self> {
        Self::from_config(&StorageConfig {
            data_dir: data_dir.to_path_buf(),
            database_url: database_url.map(str::to_owned),
            ..StorageConfig::default()
        })
        .await
    }

    /// A SQLite file (created when missing), in WAL mode.
    pub async fn open_sqlite(path: &Path) -> Result<Self> {
        Self::open_sqlite_url(&format!("sqlite://{}", path.display())).await
    }

    async fn open_sqlite_url(url: &str) -> Result<Self> {
        install_default_drivers();
        // WAL is a property of the file; set it once through a native connection
        // so that every pooled connection sees it.
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        {
            use sqlx::Connection as _;
            let connection = sqlx::SqliteConnection::connect_with(&options).await?;
            connection.close().await?;
        }
        let url = if url.contains('?') {
            url.to_string()
        } else {
            format!("{url}?mode=rwc")
        };
        let pool = AnyPoolOptions::new()
            .max_connections(8)
            // An in-process database: a pooled connection cannot go stale,
            // and the default ping before each use costs every store call a
            // round trip to the connection's thread. (sqlx still pings on
            // release, which finishes a dropped transaction's rollback.)
            .test_before_acquire(false)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    use sqlx::Executor as _;
                    // WAL with synchronous=NORMAL: a commit survives a crash of
                    // the process; only a power loss can undo the last ones.
                    conn.execute(
                        "PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000; PRAGMA synchronous = NORMAL;",
                    )
                        .await?;
                    Ok(())
                })
            })
            .connect(&url)
            .await?;
        SQLITE_MIGRATIONS.run(&pool).await?;
        Ok(Self {
            pool,
            backend: Backend::Sqlite,
            snapshots: Default::default(),
        })
    }

    /// Postgres at `url`, with the default pool size.
    pub async fn open_postgres(url: &str) -> Result<Self> {
        Self::open_postgres_pool(url, StorageConfig::default().max_connections).await
    }

    /// Postgres at `url`, at most `max_connections` connections. A database
    /// that does not exist is [`Error::DatabaseMissing`], saying how to
    /// create it.
    async fn open_postgres_pool(url: &str, max_connections: u32) -> Result<Self> {
        install_default_drivers();
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            .connect(url)
            .await
            .map_err(|e| postgres_connect_error(url, e))?;
        POSTGRES_MIGRATIONS.run(&pool).await?;
        Ok(Self {
            pool,
            backend: Backend::Postgres,
            snapshots: Default::default(),
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Starts a transaction that will write. SQLite's default transaction
    /// takes the write lock only at its first write: if another connection
    /// committed since its first read, that write fails at once with
    /// "database is locked" (a stale snapshot cannot wait its turn). So on
    /// SQLite the transaction's first statement is a write that changes
    /// nothing: it takes the write lock at once, queued behind other writers
    /// for up to the busy timeout. (Not `BEGIN IMMEDIATE` through sqlx's
    /// `begin_with`: a future dropped between that BEGIN's answer and its
    /// check leaves the transaction open on a pooled connection, holding the
    /// write lock for good.) Postgres takes row locks as it goes.
    pub(crate) async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let mut tx = self.pool.begin().await?;
        if self.backend == Backend::Sqlite {
            sqlx::query("UPDATE _sqlx_migrations SET version = version WHERE 0 = 1")
                .execute(&mut *tx)
                .await?;
        }
        Ok(tx)
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Whether the store answers a trivial query.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(self.pool()).await?;
        Ok(())
    }

    /// The versions of this build's migrations the store has not applied
    /// (another replica's older schema, or a migration that failed).
    pub async fn missing_migrations(&self) -> Result<Vec<i64>> {
        let migrator = match self.backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        let applied: Vec<i64> = sqlx::query_scalar(
            "SELECT CAST(version AS BIGINT) FROM _sqlx_migrations WHERE success = TRUE",
        )
        .fetch_all(self.pool())
        .await?;
        Ok(migrator
            .iter()
            .map(|m| m.version)
            .filter(|version| !applied.contains(version))
            .collect())
    }

    /// Runs a job table's lease renewal, `UPDATE ... SET lease_expires_at = $1
    /// WHERE <key> = $2 AND lease_owner = $3 AND <still running>`; true when
    /// the holder still holds the job.
    async fn renew_lease(
        &self,
        update: &'static str,
        key: &str,
        holder: &str,
        lease_until: i64,
    ) -> Result<bool> {
        let renewed = sqlx::query(update)
            .bind(lease_until)
            .bind(key)
            .bind(holder)
            .execute(self.pool())
            .await?;
        Ok(renewed.rows_affected() == 1)
    }
}

/// Why connecting to Postgres at `url` failed: a missing database named
/// with its owner-to-be (the URL's user), else sqlx's error.
fn postgres_connect_error(url: &str, error: sqlx::Error) -> Error {
    let missing = error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == UNDEFINED_DATABASE);
    let options = sqlx::postgres::PgConnectOptions::from_str(url);
    match options {
        Ok(options) if missing => {
            let user = options.get_username().to_string();
            Error::DatabaseMissing {
                // libpq's default: a database named like the user.
                database: options.get_database().unwrap_or(&user).to_string(),
                user,
                source: error,
            }
        }
        _ => Error::Database(error),
    }
}

/// Postgres's SQLSTATE for a database that does not exist.
const UNDEFINED_DATABASE: &str = "3D000";

/// A fresh identifier for stored rows.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A database that does not exist on a running Postgres server: the
    /// error names it and says how to create it, keeping sqlx's as its cause.
    #[tokio::test]
    #[cfg_attr(
        not(lakehost_has_postgres),
        ignore = "needs Postgres: eval \"$(.ci/postgres)\" first (README, Tests)"
    )]
    async fn a_missing_postgres_database_says_how_to_create_it() {
        let admin = std::env::var("LAKEHOST_TEST_DATABASE_URL")
            .expect("LAKEHOST_TEST_DATABASE_URL names a Postgres server");
        let mut url = url::Url::parse(&admin).unwrap();
        let database = format!("lakehost_missing_{}", &new_id()[..12]);
        url.set_path(&database);
        let user = url.username().to_string();
        let error = Store::open_postgres(url.as_str()).await.unwrap_err();
        let Error::DatabaseMissing {
            database: named,
            user: owner,
            source,
        } = &error
        else {
            panic!("not DatabaseMissing: {error:?}");
        };
        assert_eq!((named, owner), (&database, &user));
        let code = source.as_database_error().and_then(|e| e.code());
        assert_eq!(code.as_deref(), Some("3D000"), "{source:?}");
        assert_eq!(
            error.to_string(),
            format!(
                "the database \"{database}\" does not exist: create it, owned by the role \
                 lakehost connects as, with `createdb -O {user} {database}` (or in psql: \
                 CREATE DATABASE \"{database}\" OWNER \"{user}\";)"
            )
        );
    }

    /// Writers that each read before they write, at once: every one commits
    /// (each waits its turn), none meets "database is locked".
    #[tokio::test]
    async fn transactions_that_read_then_write_at_once_all_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_sqlite(&dir.path().join("store.db"))
            .await
            .unwrap();
        let writers = (0..6).map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut tx = store.begin_write().await?;
                let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM lake_databases")
                    .fetch_one(&mut *tx)
                    .await?;
                // Long enough for the others to have read too.
                tokio::time::sleep(Duration::from_millis(20)).await;
                sqlx::query(
                    "INSERT INTO lake_databases (id, org, zone, name, kind) \
                     VALUES ($1, 'org', '', $2, 'lake')",
                )
                .bind(new_id())
                .bind(format!("db{i}_after_{count}"))
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok::<_, Error>(())
            })
        });
        for writer in futures::future::join_all(writers).await {
            writer.unwrap().unwrap();
        }
        let names: Vec<String> = store
            .databases("org", None)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(names.len(), 6, "{names:?}");
        // Each saw the commits before its own: the counts are 0..6.
        let mut counts: Vec<&str> = names
            .iter()
            .map(|n| n.rsplit('_').next().unwrap())
            .collect();
        counts.sort_unstable();
        assert_eq!(counts, ["0", "1", "2", "3", "4", "5"]);
    }
}
