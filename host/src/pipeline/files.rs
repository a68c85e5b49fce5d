//! The one door through which the pipelines read a file of `pipeline.dir`:
//! a manifest's text ([`read_manifest`]) and a step's `.wasm` file
//! ([`ComponentFile::open`], then [`OpenedFile::read`]). The server's
//! commits and daily runs, the manifest watch and the command-line tools
//! (`pipeline check`, `pipeline dry-run`) all read through it, so each of
//! them refuses the same files, with the same reasons:
//!
//! - **Inside its folder.** A component is named relative to its manifest;
//!   an absolute path, or `..` that climbs above the pipeline folder, is the
//!   manifest's error ([`ComponentFile::resolve`], before any file is
//!   touched). At open the file's canonical path (every symlink resolved)
//!   must lie under the folder's canonical path, so a symlink inside the
//!   folder reaches nothing outside it. The folder itself may be a symlink.
//! - **A regular file.** Directories, FIFOs, sockets and devices (or
//!   symlinks to them) are refused from their metadata before they are
//!   opened, and again from the opened handle's; the open is non-blocking
//!   and does not follow a final symlink, so a FIFO swapped in between can
//!   neither hang it nor be read.
//! - **Bounded.** The size is checked on the opened handle's metadata, and
//!   the read stops one byte past the cap, so a file that grows after the
//!   check is refused without being read whole. A sparse file of gigabytes
//!   costs nothing: it is refused by its size, never read.
//!
//! What it does not close: a folder *inside* `pipeline.dir` renamed to a
//! symlink between the canonical check and the open could still lead the
//! open outside; the file reached is still regular and bounded. Whoever can
//! rename folders in `pipeline.dir` already writes its manifests.
//!
//! It must never read past a cap, block on a file, or put the server's
//! directories into an error: errors reach the caller, and whoever reports
//! one names the file as the manifest does (the step and its component).

use std::{
    fs::{File, FileType, OpenOptions},
    io::Read,
    path::{Component, Path, PathBuf},
    time::SystemTime,
};

use crate::config::PipelineConfig;

/// The most a manifest may hold: the longest real manifest is a few
/// kilobytes.
pub const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

/// How messages name the component cap (the config key).
const COMPONENT_LIMIT: &str = "pipeline.max_component_bytes";
/// How messages name the manifest cap.
const MANIFEST_LIMIT: &str = "the manifest limit";

/// Where a pipeline's files may be read from and how big a component may
/// be: a server's `[pipeline]` ([`PipelineFiles::of`]), or what the
/// command-line tools assume around a manifest ([`PipelineFiles::around`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineFiles {
    /// The folder every manifest and component must stay inside.
    pub dir: PathBuf,
    /// The largest `.wasm` file read, in bytes.
    pub max_component_bytes: u64,
}

impl PipelineFiles {
    /// `dir` under the default cap (`pipeline.max_component_bytes`'s).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            max_component_bytes: PipelineConfig::default().max_component_bytes,
        }
    }

    /// A server's: `pipeline.dir` and `pipeline.max_component_bytes`.
    pub fn of(config: &PipelineConfig) -> Self {
        Self {
            dir: config.dir.clone(),
            max_component_bytes: config.max_component_bytes,
        }
    }

    /// The command-line tools' (which read no config), for the manifest at
    /// `manifest`: the folder a server would hold it in, which is `<dir>`
    /// for `<dir>/orgs/<org>/<file>` (a server with `pipeline.dir = <dir>`),
    /// else the manifest's own folder; and the default cap.
    pub fn around(manifest: &Path) -> Self {
        let own = folder_of(manifest);
        let dir = own
            .parent()
            .filter(|orgs| orgs.file_name().is_some_and(|name| name == "orgs"))
            .map_or(own, folder_of);
        Self::new(dir)
    }
}

/// The folder `path` is in: its parent, or `.` for a bare file name.
pub fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Why a file of the pipelines was not read. Its text is the reason only:
/// whoever reports it names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileRefused {
    /// With every symlink resolved, it lies outside the pipeline folder.
    #[error("it lies outside the pipeline folder (through a symlink or `..`)")]
    OutsideFolder,
    /// A directory, FIFO, socket or device.
    #[error("not a regular file but {0}")]
    NotRegular(&'static str),
    /// Bigger than its cap, by the opened file's metadata (nothing read).
    #[error("{size} bytes, more than {limit} = {max}")]
    TooLarge {
        size: u64,
        max: u64,
        limit: &'static str,
    },
    /// It grew past its cap after the size was checked; the read stopped
    /// one byte past it.
    #[error("it grew past {limit} = {max} while it was read")]
    GrewPastLimit { max: u64, limit: &'static str },
    /// A manifest that is not UTF-8.
    #[error("not UTF-8 text")]
    NotText,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Why a manifest's `component` path is refused before any file is touched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathRefused {
    /// Absolute: not echoed, since it names the server's own folders.
    #[error(
        "absolute paths are refused; name the file relative to the manifest, inside the pipeline folder"
    )]
    Absolute,
    /// Its `..` climb above the pipeline folder.
    #[error("`{0}` leaves the pipeline folder")]
    LeavesFolder(String),
}

/// A component `.wasm` file as a manifest names it, with the folder it must
/// stay inside and its cap: the only way the engine gets at a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentFile {
    path: PathBuf,
    dir: PathBuf,
    max_bytes: u64,
}

impl ComponentFile {
    /// `written` (a manifest's `component`), relative to the manifest's
    /// folder `base`, read under `files`' rules. The problem, for the
    /// manifest's error, when it is absolute or its `..` climb above
    /// `files.dir`. Touches no file: symlinks are judged at open.
    pub fn resolve(written: &str, base: &Path, files: &PipelineFiles) -> Result<Self, PathRefused> {
        let relative = Path::new(written);
        if relative.has_root() || matches!(relative.components().next(), Some(Component::Prefix(_)))
        {
            return Err(PathRefused::Absolute);
        }
        // How deep `base` lies below the pipeline folder, then each step of
        // the path: a `..` at depth 0 leaves the folder.
        let below = base.strip_prefix(&files.dir).unwrap_or(Path::new(""));
        let mut depth = 0usize;
        for part in below.components().chain(relative.components()) {
            match part {
                Component::Normal(_) => depth += 1,
                Component::CurDir => {}
                Component::ParentDir if depth > 0 => depth -= 1,
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(PathRefused::LeavesFolder(written.to_string()));
                }
            }
        }
        Ok(Self {
            path: base.join(relative),
            dir: files.dir.clone(),
            max_bytes: files.max_component_bytes,
        })
    }

    /// The file as the manifest names it, joined to the manifest's folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens it for reading, or says why not: outside the folder, not a
    /// regular file, or bigger than the cap. Never blocks, reads nothing.
    pub fn open(&self) -> Result<OpenedFile, FileRefused> {
        open_within(&self.path, &self.dir, self.max_bytes, COMPONENT_LIMIT)
    }
}

/// The text of the manifest at `path`, which must lie inside `dir`: a
/// regular file of at most [`MAX_MANIFEST_BYTES`], UTF-8.
pub fn read_manifest(path: &Path, dir: &Path) -> Result<String, FileRefused> {
    let bytes = open_within(path, dir, MAX_MANIFEST_BYTES, MANIFEST_LIMIT)?.read()?;
    String::from_utf8(bytes).map_err(|_| FileRefused::NotText)
}

/// A regular file inside its folder, opened, no bigger than its cap when
/// opened.
#[derive(Debug)]
pub struct OpenedFile {
    file: File,
    real: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
    max: u64,
    limit: &'static str,
}

impl OpenedFile {
    /// What tells this file's content from another's without reading it:
    /// its canonical path, its size and its modification time.
    pub fn identity(&self) -> (&Path, u64, Option<SystemTime>) {
        (&self.real, self.len, self.modified)
    }

    /// Its bytes: at most the cap, read from the handle that was checked.
    pub fn read(self) -> Result<Vec<u8>, FileRefused> {
        read_bounded(&self.file, self.len, self.max, self.limit)
    }
}

/// At most `max` bytes of `reader`: it is read one byte past the cap, so
/// an endless or growing source is refused after `max + 1` bytes, never
/// read whole. `expected` (the checked size) only sizes the buffer.
fn read_bounded(
    reader: impl Read,
    expected: u64,
    max: u64,
    limit: &'static str,
) -> Result<Vec<u8>, FileRefused> {
    let mut bytes = Vec::with_capacity(usize::try_from(expected.min(max)).unwrap_or(0));
    reader.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(FileRefused::GrewPastLimit { max, limit });
    }
    Ok(bytes)
}

/// Opens `path` if it lies inside `dir` (symlinks resolved), is a regular
/// file and holds at most `max` bytes; `limit` names the cap in messages.
fn open_within(
    path: &Path,
    dir: &Path,
    max: u64,
    limit: &'static str,
) -> Result<OpenedFile, FileRefused> {
    let dir = std::fs::canonicalize(dir)?;
    // Resolving touches only names and links: a FIFO is not opened here.
    let real = std::fs::canonicalize(path)?;
    if !real.starts_with(&dir) {
        return Err(FileRefused::OutsideFolder);
    }
    // Before the open: opening a device or a FIFO can block or act.
    let before = std::fs::metadata(&real)?;
    regular_within(&before, max, limit)?;
    let file = open_nonblocking(&real)?;
    // The handle's own metadata: what is read is what was checked.
    let opened = file.metadata()?;
    regular_within(&opened, max, limit)?;
    Ok(OpenedFile {
        file,
        real,
        len: opened.len(),
        modified: opened.modified().ok(),
        max,
        limit,
    })
}

/// A regular file of at most `max` bytes, or the refusal.
fn regular_within(
    meta: &std::fs::Metadata,
    max: u64,
    limit: &'static str,
) -> Result<(), FileRefused> {
    if !meta.is_file() {
        return Err(FileRefused::NotRegular(kind_of(meta.file_type())));
    }
    if meta.len() > max {
        return Err(FileRefused::TooLarge {
            size: meta.len(),
            max,
            limit,
        });
    }
    Ok(())
}

/// Opens for reading without waiting for a FIFO's writer and without
/// following a final symlink (one swapped in after the canonical check).
/// `O_NONBLOCK` changes nothing for a regular file's reads.
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    }
    options.open(path)
}

/// What a file that is not regular is, for the message.
fn kind_of(kind: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symlink"
    } else {
        "a special file"
    }
}

#[cfg(test)]
pub(crate) mod tests;
