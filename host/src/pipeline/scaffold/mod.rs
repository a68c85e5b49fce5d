//! `lakehost pipeline new-step`: a step's own project, for a plugin author
//! outside this repository. It holds the WIT the server links (`wit/`), a
//! commented step to start from (Rust built with `cargo build --target
//! wasm32-wasip2` or `cargo component build`, or Python built with
//! componentize-py), a manifest that runs it, sample parquet files and a
//! README with the commands that build, check and dry-run it.
//!
//! The templates are the files in `templates/`; `{{...}}` marks what is
//! filled in. A Rust project gets the Cargo.lock and the `.cargo/config.toml`
//! (a 64 KiB stack) the built-in steps are built with, so it builds with the
//! same, tested versions and settings.

use std::{fmt, path::PathBuf, sync::Arc};

use datafusion::{
    arrow::{
        array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray},
        datatypes::{DataType, Field, Schema},
    },
    parquet::arrow::ArrowWriter,
};

use super::{PipelineKind, builtin, wit_package};

const CARGO_TOML: &str = include_str!("templates/Cargo.toml.in");
const CARGO_LOCK: &str = include_str!("../../../../plugins/Cargo.lock");
const CARGO_CONFIG: &str = include_str!("../../../../plugins/.cargo/config.toml");
const LOAD_LIB_RS: &str = include_str!("templates/load_lib.rs.in");
const DAILY_LIB_RS: &str = include_str!("templates/daily_lib.rs.in");
const LOAD_APP_PY: &str = include_str!("templates/load_app.py.in");
const DAILY_APP_PY: &str = include_str!("templates/daily_app.py.in");
const README: &str = include_str!("templates/README.md.in");

/// The componentize-py release the Python projects are built and tested
/// with (tests/python/requirements.txt pins the same one).
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// What the step is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Rust,
    Python,
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Language::Rust => "Rust",
            Language::Python => "Python",
        })
    }
}

/// What to make.
#[derive(Debug, Clone)]
pub struct NewStep {
    /// The step's name: lowercase letters, digits, `-` and `_`, starting
    /// with a letter (the crate's name; the manifest's has `_` for `-`).
    pub name: String,
    pub kind: PipelineKind,
    pub language: Language,
    /// The folder to make; it must not exist yet, or be empty.
    pub dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error(
        "`{0}` is not a step name: use lowercase letters, digits, `-` and `_`, starting with a letter"
    )]
    BadName(String),
    #[error("{0} already exists and is not empty; nothing was written")]
    NotEmpty(PathBuf),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// The names a step goes by.
struct Names {
    /// The crate's (and the folder's default) name, as given.
    krate: String,
    /// In manifests and in the `.wasm` file's name.
    step: String,
    /// The Rust type that implements the world.
    type_name: String,
}

impl Names {
    fn of(name: &str) -> Result<Self, ScaffoldError> {
        let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !valid {
            return Err(ScaffoldError::BadName(name.to_string()));
        }
        let type_name = name
            .split(['-', '_'])
            .filter(|part| !part.is_empty())
            .map(|part| {
                let mut chars = part.chars();
                chars
                    .next()
                    .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                    .unwrap_or_default()
            })
            .collect();
        Ok(Self {
            krate: name.to_string(),
            step: name.replace('-', "_"),
            type_name,
        })
    }
}

/// The component a project's build writes, relative to the project.
fn wasm_path(language: Language, step: &str) -> String {
    match language {
        Language::Rust => format!("target/wasm32-wasip2/release/{step}.wasm"),
        Language::Python => format!("{step}.wasm"),
    }
}

/// The WIT world of a pipeline kind.
fn world(kind: PipelineKind) -> &'static str {
    match kind {
        PipelineKind::Load => "step",
        PipelineKind::Daily => "daily-step",
    }
}

/// How the README names a pipeline kind's steps.
fn kind_words(kind: PipelineKind) -> &'static str {
    match kind {
        PipelineKind::Load => "load-pipeline",
        PipelineKind::Daily => "daily-run",
    }
}

/// Makes the project; returns the files written, relative to `dir`.
pub fn create(request: &NewStep) -> Result<Vec<PathBuf>, ScaffoldError> {
    let names = Names::of(&request.name)?;
    let dir = &request.dir;
    let empty = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(ScaffoldError::Io(dir.clone(), e)),
    };
    if !empty {
        return Err(ScaffoldError::NotEmpty(dir.clone()));
    }
    let files = project_files(request, &names);
    let mut written = Vec::with_capacity(files.len());
    for (relative, bytes) in files {
        let path = dir.join(&relative);
        let io = |e| ScaffoldError::Io(path.clone(), e);
        std::fs::create_dir_all(path.parent().unwrap_or(dir)).map_err(io)?;
        std::fs::write(&path, bytes).map_err(io)?;
        written.push(relative);
    }
    Ok(written)
}

/// Every file of the project, by its path in the project.
fn project_files(request: &NewStep, names: &Names) -> Vec<(PathBuf, Vec<u8>)> {
    let wasm = wasm_path(request.language, &names.step);
    let fill = |template: &str| {
        template
            .replace("{{crate}}", &names.krate)
            .replace("{{step}}", &names.step)
            .replace("{{Type}}", &names.type_name)
            .replace("{{world}}", world(request.kind))
            .replace("{{wasm}}", &wasm)
    };
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut text = |path: &str, content: String| files.push((path.into(), content.into_bytes()));
    match (request.language, request.kind) {
        (Language::Rust, kind) => {
            text("Cargo.toml", fill(CARGO_TOML));
            text("Cargo.lock", CARGO_LOCK.to_string());
            text(".cargo/config.toml", CARGO_CONFIG.to_string());
            let lib = match kind {
                PipelineKind::Load => LOAD_LIB_RS,
                PipelineKind::Daily => DAILY_LIB_RS,
            };
            text("src/lib.rs", fill(lib));
            text(".gitignore", "/target\n".into());
        }
        (Language::Python, kind) => {
            let app = match kind {
                PipelineKind::Load => LOAD_APP_PY,
                PipelineKind::Daily => DAILY_APP_PY,
            };
            text("app.py", fill(app));
            text(".gitignore", format!("/{wasm}\n__pycache__/\n"));
        }
    }
    text("manifest.toml", manifest(request.kind, &names.step, &wasm));
    text("README.md", readme(request, names, &wasm));
    for (name, content) in wit_package::FILES {
        text(&format!("wit/{name}"), content.to_string());
    }
    files.push(("sample/trips.parquet".into(), sample_parquet(false)));
    if request.kind == PipelineKind::Load {
        files.push((
            "sample/trips_with_email.parquet".into(),
            sample_parquet(true),
        ));
    }
    files
}

/// The step's manifest entry, with the config its template reads.
fn step_entry(kind: PipelineKind, step: &str, wasm: &str) -> String {
    let (grants, config) = match kind {
        PipelineKind::Load => ("\"staged-files\", \"log\"", "forbidden = [\"email\"]\n"),
        PipelineKind::Daily => (
            "\"lake-sql\", \"log\"",
            "source = \"trips\"\ntable = \"trips_per_client\"\n",
        ),
    };
    format!(
        "[[steps]]\nname = \"{step}\"\ncomponent = \"{wasm}\"\ngrants = [{grants}]\n\
         time_limit_ms = 5000\n[steps.config]\n{config}"
    )
}

/// A load project's manifest is lakehost's default load pipeline with the
/// step after `validate_parquet` (its files are parquet by then); a daily
/// project's runs the step alone.
fn manifest(kind: PipelineKind, step: &str, wasm: &str) -> String {
    let entry = step_entry(kind, step, wasm);
    match kind {
        PipelineKind::Load => {
            let default = builtin::manifest(PipelineKind::Load);
            let body = &default[default.find("version = ").unwrap_or(0)..];
            let second = body
                .match_indices("[[steps]]")
                .nth(1)
                .map_or(body.len(), |(at, _)| at);
            format!(
                "# lakehost's default load steps, with {step} after validate_parquet.\n\
                 # Each step is a WASI component; `grants` are the only host capabilities it can use.\n\
                 {}{entry}\n{}",
                &body[..second],
                &body[second..]
            )
        }
        PipelineKind::Daily => format!(
            "# A daily run of {step} alone; an org's daily.toml lists every step it runs.\n\
             version = 1\n\n{entry}"
        ),
    }
}

fn readme(request: &NewStep, names: &Names, wasm: &str) -> String {
    let world = world(request.kind);
    let build = match request.language {
        Language::Rust => format!(
            "```sh\ncargo build --release --target wasm32-wasip2\n```\n\n\
             writes `{wasm}`. With cargo component 0.21 \
             (`cargo install cargo-component --locked`), \
             `cargo component build --release --target wasm32-wasip2` writes the same file."
        ),
        Language::Python => format!(
            "```sh\npip install {COMPONENTIZE_PY}\n\
             componentize-py -d wit -w {world} componentize app -o {wasm}\n```\n\n\
             writes `{wasm}` (the Python interpreter is inside it: expect about 18 MB, \
             and a few seconds for a server to compile it the first time; it keeps the result)."
        ),
    };
    let (check_args, dry_run, dry_run_what, next_job) = match request.kind {
        PipelineKind::Load => (
            "manifest.toml".to_string(),
            "lakehost pipeline dry-run --manifest manifest.toml --table trips \
             --check-sum '{\"count(*)\": 3}' sample/trips.parquet\n\
             lakehost pipeline dry-run --manifest manifest.toml --table trips \
             --check-sum '{\"count(*)\": 3}' sample/trips_with_email.parquet"
                .to_string(),
            "files as one load of a new table (the second fails: it has a forbidden column)",
            "commit",
        ),
        PipelineKind::Daily => (
            "--daily manifest.toml".to_string(),
            "lakehost pipeline dry-run --daily --manifest manifest.toml \
             --seed trips=sample/trips.parquet"
                .to_string(),
            "lake (the table `trips` seeded from the sample file)",
            "daily run",
        ),
    };
    let daily_flag = if request.kind == PipelineKind::Daily {
        " --daily"
    } else {
        ""
    };
    let source = match request.language {
        Language::Rust => "src/lib.rs",
        Language::Python => "app.py",
    };
    README
        .replace("{{crate}}", &names.krate)
        .replace("{{kind}}", kind_words(request.kind))
        .replace("{{language}}", &request.language.to_string())
        .replace("{{world}}", world)
        .replace("{{source}}", source)
        .replace("{{build}}", &build)
        .replace("{{check_args}}", &check_args)
        .replace("{{dry_run}}", &dry_run)
        .replace("{{dry_run_what}}", dry_run_what)
        .replace("{{wasm_file}}", &format!("{}.wasm", names.step))
        .replace("{{manifest_file}}", request.kind.file_name())
        .replace("{{daily_flag}}", daily_flag)
        .replace("{{next_job}}", next_job)
}

/// Three trips of service clients 1 and 2 (`service_client_id`, `trip_id`,
/// `fare`), and with `email` an extra column the load template forbids.
fn sample_parquet(email: bool) -> Vec<u8> {
    let mut fields = vec![
        Field::new("service_client_id", DataType::Int64, false),
        Field::new("trip_id", DataType::Int64, false),
        Field::new("fare", DataType::Float64, false),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![1, 2, 1])),
        Arc::new(Int64Array::from(vec![1, 2, 3])),
        Arc::new(Float64Array::from(vec![12.5, 8.0, 30.25])),
    ];
    if email {
        fields.push(Field::new("email", DataType::Utf8, true));
        columns.push(Arc::new(StringArray::from(vec![
            Some("a@example.com"),
            None,
            Some("c@example.com"),
        ])));
    }
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .expect("the sample's columns match its schema");
    let mut bytes = Vec::new();
    let mut writer =
        ArrowWriter::try_new(&mut bytes, batch.schema(), None).expect("an in-memory writer");
    writer.write(&batch).expect("the sample is written");
    writer.close().expect("the sample is finished");
    bytes
}

#[cfg(test)]
mod tests;
