//! Reading a manifest to deploy it: the `.wasm` files its steps name (by
//! path, relative to the manifest's folder), each read once and under the
//! size cap, and its text with each path replaced by the file's digest, every
//! other byte (comments, layout, the other keys) as the author wrote it.
//!
//! It finds the components and nothing more: every other check of the
//! manifest is the server's. It never calls the API (`deploy.rs` does).

use std::{
    collections::BTreeMap,
    io::Read as _,
    ops::Range,
    path::{Path, PathBuf},
};

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

/// The most bytes a component may be: the server's default
/// `pipeline.max_component_bytes`, checked here from the file's size so a
/// file the server would refuse is neither read whole nor sent.
const MAX_COMPONENT_BYTES: u64 = 64 * 1024 * 1024;

/// How a manifest names a stored component: `sha256:<hex>`.
const DIGEST_PREFIX: &str = "sha256:";

/// Why a manifest cannot be deployed as it is, found before anything is sent.
#[derive(Debug, thiserror::Error)]
pub(super) enum ManifestError {
    #[error("{}: cannot read it", manifest.display())]
    Read {
        manifest: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a manifest", manifest.display())]
    NotToml {
        manifest: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("{}: steps[{step}].component: cannot read {}", manifest.display(), file.display())]
    ComponentUnreadable {
        manifest: PathBuf,
        step: usize,
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}: steps[{step}].component: {} is {bytes} bytes, over the {MAX_COMPONENT_BYTES} (64 MiB) a component may be",
        manifest.display(),
        file.display()
    )]
    ComponentTooLarge {
        manifest: PathBuf,
        step: usize,
        file: PathBuf,
        bytes: u64,
    },
}

impl ManifestError {
    /// A file that cannot be read is an error (2); a manifest that reads
    /// but cannot be deployed is refused (1).
    pub(super) fn exit_code(&self) -> u8 {
        match self {
            ManifestError::Read { .. } | ManifestError::ComponentUnreadable { .. } => 2,
            ManifestError::NotToml { .. } | ManifestError::ComponentTooLarge { .. } => 1,
        }
    }
}

/// A manifest as read from disk, with the `.wasm` files it names.
#[derive(Debug)]
pub(super) struct LocalManifest {
    text: String,
    /// Each file once, however many steps name it.
    pub(super) components: Vec<LocalComponent>,
}

/// A `.wasm` file a manifest names, read.
#[derive(Debug)]
pub(super) struct LocalComponent {
    /// As the manifest writes it.
    pub(super) written: String,
    pub(super) bytes: bytes::Bytes,
    /// Its SHA-256, in lowercase hex.
    hex: String,
    /// Where the manifest's text holds its value (quotes included), in
    /// every step that names it.
    spans: Vec<Range<usize>>,
}

impl LocalComponent {
    pub(super) fn digest(&self) -> String {
        format!("{DIGEST_PREFIX}{}", self.hex)
    }
}

/// Just enough of a manifest to find its components and where their values
/// are in the text; the server reads the rest, strictly.
#[derive(Deserialize)]
struct ComponentsOnly {
    #[serde(default)]
    steps: Vec<StepComponent>,
}

#[derive(Deserialize)]
struct StepComponent {
    component: Option<toml::Spanned<String>>,
}

impl LocalManifest {
    pub(super) fn read(manifest: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read_to_string(manifest).map_err(|source| ManifestError::Read {
            manifest: manifest.to_path_buf(),
            source,
        })?;
        // `manifest.toml` has the folder `""`, which joins as the current one.
        let folder = manifest.parent().unwrap_or(Path::new(""));
        let parsed: ComponentsOnly =
            toml::from_str(&text).map_err(|source| ManifestError::NotToml {
                manifest: manifest.to_path_buf(),
                source,
            })?;
        let mut by_file: BTreeMap<PathBuf, usize> = BTreeMap::new();
        let mut components: Vec<LocalComponent> = Vec::new();
        for (step, named) in parsed.steps.into_iter().enumerate() {
            let Some(component) = named.component else {
                continue;
            };
            let span = component.span();
            let written = component.into_inner();
            if !is_component_path(&written) {
                continue;
            }
            let file = folder.join(&written);
            if let Some(&known) = by_file.get(&file) {
                components[known].spans.push(span);
                continue;
            }
            let bytes = read_component(manifest, step, &file)?;
            by_file.insert(file, components.len());
            components.push(LocalComponent {
                hex: hex::encode(Sha256::digest(&bytes)),
                written,
                bytes: bytes.into(),
                spans: vec![span],
            });
        }
        Ok(Self { text, components })
    }

    /// The manifest's text with each component path replaced by its digest,
    /// every other byte as the author wrote it.
    pub(super) fn with_digests(&self) -> String {
        let mut replacements: Vec<(Range<usize>, String)> = self
            .components
            .iter()
            .flat_map(|c| {
                let value = format!("\"{}\"", c.digest());
                c.spans
                    .iter()
                    .map(move |span| (span.clone(), value.clone()))
            })
            .collect();
        // From the end, so the spans still to replace keep their offsets.
        replacements.sort_by_key(|(span, _)| std::cmp::Reverse(span.start));
        let mut text = self.text.clone();
        for (span, value) in replacements {
            text.replace_range(span, &value);
        }
        text
    }
}

/// Whether a manifest's component names a file, as the server reads it:
/// not `builtin:`, not already a digest, and ending in `.wasm`.
fn is_component_path(component: &str) -> bool {
    !component.starts_with("builtin:")
        && !component.starts_with(DIGEST_PREFIX)
        && component.ends_with(".wasm")
}

/// A component file's bytes, refused from its size before it is read whole
/// (and again while reading, should it grow in between).
fn read_component(manifest: &Path, step: usize, file: &Path) -> Result<Vec<u8>, ManifestError> {
    let unreadable = |source| ManifestError::ComponentUnreadable {
        manifest: manifest.to_path_buf(),
        step,
        file: file.to_path_buf(),
        source,
    };
    let too_large = |bytes| ManifestError::ComponentTooLarge {
        manifest: manifest.to_path_buf(),
        step,
        file: file.to_path_buf(),
        bytes,
    };
    let opened = std::fs::File::open(file).map_err(unreadable)?;
    let size = opened.metadata().map_err(unreadable)?.len();
    if size > MAX_COMPONENT_BYTES {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    opened
        .take(MAX_COMPONENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let read = bytes.len() as u64;
    if read > MAX_COMPONENT_BYTES {
        return Err(too_large(read));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"# The org's load pipeline.
version = 1

[[steps]]
name = "validate_parquet"
component = "builtin:validate_parquet"   # built in: stays as it is
grants = ["staged-files", "log"]

[[steps]]
name = "guard"
component = "steps/guard.wasm"           # our own rule
grants = ["staged-sql", "log"]
time_limit_ms = 5000

[steps.config]
max_rows = 10

[[steps]]
name = "append"
component = 'builtin:append'
grants = ["lake-append"]
"#;

    fn sha256_hex(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    fn write(path: &Path, bytes: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn a_path_becomes_its_digest_and_nothing_else_changes() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("load.toml");
        write(&manifest, MANIFEST.as_bytes());
        write(&dir.path().join("steps/guard.wasm"), b"\0asm guard");

        let local = LocalManifest::read(&manifest).unwrap();

        let digest = format!("sha256:{}", sha256_hex(b"\0asm guard"));
        let expected = MANIFEST.replace(r#""steps/guard.wasm""#, &format!("\"{digest}\""));
        assert_eq!(local.with_digests(), expected);
        assert_eq!(local.components.len(), 1);
        assert_eq!(local.components[0].written, "steps/guard.wasm");
        assert_eq!(local.components[0].bytes, &b"\0asm guard"[..]);
        assert_eq!(local.components[0].digest(), digest);
    }

    #[test]
    fn comments_and_builtins_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("load.toml");
        write(&manifest, MANIFEST.as_bytes());
        write(&dir.path().join("steps/guard.wasm"), b"guard");

        let text = LocalManifest::read(&manifest).unwrap().with_digests();

        assert!(text.starts_with("# The org's load pipeline.\nversion = 1\n"));
        assert!(
            text.contains(
                "component = \"builtin:validate_parquet\"   # built in: stays as it is\n"
            )
        );
        assert!(text.contains("component = 'builtin:append'\n"));
        let guard = format!(
            "component = \"sha256:{}\"           # our own rule\n",
            sha256_hex(b"guard")
        );
        assert!(text.contains(&guard), "{text}");
        assert!(!text.contains("guard.wasm"));
    }

    #[test]
    fn a_manifest_of_builtins_only_is_sent_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("daily.toml");
        let text = "version = 1\n\n[[steps]]\nname = \"a\"\ncomponent = \"builtin:a\" # x\n";
        write(&manifest, text.as_bytes());

        let local = LocalManifest::read(&manifest).unwrap();

        assert!(local.components.is_empty());
        assert_eq!(local.with_digests(), text);
    }

    #[test]
    fn a_file_named_by_two_steps_is_read_once_and_replaced_twice() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("load.toml");
        let text = "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"x.wasm\"\n\
                    [[steps]]\nname = \"b\"\ncomponent = 'x.wasm'\n\
                    [[steps]]\nname = \"c\"\ncomponent = \"sha256:00\"\n";
        write(&manifest, text.as_bytes());
        write(&dir.path().join("x.wasm"), b"x");

        let local = LocalManifest::read(&manifest).unwrap();

        let digest = format!("sha256:{}", sha256_hex(b"x"));
        assert_eq!(local.components.len(), 1);
        assert_eq!(
            local.with_digests(),
            format!(
                "version = 1\n[[steps]]\nname = \"a\"\ncomponent = \"{digest}\"\n\
                 [[steps]]\nname = \"b\"\ncomponent = \"{digest}\"\n\
                 [[steps]]\nname = \"c\"\ncomponent = \"sha256:00\"\n"
            )
        );
    }

    #[test]
    fn a_path_outside_the_manifests_folder_is_read_from_that_folder() {
        // The manifest in project/pipelines, its component in
        // project/target: `../target/guard.wasm` from the manifest, whatever
        // the current folder is.
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("project/pipelines/load.toml");
        let text =
            "version = 1\n[[steps]]\nname = \"guard\"\ncomponent = \"../target/guard.wasm\"\n";
        write(&manifest, text.as_bytes());
        write(&dir.path().join("project/target/guard.wasm"), b"built");

        let local = LocalManifest::read(&manifest).unwrap();

        assert_eq!(local.components[0].bytes, &b"built"[..]);
        assert_eq!(
            local.with_digests(),
            format!(
                "version = 1\n[[steps]]\nname = \"guard\"\ncomponent = \"sha256:{}\"\n",
                sha256_hex(b"built")
            )
        );
    }

    #[test]
    fn a_missing_file_is_named_with_its_step() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("load.toml");
        write(&manifest, MANIFEST.as_bytes());

        let e = LocalManifest::read(&manifest).unwrap_err();

        let file = dir.path().join("steps/guard.wasm");
        assert!(
            matches!(&e, ManifestError::ComponentUnreadable { step: 1, file: f, .. } if *f == file)
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}: steps[1].component: cannot read {}",
                manifest.display(),
                file.display()
            )
        );
        let cause = std::error::Error::source(&e).unwrap();
        assert_eq!(
            cause.downcast_ref::<std::io::Error>().unwrap().kind(),
            std::io::ErrorKind::NotFound
        );
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn a_component_over_the_cap_is_refused_from_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("load.toml");
        write(&manifest, MANIFEST.as_bytes());
        let big = dir.path().join("steps/guard.wasm");
        write(&big, b"");
        // A sparse file: its size says it all, without its bytes on disk.
        std::fs::File::options()
            .write(true)
            .open(&big)
            .unwrap()
            .set_len(MAX_COMPONENT_BYTES + 1)
            .unwrap();

        let e = LocalManifest::read(&manifest).unwrap_err();

        assert!(
            matches!(&e, ManifestError::ComponentTooLarge { bytes, .. } if *bytes == MAX_COMPONENT_BYTES + 1),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("guard.wasm is 67108865 bytes, over the 67108864 (64 MiB)")
        );
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn text_that_is_not_toml_is_refused_with_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("load.toml");
        write(&manifest, b"version = 1\n[[steps]\n");

        let e = LocalManifest::read(&manifest).unwrap_err();

        assert!(matches!(e, ManifestError::NotToml { .. }));
        let cause = std::error::Error::source(&e).unwrap().to_string();
        assert!(cause.contains("line 2"), "{cause}");
        assert_eq!(e.exit_code(), 1);
    }
}
