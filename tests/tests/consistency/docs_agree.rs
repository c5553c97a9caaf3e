//! The pages that list the protocol's facts list every one of them as protocol/ declares
//! it: docs/errors.md's SQLSTATEs, docs/settings.md's settings, docs/security.md's grants,
//! docs/scaling.md's routes through the PL/Proxy layer; and each upgrade script has its
//! notes (docs/installation.md, sql/upgrade/README.md), naming the functions it brings.

use pg_idempotency_protocol::settings::INT_SETTINGS;
use pg_idempotency_protocol::ErrorCode;
use pg_idempotency_tests::root;

fn page(name: &str) -> String {
    std::fs::read_to_string(root().join("docs").join(name)).unwrap()
}

/// The table row of the page that starts with `first` in its first column.
fn row<'a>(text: &'a str, first: &str) -> Option<&'a str> {
    let start = format!("| `{first}` |");
    text.lines().find(|l| l.starts_with(&start))
}

#[test]
fn errors_md_has_a_row_for_each_sqlstate() {
    let text = page("errors.md");
    for code in ErrorCode::ALL {
        assert!(
            row(&text, code.sqlstate()).is_some(),
            "docs/errors.md has no row for {} ({code:?})",
            code.sqlstate()
        );
    }
}

#[test]
fn settings_md_has_each_setting_with_its_default() {
    let text = page("settings.md");
    for s in INT_SETTINGS {
        let r = row(&text, s.name).unwrap_or_else(|| panic!("docs/settings.md lacks {}", s.name));
        let default = r.split('|').nth(2).unwrap_or_default();
        assert!(
            default.contains(&s.default.to_string()),
            "docs/settings.md gives {} the default {default:?}, protocol {}",
            s.name,
            s.default
        );
    }
    assert!(row(&text, pg_idempotency_protocol::settings::DATABASE_NAME).is_some());
}

/// The text of a page between the line that starts with `from` and the next line that
/// starts with one of `to` (or the end).
fn between<'a>(text: &'a str, from: &str, to: &[&str]) -> &'a str {
    let start = text
        .find(&format!("\n{from}"))
        .unwrap_or_else(|| panic!("no line starts with {from:?}"))
        + 1;
    let rest = &text[start + from.len()..];
    let end = to
        .iter()
        .filter_map(|t| rest.find(&format!("\n{t}")))
        .min()
        .unwrap_or(rest.len());
    &text[start..start + from.len() + end]
}

fn names(text: &str, name: &str) -> bool {
    text.contains(&format!("`{name}`"))
}

/// docs/security.md's "Privileges" says which role may call each API function, as
/// protocol/src/functions.rs grants it.
#[test]
fn security_md_names_each_function_under_the_role_granted_it() {
    use pg_idempotency_protocol::functions::{self, Grant};
    let text = page("security.md");
    let user = between(
        &text,
        "  - `idempotency_user`:",
        &["  - `idempotency_admin`"],
    );
    let admin = between(&text, "  - `idempotency_admin`", &["  Grant them", "- "]);
    let mut wrong = Vec::new();
    for f in functions::api() {
        let (bullet, role) = match f.grant {
            Grant::User => (user, "idempotency_user"),
            Grant::Admin => (admin, "idempotency_admin"),
            _ => continue,
        };
        if !names(bullet, f.name) {
            wrong.push(format!(
                "docs/security.md, \"Privileges\": the `{role}` bullet does not name `{}`",
                f.name
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// docs/scaling.md's "Which functions go where" says where each API function runs through
/// the PL/Proxy layer.
#[test]
fn scaling_md_says_where_each_function_runs_through_the_proxy() {
    let text = page("scaling.md");
    let table = between(&text, "Which functions go where:", &["#"]);
    let first_column: Vec<&str> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .map(|l| l.split(" |").next().unwrap())
        .collect();
    let missing: Vec<&str> = pg_idempotency_protocol::functions::api()
        .map(|f| f.name)
        .filter(|n| first_column.iter().filter(|c| names(c, n)).count() != 1)
        .collect();
    assert!(
        missing.is_empty(),
        "docs/scaling.md, \"Which functions go where\": name each of {missing:?} in exactly one row"
    );
}

/// The version in which each API function first appears: the base release or the first
/// upgrade script that creates it (`FUNCTION <schema>.idem_x(`).
fn introduced_by(scripts: &[(String, String)], base: &str, name: &str) -> Option<String> {
    let creates = |sql: &str| {
        ["CREATE FUNCTION ", "CREATE OR REPLACE FUNCTION "]
            .iter()
            .any(|create| {
                sql.split(create).skip(1).any(|rest| {
                    rest.split_whitespace()
                        .next()
                        .is_some_and(|t| t.contains(&format!(".{name}(")))
                })
            })
    };
    if creates(base) {
        return None;
    }
    scripts
        .iter()
        .find(|(_, sql)| creates(sql))
        .map(|(file, _)| file.clone())
}

/// The upgrade scripts of a folder, oldest first, with their text.
fn upgrade_scripts(dir: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            (name.starts_with("pg_idempotency--")
                && name.matches("--").count() == 2
                && name.ends_with(".sql"))
            .then(|| (name, std::fs::read_to_string(&p).unwrap()))
        })
        .collect();
    let version = |name: &str| -> Vec<u32> {
        name.trim_end_matches(".sql")
            .rsplit("--")
            .next()
            .unwrap()
            .split('.')
            .map(|n| n.parse().unwrap())
            .collect()
    };
    out.sort_by_key(|(name, _)| version(name));
    out
}

/// Each upgrade script has its notes (docs/installation.md, "Upgrading the extension", for
/// the extension's; sql/upgrade/README.md for the portable variant's), and an API function
/// an upgrade brings is named in that upgrade's notes.
#[test]
fn each_upgrade_has_notes_naming_the_functions_it_brings() {
    let installation = page("installation.md");
    let extension_notes = between(
        &installation,
        "### Upgrading the extension",
        &["## ", "### "],
    );
    let readme = std::fs::read_to_string(root().join("sql/upgrade/README.md")).unwrap();
    let mut wrong = Vec::new();
    for (dir, base, notes, kind) in [
        (
            "pg_idempotency/sql",
            "pg_idempotency/sql/released/pg_idempotency--0.1.0.sql",
            extension_notes,
            "docs/installation.md, \"Upgrading the extension\"",
        ),
        (
            "sql/upgrade",
            "sql/released/pg_idempotency--0.1.0.sql",
            readme.as_str(),
            "sql/upgrade/README.md",
        ),
    ] {
        let scripts = upgrade_scripts(dir);
        assert!(
            scripts.len() >= 8,
            "{dir}: {} upgrade scripts",
            scripts.len()
        );
        // One note per script: the paragraphs (or bullets) that name its file.
        let note_of = |file: &str| -> String {
            notes
                .split("\n\n")
                .flat_map(|p| p.split("\n- "))
                .filter(|p| p.contains(&format!("`{file}`")))
                .collect::<Vec<_>>()
                .join("\n")
        };
        for (file, _) in &scripts {
            if note_of(file).is_empty() {
                wrong.push(format!("{kind}: no note names `{file}`"));
            }
        }
        let base = std::fs::read_to_string(root().join(base)).unwrap();
        for f in pg_idempotency_protocol::functions::api() {
            if let Some(file) = introduced_by(&scripts, &base, f.name) {
                if !names(&note_of(&file), f.name) {
                    wrong.push(format!(
                        "{kind}: the note of `{file}`, which brings `{}`, does not name it",
                        f.name
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
