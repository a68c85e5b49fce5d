//! The WIT package steps are built against, `lakehost:pipeline@<version>`,
//! as this host was built with it: the repository's `wit/` folder (the
//! files the host's `bindgen!` reads), compiled in, so that
//! `lakehost pipeline wit` hands a plugin author outside the repository
//! exactly the worlds this server links.

use std::path::{Path, PathBuf};

/// Every file of `wit/`, by name.
pub const FILES: &[(&str, &str)] = &[
    ("pipeline.wit", include_str!("../../../wit/pipeline.wit")),
    ("README.md", include_str!("../../../wit/README.md")),
];

/// The package's id as its `package` line declares it,
/// `lakehost:pipeline@0.1.0`.
pub fn package_id() -> &'static str {
    FILES[0]
        .1
        .lines()
        .find_map(|line| line.strip_prefix("package "))
        .and_then(|rest| rest.strip_suffix(';'))
        .expect("pipeline.wit declares its package")
}

/// Writes the package's files into `dir` (created when missing) and
/// returns their paths. Files of the same names are replaced; nothing else
/// in `dir` is touched.
pub fn write_to(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    FILES
        .iter()
        .map(|(name, text)| {
            let path = dir.join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_package_holds_every_file_of_wit_as_it_is() {
        let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
        let mut on_disk: Vec<String> = std::fs::read_dir(&wit)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut packaged: Vec<String> = FILES.iter().map(|(name, _)| name.to_string()).collect();
        packaged.sort();
        assert_eq!(packaged, on_disk, "wit/ and the packaged files differ");
        for (name, text) in FILES {
            assert_eq!(&std::fs::read_to_string(wit.join(name)).unwrap(), text);
        }
        assert_eq!(package_id(), "lakehost:pipeline@0.1.0");
    }
}
