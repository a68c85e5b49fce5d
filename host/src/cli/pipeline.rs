//! `lakehost pipeline ...`, part of the binary: each subcommand's arguments
//! (clap), and the printing and exit codes around the library's work
//! (`load::dry_run`, `dailyrun::dry_run`, `pipeline::check`,
//! `pipeline::scaffold`, `pipeline::wit_package`; `deploy`, `versions`,
//! `activate` and `shadow` call a server's API through `deploy.rs`).

use std::path::{Path, PathBuf};

use crate::deploy_cli::{self, ApiArgs};
use clap::Subcommand;
use lakehost::{
    api::error::ApiError,
    config::LogFormat,
    dailyrun::dry_run::{DailyDryRunRequest, Seed, daily_dry_run},
    load::dry_run::{DryRunRequest, dry_run},
    observability::logs,
    pipeline::{
        PipelineEngine, PipelineKind, StepReport,
        check::check_manifest,
        scaffold::{self, Language, NewStep},
        wit_package,
    },
};

#[derive(Subcommand)]
pub enum PipelineCommand {
    /// Runs a manifest's steps over local parquet files, without a server,
    /// and prints each step's outcome (its log lines, time and peak memory
    /// go to stderr). A load manifest runs as one load of a new table; a
    /// daily one (--daily) as one execution over a scratch lake seeded with
    /// --seed. Exit code 0 when every step passed, 1 when one failed, 2 on
    /// an error.
    DryRun {
        /// The manifest to try (default: pipelines/load.toml, or
        /// pipelines/daily.toml with --daily).
        #[arg(long)]
        manifest: Option<PathBuf>,
        /// A daily-run manifest (`daily-step` world); else a load manifest.
        #[arg(long)]
        daily: bool,
        /// The load's table_name.
        #[arg(long, required_unless_present = "daily", conflicts_with = "daily")]
        table: Option<String>,
        /// The commit's check_sum, as JSON: '{"count(*)": 100}'.
        #[arg(long, required_unless_present = "daily", conflicts_with = "daily")]
        check_sum: Option<String>,
        /// The load's load_as_service_client_id.
        #[arg(long, conflicts_with = "daily")]
        load_as_service_client_id: Option<String>,
        /// An extra partition column (repeatable).
        #[arg(long = "partition", conflicts_with = "daily")]
        partitions: Vec<String>,
        /// With --daily: a lake table seeded from a parquet file with a
        /// service_client_id column, as TABLE=FILE (repeatable).
        #[arg(long = "seed", requires = "daily", value_parser = Seed::parse)]
        seeds: Vec<Seed>,
        /// The parquet files of the load.
        #[arg(required_unless_present = "daily", conflicts_with = "daily")]
        files: Vec<PathBuf>,
    },
    /// Checks a manifest as a server would run it, without running it: it
    /// parses, and each step's component compiles and matches the
    /// pipeline's world. Exit code 0 when it is usable, 1 when it is not, 2
    /// on an error.
    Check {
        /// The manifest to check.
        manifest: PathBuf,
        /// A daily-run manifest (`daily-step` world); else a load manifest.
        #[arg(long)]
        daily: bool,
    },
    /// Makes a new step's own project in a folder (`./NAME` unless --dir):
    /// the WIT, a commented step to start from, a manifest that runs it,
    /// sample parquet files and a README with the commands that build,
    /// check and dry-run it.
    NewStep {
        /// The step's name (lowercase letters, digits, `-` and `_`).
        name: String,
        /// A daily-run step (`daily-step` world); else a load step.
        #[arg(long)]
        daily: bool,
        /// The language it is written in: rust (cargo build or cargo
        /// component) or python (componentize-py).
        #[arg(long, value_enum, default_value = "rust")]
        lang: Lang,
        /// The folder to make (new, or empty).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Writes the WIT package steps are built against
    /// (`lakehost:pipeline@<version>`, as this server links it) into a
    /// folder, for `wit_bindgen::generate!` or `cargo component`.
    Wit {
        /// The folder to write it into (created when missing).
        #[arg(long, default_value = "wit")]
        out: PathBuf,
    },
    /// Deploys a manifest to an org's (or zone's) API: uploads each .wasm
    /// file it names (by path, relative to the manifest), posts the manifest
    /// with their digests in place of the paths, and prints the new
    /// version's number. Exit code 0 when deployed, 1 when the server (or
    /// the manifest's size cap) refused, 2 on an error.
    Deploy {
        /// The manifest to deploy.
        manifest: PathBuf,
        /// A daily-run manifest; else a load manifest.
        #[arg(long)]
        daily: bool,
        /// Then make the new version the active one.
        #[arg(long)]
        activate: bool,
        /// Then run the new version beside every load commit, as the load
        /// pipeline's shadow (a load manifest only).
        #[arg(long, conflicts_with = "activate")]
        shadow: bool,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Lists a pipeline's deployed versions, newest first, and the active one.
    Versions {
        /// The daily-run pipeline; else the load pipeline.
        #[arg(long)]
        daily: bool,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Makes a deployed version the active one (an older one: a rollback).
    Activate {
        /// The version's number.
        version: u64,
        /// The daily-run pipeline; else the load pipeline.
        #[arg(long)]
        daily: bool,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// The load pipeline's shadow: with N, runs load version N beside every
    /// commit (read-only; the loads' outcomes are the active steps'); with
    /// --off, no more; with neither, prints the shadow and the loads whose
    /// outcome it did not agree with.
    Shadow {
        /// The load version to run beside every commit.
        version: Option<u64>,
        /// Remove the shadow.
        #[arg(long, conflicts_with = "version")]
        off: bool,
        #[command(flatten)]
        api: ApiArgs,
    },
}

/// `--lang`'s values.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
}

/// Runs one pipeline subcommand; its exit code.
pub async fn run(command: PipelineCommand) -> std::process::ExitCode {
    match command {
        PipelineCommand::Deploy {
            manifest,
            daily,
            activate,
            shadow,
            api,
        } => {
            let then = deploy_cli::Then::from_flags(activate, shadow);
            deploy_cli::deploy(&api, kind_of(daily), &manifest, then).await
        }
        PipelineCommand::Versions { daily, api } => {
            deploy_cli::versions(&api, kind_of(daily)).await
        }
        PipelineCommand::Activate {
            version,
            daily,
            api,
        } => deploy_cli::activate(&api, kind_of(daily), version).await,
        PipelineCommand::Shadow { version, off, api } => {
            let action = match (version, off) {
                (Some(version), _) => deploy_cli::ShadowAction::Set(version),
                (None, true) => deploy_cli::ShadowAction::Off,
                (None, false) => deploy_cli::ShadowAction::Report,
            };
            deploy_cli::shadow(&api, action).await
        }
        PipelineCommand::Wit { out } => pipeline_wit(&out),
        PipelineCommand::NewStep {
            name,
            daily,
            lang,
            dir,
        } => pipeline_new_step(NewStep {
            dir: dir.unwrap_or_else(|| PathBuf::from(&name)),
            name,
            kind: kind_of(daily),
            language: match lang {
                Lang::Rust => Language::Rust,
                Lang::Python => Language::Python,
            },
        }),
        PipelineCommand::Check { manifest, daily } => {
            let _logging = start_compiling_tool();
            pipeline_check(&manifest, daily)
        }
        PipelineCommand::DryRun {
            manifest,
            daily: true,
            seeds,
            ..
        } => {
            let _logging = start_compiling_tool();
            let manifest = manifest.unwrap_or_else(|| default_manifest(PipelineKind::Daily));
            pipeline_daily_dry_run(DailyDryRunRequest { manifest, seeds }).await
        }
        PipelineCommand::DryRun {
            manifest,
            table,
            check_sum,
            load_as_service_client_id,
            partitions,
            files,
            ..
        } => {
            let _logging = start_compiling_tool();
            // clap requires both without --daily.
            let (Some(table), Some(check_sum)) = (table, check_sum) else {
                eprintln!("lakehost pipeline dry-run: --table and --check-sum are required");
                return std::process::ExitCode::from(2);
            };
            let check_sum = match check_sum_arg(&check_sum) {
                Ok(pairs) => pairs,
                Err(e) => {
                    eprintln!("lakehost pipeline dry-run: --check-sum: {e}");
                    return std::process::ExitCode::from(2);
                }
            };
            pipeline_dry_run(DryRunRequest {
                manifest: manifest.unwrap_or_else(|| default_manifest(PipelineKind::Load)),
                table,
                check_sum,
                load_as_service_client_id,
                partitions,
                files,
            })
            .await
        }
    }
}

/// Why `--check-sum` is refused.
#[derive(Debug, thiserror::Error)]
enum CheckSumArg {
    #[error(transparent)]
    NotJson(#[from] serde_json::Error),
    /// What POST /load answers such a `check_sum` (its 400's message).
    #[error("{}", refusal_text(.0))]
    Refused(ApiError),
}

fn refusal_text(refused: &ApiError) -> String {
    match refused {
        ApiError::BadRequest(message) => message.clone(),
        other => other.to_string(),
    }
}

/// `--check-sum` read as POST /load reads its `check_sum`.
fn check_sum_arg(text: &str) -> Result<Vec<(String, String)>, CheckSumArg> {
    let body: serde_json::Value = serde_json::from_str(text)?;
    let body = serde_json::json!({ "check_sum": body });
    lakehost::api::load_body::check_sums(Some(&body)).map_err(CheckSumArg::Refused)
}

/// For `check` and the dry runs, which compile steps: text logs (the guard
/// returned), and compiled steps kept in the user's cache folder so an
/// author's next run loads them (within 1 GiB, the least recently used
/// evicted first). An engine that does not start is reported by the command
/// itself.
fn start_compiling_tool() -> logs::Logging {
    let logging = logs::init(LogFormat::Text);
    if let Ok(engine) = PipelineEngine::shared() {
        engine.keep_compiled_for_tools();
    }
    logging
}

fn kind_of(daily: bool) -> PipelineKind {
    if daily {
        PipelineKind::Daily
    } else {
        PipelineKind::Load
    }
}

/// Prints each step's verdict on a manifest; the exit code says whether a
/// server could run it.
fn pipeline_check(manifest: &Path, daily: bool) -> std::process::ExitCode {
    let kind = kind_of(daily);
    let engine = match PipelineEngine::shared() {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("lakehost pipeline check: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let steps = match check_manifest(&engine, kind, manifest) {
        Ok(steps) => steps,
        Err(e) => {
            println!("{e}");
            return std::process::ExitCode::from(1);
        }
    };
    for check in &steps {
        match &check.problem {
            None => match &check.note {
                None => println!("step {} ({}): ok", check.step, check.component),
                Some(note) => println!("step {} ({}): ok; {note}", check.step, check.component),
            },
            Some(problem) => println!("step {} ({}): {problem}", check.step, check.component),
        }
    }
    if steps.iter().all(|check| check.problem.is_none()) {
        println!(
            "{}: usable as the {}",
            manifest.display(),
            kind.steps_name()
        );
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}

fn pipeline_wit(out: &Path) -> std::process::ExitCode {
    match wit_package::write_to(out) {
        Ok(written) => {
            for path in written {
                println!("wrote {}", path.display());
            }
            println!("package {}", wit_package::package_id());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lakehost pipeline wit: {}: {e}", out.display());
            std::process::ExitCode::from(2)
        }
    }
}

/// The repository's manifest of a pipeline, as the dry run's default.
fn default_manifest(kind: PipelineKind) -> PathBuf {
    Path::new("pipelines").join(kind.file_name())
}

fn pipeline_new_step(request: NewStep) -> std::process::ExitCode {
    match scaffold::create(&request) {
        Ok(written) => {
            for path in written {
                println!("wrote {}", request.dir.join(path).display());
            }
            println!(
                "next: cd {} and follow its README.md (build, check, dry-run)",
                request.dir.display()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lakehost pipeline new-step: {e}");
            let code = match e {
                scaffold::ScaffoldError::Io(..) => 2,
                _ => 1,
            };
            std::process::ExitCode::from(code)
        }
    }
}

/// Prints each step's report of a dry run; `error` says what a step's
/// error would do to the job.
fn print_step_reports(reports: &[StepReport], error: &str) {
    for report in reports {
        match report {
            StepReport::Passed { step } => println!("step {step}: PASS"),
            StepReport::Failed {
                step,
                error_type,
                items,
            } => {
                println!("step {step}: FAIL {error_type}");
                for item in items {
                    let check = item
                        .check_result
                        .as_deref()
                        .map(|c| format!(" [{c}]"))
                        .unwrap_or_default();
                    println!("  {}: {}{check}", item.error_type, item.error_message);
                }
            }
            StepReport::Error(e) => println!("{e} ({error})"),
        }
    }
}

/// Prints a daily dry run's reports and the insights tables it left; the
/// exit code says how it went.
async fn pipeline_daily_dry_run(request: DailyDryRunRequest) -> std::process::ExitCode {
    let outcome = match daily_dry_run(&request).await {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("lakehost pipeline dry-run: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    print_step_reports(&outcome.steps, "the run would end FAILED");
    for (table, rows) in &outcome.insights {
        println!("insights table {table}: {rows} rows (in a scratch lake that is now deleted)");
    }
    if outcome.passed() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}

/// Prints a dry run's reports; the exit code says how it went.
async fn pipeline_dry_run(request: DryRunRequest) -> std::process::ExitCode {
    let outcome = match dry_run(&request).await {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("lakehost pipeline dry-run: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    print_step_reports(&outcome.steps, "the load would FAIL with InternalError");
    if let Some(rows) = outcome.rows_appended {
        println!("rows appended: {rows} (into a scratch lake that is now deleted)");
    }
    if outcome.passed() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}
