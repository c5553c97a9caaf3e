//! Released SQL files never change: databases were installed from them and upgrades start
//! from exactly them. Each backend keeps one base script (the first release's install
//! script, in its `released/` folder) and the chain of upgrade scripts; an older release is
//! installed as its base plus the chain up to it (upgrade.rs beside this file).
//! `sql/released/SHA256SUMS` lists every one of them with its SHA-256: a listed file that is
//! missing or differs fails, and so does a file in those places that the manifest does not
//! list (a release adds its lines, see the manifest's header) or a released/ folder holding
//! anything but its base. No database: plain files.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

const MANIFEST: &str = "sql/released/SHA256SUMS";
/// The one install script a released/ folder keeps: the first release's.
const BASE: &str = "pg_idempotency--0.1.0.sql";
/// Files a released/ folder may hold besides its base: its description and the manifest.
const NOT_RELEASED: &[&str] = &["README.md", "SHA256SUMS"];
/// The folders of each backend's upgrade scripts (`pg_idempotency--A--B.sql`).
const UPGRADE_FOLDERS: &[&str] = &["pg_idempotency/sql", "sql/upgrade"];
/// Folders that are not the project's sources.
const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules"];
/// The version under development: an upgrade script reaching it is released with it.
const DEVELOPING: &str = env!("CARGO_PKG_VERSION");

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

/// The version an upgrade script's name reaches (`pg_idempotency--A--B.sql`: B), if it is one.
fn upgrade_target(name: &str) -> Option<&str> {
    let versions = name
        .strip_prefix("pg_idempotency--")?
        .strip_suffix(".sql")?;
    let (_, to) = versions.split_once("--")?;
    Some(to)
}

/// Every upgrade script of both backends, as a path from `root`.
fn upgrade_scripts(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = UPGRADE_FOLDERS
        .iter()
        .flat_map(|folder| {
            std::fs::read_dir(root.join(folder))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| upgrade_target(name).is_some())
                .map(move |name| format!("{folder}/{name}"))
        })
        .collect();
    out.sort();
    out
}

/// What is wrong with the released files under `root` against `manifest`, `developing`
/// being the version under development (empty: nothing).
fn problems(root: &Path, manifest: &str, developing: &str) -> Vec<String> {
    let listed = entries(manifest);
    let is_listed = |path: &str| listed.iter().any(|(_, p)| p == path);
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
        if !NOT_RELEASED.contains(&name) && !(name == BASE && is_listed(&path)) {
            out.push(format!(
                "{path}: a released/ folder keeps only its base script {BASE}, listed in {MANIFEST} \
                 (an older release is the base plus the upgrade scripts)"
            ));
        }
    }
    // Released: some listed file reaches it (the upgrade scripts of its release).
    let developing_released = listed
        .iter()
        .any(|(_, p)| p.ends_with(&format!("--{developing}.sql")));
    for path in upgrade_scripts(root) {
        let reaches = upgrade_target(path.rsplit('/').next().unwrap_or(&path));
        let in_development = reaches == Some(developing) && !developing_released;
        if !is_listed(&path) && !in_development {
            out.push(format!(
                "{path}: an upgrade script not listed in {MANIFEST} (a release adds its line)"
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
    let listed = entries(&manifest);
    for folder in ["pg_idempotency/sql/released", "sql/released"] {
        let base = format!("{folder}/{BASE}");
        assert!(
            listed.iter().any(|(_, p)| *p == base),
            "{MANIFEST} does not list the base script {base}"
        );
    }
    let found = problems(&root(), &manifest, DEVELOPING);
    assert!(found.is_empty(), "released files:\n{}", found.join("\n"));
}

/// The check itself, on a copy: an edited file, a missing one, a full install script kept
/// again, an unlisted upgrade script and one reaching a released version are each
/// reported; an unlisted upgrade script reaching the version under development is not.
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
        problems(&copy, &manifest, DEVELOPING).is_empty(),
        "an exact copy passes"
    );

    let (_, changed) = &listed[0];
    let mut text = std::fs::read_to_string(copy.join(changed)).unwrap();
    text.push('\n');
    std::fs::write(copy.join(changed), text).unwrap();
    let (_, missing) = &listed[listed.len() - 1];
    std::fs::remove_file(copy.join(missing)).unwrap();
    let write = |path: &str| std::fs::write(copy.join(path), "-- not released\n").unwrap();
    let full_copy = "sql/released/pg_idempotency--0.2.0.sql";
    write(full_copy);
    write("sql/released/README.md");
    let unlisted = "sql/upgrade/pg_idempotency--0.8.0--0.9.0.sql";
    write(unlisted);
    // Reaches 0.8.0, which the manifest shows released: reported even while 0.8.0 is the
    // version under development.
    let to_released = "pg_idempotency/sql/pg_idempotency--0.3.0--0.8.0.sql";
    write(to_released);
    let dev_script = "pg_idempotency/sql/pg_idempotency--0.8.0--9.9.9.sql";
    write(dev_script);
    write("pg_idempotency/sql/not-an-upgrade.sql");

    for developing in ["9.9.9", "0.8.0"] {
        let found = problems(&copy, &manifest, developing);
        let mut expected = vec![
            format!("{changed}: changed after its release"),
            format!("{missing}: listed in {MANIFEST} but missing"),
            format!("{full_copy}: a released/ folder keeps only its base script"),
            format!("{to_released}: an upgrade script not listed"),
        ];
        // Unlisted, and reaching a version that is not under development.
        if developing != "9.9.9" {
            expected.push(format!("{dev_script}: an upgrade script not listed"));
        }
        expected.push(format!("{unlisted}: an upgrade script not listed"));
        assert_eq!(
            found.len(),
            expected.len(),
            "developing {developing}: {found:#?}"
        );
        for (f, e) in found.iter().zip(&expected) {
            assert!(
                f.starts_with(e.as_str()),
                "developing {developing}: {f}\nexpected {e}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&copy);
}
