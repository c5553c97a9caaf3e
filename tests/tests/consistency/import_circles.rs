//! No two files of a product crate import each other: a module that names another through
//! `crate::` is not named back by it. (Two files that need each other are one job cut in
//! two, or a third file's job hidden in both.) Only `crate::` paths count: a module's own
//! children (`mod x;` and `x::...`) and `super::` are its own parts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The source folders of the crates that ship (the tests' and benchmark's own are left out).
const CRATES: &[&str] = &[
    "canon/src",
    "protocol/src",
    "client/src",
    "client-macros/src",
    "server/src",
    "mcp/src",
    "pg_idempotency/src",
    "xtask/src",
];

fn root() -> PathBuf {
    pg_idempotency_tests::root()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src`: `a/b.rs` and `a/b/mod.rs` are `a::b`; lib.rs and
/// main.rs are the crate root (empty).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The `crate::a::b::...` paths a file names (in `use` lines, braces included, and inline).
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = &rest[..at];
            let after = &rest[at + "crate::".len()..];
            rest = after;
            // `$crate::` (a macro's) and `pg_idempotency_crate::` are not this crate's path.
            if before.ends_with('$') || before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
            {
                continue;
            }
            let path: Vec<String> = after
                .split("::")
                .map(|seg| {
                    seg.chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect::<String>()
                })
                .take_while(|seg| !seg.is_empty())
                .collect();
            if !path.is_empty() {
                paths.push(path);
            }
            // `crate::{a, b::c}`: each member is a path of its own.
            if let Some(group) = after.strip_prefix('{') {
                for member in group.split([',', '}']) {
                    let seg: Vec<String> = member
                        .trim()
                        .split("::")
                        .map(|s| s.trim().to_string())
                        .take_while(|s| {
                            !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_')
                        })
                        .collect();
                    if !seg.is_empty() {
                        paths.push(seg);
                    }
                }
            }
        }
    }
    paths
}

#[test]
fn no_two_product_files_import_each_other() {
    let mut circles = Vec::new();
    for krate in CRATES {
        let src = root().join(krate);
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let modules: BTreeMap<Vec<String>, PathBuf> = files
            .iter()
            .map(|f| (module_of(&src, f), f.clone()))
            .collect();
        // Each file's imports: the longest module path that is a prefix of a named path.
        let mut imports: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (module, file) in &modules {
            let text = std::fs::read_to_string(file).unwrap();
            for path in crate_paths(&text) {
                let target = (1..=path.len())
                    .rev()
                    .map(|n| path[..n].to_vec())
                    .find(|p| modules.contains_key(p));
                if let Some(target) = target {
                    // A module's own descendants are its parts, not an import.
                    if target != *module && !target.starts_with(module.as_slice()) {
                        imports.entry(module.clone()).or_default().insert(target);
                    }
                }
            }
        }
        for (a, targets) in &imports {
            for b in targets {
                if a < b && imports.get(b).is_some_and(|t| t.contains(a)) {
                    circles.push(format!(
                        "{}: {} and {}",
                        krate,
                        modules[a].strip_prefix(&src).unwrap().display(),
                        modules[b].strip_prefix(&src).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "files that import each other (move what both need into one of them, or into a third file):\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_check_sees_a_circle() {
    let a = crate_paths("use crate::store::{Record, State};\nlet x = crate::batch::check(1);");
    assert_eq!(
        a,
        vec![
            vec!["store".to_string()],
            vec!["batch".to_string(), "check".into()]
        ]
    );
    let grouped = crate_paths("use crate::{fetch, relations::oids};");
    assert!(grouped.contains(&vec!["fetch".to_string()]), "{grouped:?}");
    assert!(
        grouped.contains(&vec!["relations".to_string(), "oids".into()]),
        "{grouped:?}"
    );
    assert!(crate_paths("$crate::entry::call(x)").is_empty());
}
