//! Released SQL files never change: databases were installed from them and the upgrade
//! scripts start from exactly them. `sql/released/SHA256SUMS` lists each with its SHA-256;
//! a listed file that is missing or differs fails, and so does a file under a `released/`
//! folder that the manifest does not list (a release adds its lines, see the manifest's
//! header). No database: plain files.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

const MANIFEST: &str = "sql/released/SHA256SUMS";
/// Files a released/ folder may hold besides released SQL: its description and the manifest.
const NOT_RELEASED: &[&str] = &["README.md", "SHA256SUMS"];
/// Folders that are not the project's sources.
const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules"];

/// (hash, path from the root) for each line of the manifest; `#` lines are its header.
fn entries(manifest: &str) -> Vec<(String, String)> {
    manifest
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (hash, path) = l
                .split_once("  ")
                .unwrap_or_else(|| panic!("{MANIFEST}: not '<sha256>  <path>': {l}"));
            (hash.to_string(), path.to_string())
        })
        .collect()
}

fn sha256_hex(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|bytes| format!("{:x}", Sha256::digest(bytes)))
}

/// Every file below a folder named `released`, as a path from `root` with `/` separators.
fn files_in_released_folders(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, inside_released: bool, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !SKIPPED_DIRS.contains(&name.as_str()) {
                    walk(root, &path, inside_released || name == "released", out);
                }
            } else if inside_released {
                let rel: Vec<String> = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(rel.join("/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, false, &mut out);
    out.sort();
    out
}

/// What is wrong with the released files under `root` against `manifest` (empty: nothing).
fn problems(root: &Path, manifest: &str) -> Vec<String> {
    let listed = entries(manifest);
    let mut out = Vec::new();
    for (hash, path) in &listed {
        match sha256_hex(&root.join(path)) {
            None => out.push(format!("{path}: listed in {MANIFEST} but missing")),
            Some(actual) if &actual != hash => out.push(format!(
                "{path}: changed after its release (SHA-256 {actual}, released as {hash})"
            )),
            Some(_) => {}
        }
    }
    for path in files_in_released_folders(root) {
        let name = path.rsplit('/').next().unwrap_or(&path);
        if !NOT_RELEASED.contains(&name) && !listed.iter().any(|(_, p)| *p == path) {
            out.push(format!(
                "{path}: in a released/ folder but not listed in {MANIFEST} (a release adds its line)"
            ));
        }
    }
    out
}

fn root() -> PathBuf {
    pg_idempotency_tests::root()
}

#[test]
fn released_files_are_listed_present_and_unchanged() {
    let manifest = std::fs::read_to_string(root().join(MANIFEST))
        .unwrap_or_else(|e| panic!("{MANIFEST}: {e}"));
    assert!(
        !entries(&manifest).is_empty(),
        "{MANIFEST} lists no file: 0.1.0 is released"
    );
    let found = problems(&root(), &manifest);
    assert!(found.is_empty(), "released files:\n{}", found.join("\n"));
}

/// The check itself, on a copy: an edited file, a missing one and an unlisted one are each
/// reported.
#[test]
fn the_check_reports_a_changed_a_missing_and_an_unlisted_file() {
    let copy = std::env::temp_dir().join(format!("pgidem-released-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    let manifest = std::fs::read_to_string(root().join(MANIFEST)).unwrap();
    let listed = entries(&manifest);
    assert!(
        listed.len() >= 2,
        "one file to change and another to remove"
    );
    for (_, path) in &listed {
        let to = copy.join(path);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root().join(path), &to).unwrap();
    }
    assert!(
        problems(&copy, &manifest).is_empty(),
        "an exact copy passes"
    );

    let (_, changed) = &listed[0];
    let mut text = std::fs::read_to_string(copy.join(changed)).unwrap();
    text.push('\n');
    std::fs::write(copy.join(changed), text).unwrap();
    let (_, missing) = &listed[listed.len() - 1];
    std::fs::remove_file(copy.join(missing)).unwrap();
    let unlisted = "sql/released/pg_idempotency--9.9.9.sql";
    std::fs::create_dir_all(copy.join("sql/released")).unwrap();
    std::fs::write(copy.join(unlisted), "-- not released\n").unwrap();
    std::fs::write(copy.join("sql/released/README.md"), "described\n").unwrap();

    let found = problems(&copy, &manifest);
    let _ = std::fs::remove_dir_all(&copy);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].starts_with(&format!("{changed}: changed after its release")));
    assert!(found[1].starts_with(&format!("{missing}: listed in {MANIFEST} but missing")));
    assert!(found[2].starts_with(&format!("{unlisted}: in a released/ folder")));
}
