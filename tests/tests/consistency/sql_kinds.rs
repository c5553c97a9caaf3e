//! Every SQL file of the two backends is of one kind, and says so: rendered by `cargo xtask
//! render-sql` (a "Generated" header naming the command that makes it; signatures.rs and
//! plain_migrations.rs fail while one is stale), frozen (a released base script, its hash
//! in sql/released/SHA256SUMS) or a source written by hand (no such header). sql/README.md
//! is the map; a generated file without its header, or a hand-written one that claims to be
//! generated, fails here.

use std::collections::BTreeSet;
use std::path::Path;

use pg_idempotency_tests::root;

/// The SQL files the renderer writes, from the repository root.
fn rendered() -> BTreeSet<String> {
    let mut files: BTreeSet<String> = [
        "pg_idempotency/sql/functions.sql",
        "sql/pg_idempotency.sql",
        "sql/proxy/pg_idempotency_proxy.sql",
    ]
    .map(String::from)
    .into();
    let migrations = xtask::render::migration::committed(&root()).unwrap();
    files.extend(migrations.into_iter().map(|(file, _)| file));
    files
}

fn sql_files(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sql_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "sql") {
            out.insert(
                path.strip_prefix(root())
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

/// The header's first lines, where a generated file says it is one.
fn header(file: &str) -> String {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    text.lines().take(12).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_generated_sql_file_says_so_and_names_its_command_and_no_other_does() {
    let rendered = rendered();
    let mut all = BTreeSet::new();
    sql_files(&root().join("sql"), &mut all);
    sql_files(&root().join("pg_idempotency/sql"), &mut all);
    let mut wrong = Vec::new();
    for file in &all {
        let head = header(file);
        let says_generated = head.contains("Generated");
        if rendered.contains(file) {
            if !says_generated
                || !(head.contains("cargo xtask render-sql")
                    || head.contains("scripts/portable-migration.sh"))
            {
                wrong.push(format!(
                    "{file}: rendered, but its header does not say so and name the command"
                ));
            }
        } else if says_generated {
            wrong.push(format!(
                "{file}: says it is generated, but the renderer does not write it"
            ));
        }
    }
    for file in &rendered {
        if !all.contains(file) {
            wrong.push(format!(
                "{file}: the renderer writes it, but it is not in the repository"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
