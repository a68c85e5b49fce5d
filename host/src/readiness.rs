//! Whether this replica should get traffic (`GET /readyz`): the store
//! answers, it has every migration this build expects, the lake answers (its
//! directory or its bucket exists: a missing bucket is named, with how to
//! create it), and the replica is not draining. Each part is asked on every
//! check, with a short bound of its own, so a hung Postgres or S3 makes the
//! answer "not ready" within about a second rather than a hung probe, and
//! the answer turns "ready" again by itself once the part is back (or the
//! bucket is created).

use std::time::Duration;

use crate::{
    drain::Drain,
    lake::{self, Lake},
    store::{self, Store},
};

/// How long one part may take to answer.
pub const CHECK_TIMEOUT: Duration = Duration::from_millis(1000);

/// The parts a readiness check asks, in the order a failure is reported.
pub const PARTS: [&str; 4] = ["store", "migrations", "lake", "drain"];

/// What the readiness check asks.
#[derive(Debug, Clone)]
pub struct Readiness {
    pub store: Store,
    pub lake: Lake,
    pub drain: Drain,
}

/// Why a part is not ready.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("draining")]
    Draining,
    #[error("not checked: the store does not answer")]
    StoreNotChecked,
    #[error("not applied: {0:?}")]
    MigrationsMissing(Vec<i64>),
    #[error("no answer within {} ms", CHECK_TIMEOUT.as_millis())]
    NoAnswer,
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error(transparent)]
    Lake(#[from] lake::Error),
}

/// Each part's answer: `Ok` or why it is not ready (the readiness body shows
/// its text), in [`PARTS`] order.
#[derive(Debug)]
pub struct ReadinessReport {
    pub parts: Vec<(&'static str, Result<(), NotReady>)>,
}

impl ReadinessReport {
    /// The first part that is not ready, with its reason.
    pub fn first_failure(&self) -> Option<(&'static str, &NotReady)> {
        self.parts
            .iter()
            .find_map(|(part, answer)| answer.as_ref().err().map(|why| (*part, why)))
    }
}

impl Readiness {
    /// Asks every part at once.
    pub async fn check(&self) -> ReadinessReport {
        let (store, lake) = tokio::join!(self.store_and_migrations(), self.lake());
        let (store, migrations) = store;
        let drain = if self.drain.is_draining() {
            Err(NotReady::Draining)
        } else {
            Ok(())
        };
        let parts = [
            ("store", store),
            ("migrations", migrations),
            ("lake", lake),
            ("drain", drain),
        ];
        ReadinessReport {
            parts: parts.into_iter().collect(),
        }
    }

    async fn store_and_migrations(&self) -> (Result<(), NotReady>, Result<(), NotReady>) {
        if let Err(why) = bounded(self.store.ping()).await {
            return (Err(why), Err(NotReady::StoreNotChecked));
        }
        let migrations = match bounded(self.store.missing_migrations()).await {
            Ok(missing) if missing.is_empty() => Ok(()),
            Ok(missing) => Err(NotReady::MigrationsMissing(missing)),
            Err(why) => Err(why),
        };
        (Ok(()), migrations)
    }

    async fn lake(&self) -> Result<(), NotReady> {
        bounded(self.lake.probe()).await
    }
}

/// `answer` within [`CHECK_TIMEOUT`].
async fn bounded<T, E: Into<NotReady>>(
    answer: impl Future<Output = Result<T, E>>,
) -> Result<T, NotReady> {
    match tokio::time::timeout(CHECK_TIMEOUT, answer).await {
        Ok(answer) => answer.map_err(Into::into),
        Err(_) => Err(NotReady::NoAnswer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fresh_store_and_lake_are_ready_until_the_drain_begins() {
        let dir = tempfile::tempdir().unwrap();
        let readiness = Readiness {
            store: Store::open_sqlite(&dir.path().join("db")).await.unwrap(),
            lake: Lake::local(dir.path()).unwrap(),
            drain: Drain::new(),
        };
        let report = readiness.check().await;
        assert!(report.first_failure().is_none(), "{report:?}");
        assert_eq!(
            report.parts.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
            PARTS
        );
        readiness.drain.begin();
        let report = readiness.check().await;
        assert_eq!(
            report
                .first_failure()
                .map(|(part, why)| (part, why.to_string())),
            Some(("drain", "draining".to_string()))
        );
    }

    #[tokio::test]
    async fn a_lake_directory_gone_or_a_closed_store_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let readiness = Readiness {
            store: Store::open_sqlite(&dir.path().join("db")).await.unwrap(),
            lake: Lake::local(dir.path()).unwrap(),
            drain: Drain::new(),
        };
        std::fs::remove_dir_all(dir.path().join("lake")).unwrap();
        let report = readiness.check().await;
        assert_eq!(report.first_failure().map(|(part, _)| part), Some("lake"));
        readiness.store.close().await;
        let report = readiness.check().await;
        assert_eq!(report.first_failure().map(|(part, _)| part), Some("store"));
        assert!(report.parts[1].1.is_err(), "{report:?}");
        std::fs::create_dir_all(dir.path().join("lake")).unwrap();
        let report = readiness.check().await;
        assert!(
            matches!(report.parts[2], ("lake", Ok(()))),
            "back without a restart: {report:?}"
        );
    }

    /// An S3 lake whose bucket does not exist is named with how to create
    /// it, and the bucket created later makes the lake ready by itself. On
    /// the S3 server `.ci/s3` starts, whose `AWS_*` variables configure the
    /// lake.
    #[tokio::test]
    #[cfg_attr(
        not(lakehost_has_s3),
        ignore = "needs an S3 server: eval \"$(.ci/s3)\" first (README, Tests)"
    )]
    async fn a_missing_bucket_is_named_until_it_is_created() {
        let endpoint = std::env::var("LAKEHOST_TEST_S3_ENDPOINT")
            .expect("LAKEHOST_TEST_S3_ENDPOINT names an S3 server: eval \"$(.ci/s3)\" first");
        let bucket = format!("lakehost-missing-{}", &store::new_id()[..12]);
        let dir = tempfile::tempdir().unwrap();
        let readiness = Readiness {
            store: Store::open_sqlite(&dir.path().join("db")).await.unwrap(),
            lake: Lake::from_url(&format!("s3://{bucket}/lake")).unwrap(),
            drain: Drain::new(),
        };
        let report = readiness.check().await;
        let (part, why) = report.first_failure().expect("not ready");
        assert_eq!(part, "lake", "{report:?}");
        assert!(
            matches!(why, NotReady::Lake(lake::Error::BucketMissing { .. })),
            "{why:?}"
        );
        assert_eq!(
            why.to_string(),
            format!(
                "the bucket \"{bucket}\" does not exist (create it: aws s3 mb s3://{bucket}, \
                 with --endpoint-url $AWS_ENDPOINT_URL on an S3-compatible store)"
            )
        );
        let created = reqwest::Client::new()
            .put(format!("{endpoint}/{bucket}"))
            .send()
            .await
            .unwrap();
        assert!(created.status().is_success(), "{}", created.status());
        let report = readiness.check().await;
        assert!(report.first_failure().is_none(), "{report:?}");
        // Then the probe object is there, and its HEAD alone answers.
        let report = readiness.check().await;
        assert!(report.first_failure().is_none(), "{report:?}");
    }
}
