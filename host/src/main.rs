//! The `lakehost` binary: reads configuration, starts tracing (text, or JSON
//! with `server.log_format = "json"` for `serve`), serves. `serve` prints a
//! banner on stdout (where it listens, how to get a token): plain lines, or
//! with `"json"` one JSON line each, like every other line it writes.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use lakehost::{
    Application, Config,
    config::{CONFIG_FILE_ENV, LogFormat},
    import::{ImportRequest, ImportSummary, import_parquet},
    lake::Lake,
    observability::logs,
    startup::open_store,
};

#[path = "cli/deploy.rs"]
mod deploy_cli;
#[path = "cli/pipeline.rs"]
mod pipeline_cli;

use pipeline_cli::PipelineCommand;

/// mimalloc instead of the system allocator: queries allocate and free large
/// buffers all the time, which glibc hands back to the kernel and faults in
/// again (zeroed) on every query; mimalloc keeps them (measured in
/// bench/README.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (milliseconds): its place in
/// `mi_option_t`, which the Rust bindings do not name.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps freed memory before it returns it to the kernel.
/// Its default (1 s) is only acted on when the freeing thread allocates
/// again, so threads that went idle kept their pages: 816 MiB on an idle
/// server after scale-1 commits, 1,405 MiB at their peak. With 100 ms: 606
/// and 1,085 MiB. With 0: 470 and 839 MiB, but a point lookup took 11 ms
/// instead of 6 (its buffers faulted in again every time), and a CSV
/// download 1.6 s instead of 0.65. With 10 ms, against 100 ms on one
/// binary: commits 766 MiB at their peak instead of 854, in the same time;
/// a typed-first result and its copies 863 MiB instead of 1,085; the
/// queries and the point lookup as fast. Measured in bench/README.md.
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Sets mimalloc's purge delay to `PURGE_DELAY_MS`, unless the operator
/// chose one (`MIMALLOC_PURGE_DELAY`, which mimalloc reads itself).
fn purge_freed_memory_sooner() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: the first thing `main` does, while no other thread runs
        // (`mi_option_set` is not thread safe).
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
    }
}

#[derive(Parser)]
#[command(version, about = "The lakehost data-lake API service")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the server (embedded default when no config is given).
    Serve {
        /// A TOML config file; LAKEHOST_<SECTION>_<KEY> variables override its keys.
        #[arg(long, env = CONFIG_FILE_ENV)]
        config: Option<PathBuf>,
    },
    /// Import parquet files into a lake table (created on first import); rows
    /// are split by their service_client_id column. Prints a JSON summary.
    Import {
        #[arg(long, env = CONFIG_FILE_ENV)]
        config: Option<PathBuf>,
        /// The org whose lake receives the rows.
        #[arg(long)]
        org: String,
        /// A zone of the org (its own lake), instead of the org's.
        #[arg(long)]
        zone: Option<String>,
        /// The database, e.g. demo_lake_v2.
        #[arg(long)]
        database: String,
        #[arg(long)]
        table: String,
        /// Parquet files with a service_client_id column.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Pipelines: a dry run, a check of a manifest, a new step's project, the
    /// WIT package for steps.
    Pipeline {
        #[command(subcommand)]
        command: PipelineCommand,
    },
}

fn main() -> std::process::ExitCode {
    purge_freed_memory_sooner();
    // The request runtime plans what callers send: the same big stacks as
    // the engine's (`runtime`).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(lakehost::runtime::THREAD_STACK_BYTES)
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("lakehost: cannot start the runtime: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run() -> std::process::ExitCode {
    let Cli { command } = Cli::parse();
    match command {
        Command::Serve { config } => serve(config).await,
        Command::Import {
            config,
            org,
            zone,
            database,
            table,
            files,
        } => {
            let _logging = logs::init(LogFormat::Text);
            let request = ImportRequest {
                org,
                zone,
                database,
                table,
                files,
            };
            match import(config, request).await {
                Ok(summary) => {
                    println!(
                        "{}",
                        serde_json::to_string(&summary).expect("summary serialises")
                    );
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("lakehost import: {e:#}");
                    std::process::ExitCode::from(1)
                }
            }
        }
        Command::Pipeline { command } => pipeline_cli::run(command).await,
    }
}

async fn import(
    config_file: Option<PathBuf>,
    request: ImportRequest,
) -> anyhow::Result<ImportSummary> {
    let config = Config::load(config_file.as_deref(), std::env::vars())?;
    if config.org(&request.org).is_none() {
        anyhow::bail!("org {} is not configured", request.org);
    }
    std::fs::create_dir_all(&config.storage.data_dir)?;
    let store = open_store(&config).await?;
    let lake = Lake::from_config(&config.storage)?;
    let now = chrono::Utc::now().timestamp_micros();
    import_parquet(&store, &lake, &request, now).await
}

/// Starts the server from `config_file` and serves until stopped; what
/// stops it early is said on stderr (exit code 2).
async fn serve(config_file: Option<PathBuf>) -> std::process::ExitCode {
    let config = match Config::load(config_file.as_deref(), std::env::vars()) {
        Ok(config) => config,
        // The log format is not known yet: plain text.
        Err(e) => return stopped(LogFormat::Text, &e.into()),
    };
    let format = config.server.log_format;
    // Logs go to stderr, in the configured format: stdout carries what
    // commands print for scripts.
    let logging = logs::init(format);
    let served = serve_with(config).await;
    logging.shutdown().await;
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => stopped(format, &e),
    }
}

/// Says on stderr, in `format`, why the server stopped; exit code 2.
fn stopped(format: LogFormat, error: &anyhow::Error) -> std::process::ExitCode {
    use std::io::Write as _;
    let text = format!("lakehost: {error:#}");
    let line = match format {
        LogFormat::Text => text,
        LogFormat::Json => logs::json_line(tracing::Level::ERROR, "lakehost", &text, []),
    };
    let _ = writeln!(std::io::stderr(), "{line}");
    std::process::ExitCode::from(2)
}

/// Prints one banner line on stdout: `text`, or in `"json"` a line in the
/// log's shape whose `message` is `text` (spaces collapsed) and whose `key`
/// is `value`, the address the line names. A closed stdout (`lakehost serve
/// | head -1`) must not stop the server, so write errors are ignored.
fn say(format: LogFormat, text: &str, (key, value): (&str, String)) {
    use std::io::Write as _;
    let line = match format {
        LogFormat::Text => text.to_string(),
        LogFormat::Json => logs::json_line(
            tracing::Level::INFO,
            "lakehost::banner",
            &text.split_whitespace().collect::<Vec<_>>().join(" "),
            [(key, serde_json::Value::String(value))],
        ),
    };
    let _ = writeln!(std::io::stdout(), "{line}");
}

async fn serve_with(config: Config) -> anyhow::Result<()> {
    let format = config.server.log_format;
    let default_org = config.server.default_org.clone();
    let region_domain = config.server.region_domain.clone();
    let demo_client = config
        .idp
        .clients
        .iter()
        .find(|c| c.org == default_org)
        .cloned();
    let app = Application::build(config).await?;
    let addr = app.local_addr();
    let auth_url = app.auth_url().clone();
    let scheme = auth_url.scheme().to_string();
    let port = addr.port();
    let api = format!("{scheme}://{addr}");
    say(
        format,
        &format!("lakehost listening on {api}"),
        ("url", api),
    );
    let org_api = format!("{scheme}://{default_org}.api.{region_domain}:{port}/v2");
    say(
        format,
        &format!("  Org API:      {org_api}  (or {scheme}://localhost:{port}/v2)"),
        ("org_api", org_api),
    );
    let dailyrun_api = format!("{scheme}://api.{default_org}.{region_domain}:{port}/dailyRun");
    say(
        format,
        &format!("  DailyRun API: {dailyrun_api}"),
        ("dailyrun_api", dailyrun_api),
    );
    let openapi = format!("{scheme}://localhost:{port}/v2/openapi.json");
    say(
        format,
        &format!("  OpenAPI:      {openapi}"),
        ("openapi", openapi),
    );
    let uploads = format!("{scheme}://{}", app.upload_addr());
    say(
        format,
        &format!("  Uploads (S3): {uploads}"),
        ("uploads", uploads),
    );
    let metrics = format!("http://{}/metrics", app.metrics_addr());
    say(
        format,
        &format!("  Metrics:      {metrics}"),
        ("metrics", metrics),
    );
    if let Some(flight) = app.flight_addr() {
        let flight_scheme = if scheme == "https" {
            "grpc+tls"
        } else {
            "grpc"
        };
        let flight = format!("{flight_scheme}://{flight}");
        say(
            format,
            &format!("  Flight SQL:   {flight}"),
            ("flight_sql", flight),
        );
    }
    if let Some(pg) = app.pg_addr() {
        let pg = format!(
            "postgresql://<client id>@{}:{}/{default_org}?sslmode=require",
            pg.ip(),
            pg.port()
        );
        say(
            format,
            &format!("  Postgres:     {pg}  (password: the client secret)"),
            ("postgres", pg),
        );
    }
    if let Some(worker) = app.cluster_worker_addr() {
        let worker = format!("http://{worker}");
        say(
            format,
            &format!(
                "  Worker:       {worker}  (stages of distributed reads; cluster secret only)"
            ),
            ("worker", worker),
        );
    }
    let token_url = format!(
        "{}/realms/{default_org}/protocol/openid-connect/token",
        auth_url.as_str().trim_end_matches('/')
    );
    let token_line = match (app.idp().is_some(), demo_client) {
        (true, Some(client)) => format!(
            "Get a token:  curl -s {token_url} -d grant_type=client_credentials -d client_id={} -d client_secret={}",
            client.client_id.unwrap_or_default(),
            client.client_secret.unwrap_or_default()
        ),
        _ => format!("Tokens come from {token_url}"),
    };
    say(format, &token_line, ("token_url", token_url));
    app.run_until_stopped().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_mimallocs_purge_delay() {
        // Option 15 has the purge delay's default (1,000 ms in mimalloc 3),
        // unless this process was started with the variable.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // SAFETY: reading an option is thread safe.
            let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
            assert_eq!(delay, 1000);
        }
    }
}
