//! The floors of `host/src` (ARCHITECTURE.md, "Floors"): each top-level
//! module (a folder or a file of `host/src`) stands on a floor, and a module
//! may import only modules on its own floor or below. The floors are read
//! from ARCHITECTURE.md's `floors` block, so the map and this test cannot
//! disagree; the imports are read from the source as text (`crate::name`,
//! `crate::{a, b::c}` and `super::` paths that climb out of a folder).
//!
//! It also fails when a module of `host/src` is on no floor, when modules
//! of one floor import each other in a circle, and when modules of a floor
//! marked `apart` (the front ends) import each other at all.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// The floors of ARCHITECTURE.md's block: each top-level module's floor
/// number, and the floors whose modules never import each other (a line
/// `N apart: ...`).
struct Floors {
    of: BTreeMap<String, usize>,
    apart: BTreeSet<usize>,
}

fn floors(architecture: &str) -> Floors {
    let block = architecture
        .split("```floors\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("ARCHITECTURE.md has a ```floors block");
    let mut floors = Floors {
        of: BTreeMap::new(),
        apart: BTreeSet::new(),
    };
    for line in block.lines().filter(|line| !line.trim().is_empty()) {
        let (head, modules) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("a floors line is `N: module, module`: {line:?}"));
        let (number, apart) = match head.trim().strip_suffix(" apart") {
            Some(number) => (number, true),
            None => (head.trim(), false),
        };
        let number: usize = number
            .parse()
            .unwrap_or_else(|_| panic!("a floor's number: {line:?}"));
        if apart {
            floors.apart.insert(number);
        }
        for module in modules.split(',').map(str::trim) {
            let previous = floors.of.insert(module.to_string(), number);
            assert!(previous.is_none(), "{module} is on two floors");
        }
    }
    floors
}

/// Every `.rs` file under `dir`, with its path relative to `root`.
fn sources(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.strip_prefix(root).unwrap().to_path_buf());
        }
    }
}

/// The top-level module a file of `host/src` belongs to.
fn module_of(file: &Path) -> String {
    let first = file.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

/// The code of a file without its comment lines (docs name paths that are
/// not imports).
fn code(text: &str) -> String {
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The top-level modules a file names through `crate::`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            named.extend(group_heads(group));
        } else {
            named.insert(identifier(rest).to_string());
        }
    }
    named.remove("");
    named
}

/// The first name of each item of a `{...}` use group (its text after `{`).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut item_start = true;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if item_start && (c.is_alphanumeric() || c == '_') => {
                heads.push(identifier(&group[at..]).to_string());
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}

/// `super::` paths in a file nested `depth` folders deep that climb out of
/// its top-level module name a sibling top-level module.
fn climbing_paths(code: &str, depth: usize) -> BTreeSet<String> {
    let climb = "super::".repeat(depth);
    code.match_indices(&climb)
        .map(|(at, _)| identifier(&code[at + climb.len()..]).to_string())
        .filter(|name| !name.is_empty() && name != "super")
        .collect()
}

/// Who imports whom among the top-level modules.
fn imports(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    sources(src, src, &mut files);
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in files {
        let module = module_of(&file);
        let text = code(&fs::read_to_string(src.join(&file)).unwrap());
        // `a/b/c.rs` is module a::b::c: `super::` three times leaves `a`.
        let is_mod_file = file.file_name().is_some_and(|n| n == "mod.rs");
        let depth = file.components().count() - usize::from(is_mod_file);
        let mut named = crate_paths(&text);
        if depth > 0 {
            named.extend(climbing_paths(&text, depth));
        }
        let entry = graph.entry(module.clone()).or_default();
        for name in named.into_iter().filter(|name| *name != module) {
            entry
                .entry(name)
                .or_default()
                .insert(file.display().to_string());
        }
    }
    graph
}

#[test]
fn no_module_imports_a_floor_above_its_own() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = fs::read_to_string(host.join("../ARCHITECTURE.md")).unwrap();
    let floors = floors(&architecture);
    let graph = imports(&host.join("src"));
    let mut problems = Vec::new();
    for (module, named) in &graph {
        let Some(own) = floors.of.get(module) else {
            problems.push(format!("{module} is on no floor of ARCHITECTURE.md"));
            continue;
        };
        for (name, files) in named {
            // Names that are not modules of the crate (macros, items of
            // lib.rs) have no floor; only modules are checked.
            let Some(theirs) = floors.of.get(name) else {
                continue;
            };
            if theirs > own {
                problems.push(format!(
                    "{module} (floor {own}) imports {name} (floor {theirs}) in {files:?}"
                ));
            } else if theirs == own && floors.apart.contains(own) {
                problems.push(format!(
                    "{module} imports {name}, both on floor {own}, whose modules stand apart, in {files:?}"
                ));
            }
        }
    }
    for module in floors.of.keys() {
        let exists = host.join("src").join(module).is_dir()
            || host.join("src").join(format!("{module}.rs")).is_file();
        if !exists {
            problems.push(format!("{module} is on a floor but not in host/src"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn modules_of_one_floor_import_each_other_in_no_circle() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = fs::read_to_string(host.join("../ARCHITECTURE.md")).unwrap();
    let floors = floors(&architecture);
    let graph = imports(&host.join("src"));
    let edges: BTreeMap<&str, Vec<&str>> = graph
        .iter()
        .map(|(module, named)| {
            let next = named
                .keys()
                .filter(|name| {
                    floors.of.contains_key(*name) && floors.of.get(*name) == floors.of.get(module)
                })
                .map(String::as_str)
                .collect();
            (module.as_str(), next)
        })
        .collect();
    for start in edges.keys() {
        let mut path = vec![*start];
        assert!(
            !circles_back(start, &edges, &mut path),
            "modules of one floor import each other in a circle: {}",
            path.join(" -> ")
        );
    }
}

/// Whether a walk from the last module of `path` comes back to `start`;
/// `path` then holds the circle.
fn circles_back<'a>(
    start: &str,
    edges: &BTreeMap<&'a str, Vec<&'a str>>,
    path: &mut Vec<&'a str>,
) -> bool {
    let last = *path.last().unwrap();
    for next in edges.get(last).into_iter().flatten() {
        if *next == start {
            path.push(next);
            return true;
        }
        if path.contains(next) {
            continue;
        }
        path.push(next);
        if circles_back(start, edges, path) {
            return true;
        }
        path.pop();
    }
    false
}

#[test]
fn the_reader_sees_use_groups_and_climbing_paths() {
    let code = "use crate::{a::{b, c}, d, e::f};\nlet x = crate::g::h();\nsuper::super::i::j";
    assert_eq!(
        crate_paths(code),
        ["a", "d", "e", "g"].map(String::from).into()
    );
    assert_eq!(climbing_paths(code, 2), ["i"].map(String::from).into());
    assert!(code_of_comment_is_skipped());
}

fn code_of_comment_is_skipped() -> bool {
    crate_paths(&code("//! see crate::api\n/// crate::pg\nfn f() {}")).is_empty()
}
