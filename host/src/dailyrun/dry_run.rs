//! `lakehost pipeline dry-run --daily`: a daily-run manifest's steps over a
//! scratch lake seeded from local parquet files, without a server, for
//! plugin authors and operators trying a manifest.
//!
//! The scratch store and lake live in a temporary folder that is deleted
//! afterwards; the seeds are imported into the org's lake database as
//! `lakehost import` would, and the steps run as one execution of the daily
//! run with the same `lake-sql` answers a server gives (`transform.rs`).
//! Afterwards every table of the insights database is reported with its row
//! count, so the author sees what a refresh wrote.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context as _;

use super::{execution_name, transform::LakeTransform};
use crate::{
    clock::SystemClock,
    config::QueryConfig,
    import::{ImportRequest, import_parquet},
    lake::Lake,
    pipeline::{
        DailyData, PipelineEngine, PipelineKind, RunContext, RunControl, StepReport,
        manifest::Manifest, run_steps_blocking,
    },
    store::{Store, catalog::standard_databases, dailyrun::NewDailyRun},
};

/// The org the scratch lake belongs to (its databases are
/// `dry_run_lake_v2` and its insights database).
const ORG: &str = "dry-run";

/// A seed that is not `TABLE=FILE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: use TABLE=FILE.parquet")]
pub struct SeedSyntax(String);

/// One lake table to seed, from parquet files with a service_client_id column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    pub table: String,
    pub files: Vec<PathBuf>,
}

impl Seed {
    /// `TABLE=FILE` as the command line gives it.
    pub fn parse(text: &str) -> Result<Self, SeedSyntax> {
        match text.split_once('=') {
            Some((table, file)) if !table.is_empty() && !file.is_empty() => Ok(Self {
                table: table.to_string(),
                files: vec![PathBuf::from(file)],
            }),
            _ => Err(SeedSyntax(text.to_string())),
        }
    }
}

/// What to try.
#[derive(Debug, Clone)]
pub struct DailyDryRunRequest {
    pub manifest: PathBuf,
    /// Seeds of the same table add their files to it.
    pub seeds: Vec<Seed>,
}

/// The reports of the steps that ran, and the insights tables afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyDryRunOutcome {
    pub steps: Vec<StepReport>,
    /// Each table of the insights database, with its row count.
    pub insights: Vec<(String, u64)>,
}

impl DailyDryRunOutcome {
    pub fn passed(&self) -> bool {
        StepReport::all_passed(&self.steps)
    }
}

pub async fn daily_dry_run(request: &DailyDryRunRequest) -> anyhow::Result<DailyDryRunOutcome> {
    let manifest = Manifest::load(PipelineKind::Daily, &request.manifest)?;
    let scratch = tempfile::tempdir().context("a scratch folder")?;
    let store = Store::open_sqlite(&scratch.path().join("lakehost.db")).await?;
    store.ensure_standard_databases(ORG, None).await?;
    let lake = Lake::local(scratch.path())?;
    let databases = standard_databases(ORG, None);
    let started = chrono::Utc::now();
    let now = started.timestamp_micros();
    for seed in merged(&request.seeds) {
        let import = ImportRequest {
            org: ORG.into(),
            zone: None,
            database: databases.lake.clone(),
            table: seed.table.clone(),
            files: seed.files.clone(),
        };
        import_parquet(&store, &lake, &import, now)
            .await
            .with_context(|| format!("seeding {}", seed.table))?;
    }
    let execution = execution_name(ORG, started);
    let holder = "dry-run";
    store
        .start_daily_run(&NewDailyRun {
            name: &execution,
            org: ORG,
            scheduled_for: None,
            started_at: now,
            deadline_at: i64::MAX,
            holder,
            lease_until: i64::MAX,
        })
        .await?;
    let context = RunContext {
        execution_name: execution.clone(),
        org: ORG.into(),
        lake_database: databases.lake.clone(),
        insights_database: databases.insights.clone(),
        scheduled: false,
    };
    let data = Arc::new(LakeTransform {
        store: store.clone(),
        lake,
        clock: Arc::new(SystemClock),
        org: ORG.into(),
        lake_database: databases.lake,
        insights_database: databases.insights.clone(),
        execution,
        holder: holder.into(),
        memory_limit: usize::try_from(QueryConfig::default().memory_limit_bytes)
            .unwrap_or(usize::MAX),
    });
    let runner: Arc<dyn DailyData> = data.clone();
    let steps = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<StepReport>> {
        let engine = PipelineEngine::shared()?;
        let control = RunControl::detached()?;
        let ran = run_steps_blocking(&manifest, |step| {
            engine.run_daily_step(step, &context, runner.clone(), &control)
        });
        Ok(ran.reports())
    })
    .await??;
    let insights = insights_tables(data.as_ref(), &databases.insights).await?;
    store.close().await;
    Ok(DailyDryRunOutcome { steps, insights })
}

/// The seeds with one entry per table, in the order tables first appear.
fn merged(seeds: &[Seed]) -> Vec<Seed> {
    let mut tables: Vec<Seed> = Vec::new();
    for seed in seeds {
        match tables.iter_mut().find(|t| t.table == seed.table) {
            Some(table) => table.files.extend(seed.files.iter().cloned()),
            None => tables.push(seed.clone()),
        }
    }
    tables
}

/// Every table of the insights database with its row count, through the
/// same SQL a step's `lake-sql` query runs.
async fn insights_tables(
    data: &LakeTransform,
    insights: &str,
) -> anyhow::Result<Vec<(String, u64)>> {
    let names = data
        .query(
            &format!(
                "SELECT table_name FROM information_schema.tables \
                 WHERE table_schema = '{insights}' ORDER BY table_name"
            ),
            10_000,
        )
        .await?;
    let mut tables = Vec::new();
    for name in names
        .into_iter()
        .filter_map(|row| row.into_iter().next().flatten())
    {
        let counted = data
            .query(&format!("SELECT count(*) FROM {insights}.{name}"), 1)
            .await?;
        let rows = counted
            .first()
            .and_then(|row| row.first().cloned().flatten())
            .and_then(|n| n.parse().ok())
            .context("a count")?;
        tables.push((name, rows));
    }
    Ok(tables)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_table_equals_file_and_one_table_gathers_its_files() {
        assert_eq!(
            Seed::parse("trips=a.parquet").unwrap(),
            Seed {
                table: "trips".into(),
                files: vec!["a.parquet".into()]
            }
        );
        for bad in ["trips", "=a.parquet", "trips="] {
            assert!(Seed::parse(bad).is_err(), "{bad}");
        }
        let seeds = ["trips=a", "fares=b", "trips=c"].map(|s| Seed::parse(s).unwrap());
        let merged = merged(&seeds);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].files, [PathBuf::from("a"), PathBuf::from("c")]);
    }
}
