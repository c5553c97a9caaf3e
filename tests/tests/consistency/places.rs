//! The places a change must reach that no other test reaches (CONTRIBUTING.md, "Adding a SQL
//! function"): every declared API function has its section in docs/sql-api.md and is called
//! by a golden file or a behaviour test; every extension body file is a declared SQL
//! function's; every golden file and isolation spec is in a schedule; every test module file
//! is listed by its root file (a file left out is never compiled, so its tests never run);
//! every portable storage table moves to the extension (sql/migrate-to-extension.sql) or
//! says why not; every wrapper store forwards each method of the store trait or says why
//! not. Each failure names the place and what to add there.

use std::collections::BTreeSet;
use std::path::Path;

use pg_idempotency_protocol::functions::{self, Language};
use pg_idempotency_tests::root;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn files(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    out
}

fn stem(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

/// Every file under `dir` whose name ends in `.ext`, in its sub-folders too, but for build
/// output and installed packages (`target`, `node_modules`, hidden folders).
fn tree(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|e| e == ext) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// All text of the suites that call the SQL API: golden files, isolation specs, and the
/// behaviour suites' Rust.
fn callers() -> String {
    [
        ("tests/regress/sql", "sql"),
        ("tests/isolation/specs", "spec"),
        ("tests/tests", "rs"),
    ]
    .iter()
    .flat_map(|(dir, ext)| tree(&root().join(dir), ext))
    .map(|p| read(&p))
    .collect()
}

#[test]
fn every_api_function_has_its_section_and_a_caller() {
    let sql_api = read(&root().join("docs/sql-api.md"));
    let headings: Vec<&str> = sql_api.lines().filter(|l| l.starts_with('#')).collect();
    let callers = callers();
    let mut missing = Vec::new();
    for f in functions::api() {
        if !headings.iter().any(|h| h.contains(f.name)) {
            missing.push(format!(
                "docs/sql-api.md: no heading names {} (add a section: signature, parameters, an example with its output)",
                f.name
            ));
        }
        if !callers.contains(&format!("{}(", f.name)) {
            missing.push(format!(
                "{}: no golden file, isolation spec or behaviour test calls it (tests/regress/sql/, tests/isolation/specs/, tests/tests/)",
                f.name
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn every_extension_body_file_is_a_declared_sql_functions() {
    let declared: BTreeSet<&str> = functions::FUNCTIONS
        .iter()
        .filter(|f| matches!(f.language, Language::Sql))
        .map(|f| f.name)
        .collect();
    let stray: Vec<String> = files(&root().join("pg_idempotency/sql/bodies"), "sql")
        .iter()
        .map(|p| stem(p))
        .filter(|name| !declared.contains(name.as_str()))
        .collect();
    assert!(
        stray.is_empty(),
        "pg_idempotency/sql/bodies/: bodies no SQL function declares (protocol/src/functions.rs, language: Sql): {stray:?}"
    );
}

#[test]
fn every_golden_file_and_isolation_spec_is_in_a_schedule() {
    let scheduled = |schedules: &[&str]| -> BTreeSet<String> {
        schedules
            .iter()
            .flat_map(|s| {
                read(&root().join(s))
                    .lines()
                    .filter_map(|l| l.strip_prefix("test:").map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .flat_map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .collect()
    };
    let mut missing = Vec::new();
    let golden = scheduled(&["tests/regress/schedule", "tests/regress/schedule_extension"]);
    for f in files(&root().join("tests/regress/sql"), "sql") {
        if !golden.contains(&stem(&f)) {
            missing.push(format!(
                "tests/regress/sql/{}.sql is in neither tests/regress/schedule nor schedule_extension: it never runs",
                stem(&f)
            ));
        }
    }
    let specs = scheduled(&["tests/isolation/schedule"]);
    for f in files(&root().join("tests/isolation/specs"), "spec") {
        if !specs.contains(&stem(&f)) {
            missing.push(format!(
                "tests/isolation/specs/{}.spec is not in tests/isolation/schedule: it never runs",
                stem(&f)
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Whether `declaring` (a root file or a mod.rs) declares the module `name` of folder
/// `folder`: by `mod name` or by a `#[path]` to the file.
fn declares(declaring: &str, folder: &str, name: &str) -> bool {
    declaring.lines().any(|l| {
        let l = l.trim();
        let l = l.strip_prefix("pub ").unwrap_or(l);
        l == format!("mod {name};")
            || l.starts_with(&format!("mod {name} {{"))
            || l.contains(&format!("\"{folder}/{name}.rs\""))
            || l.contains(&format!("\"{folder}/{name}/mod.rs\""))
    })
}

#[test]
fn every_test_module_file_is_listed_by_its_root() {
    let mut missing = Vec::new();
    for tests in [
        "tests/tests",
        "client/tests",
        "server/tests",
        "mcp/tests",
        "tests/faults/tests",
    ] {
        let dir = root().join(tests);
        for root_file in files(&dir, "rs") {
            let folder = stem(&root_file);
            let sub = dir.join(&folder);
            if !sub.is_dir() {
                continue;
            }
            check_folder(&read(&root_file), &folder, &sub, tests, &mut missing);
        }
        // Folders with a mod.rs of their own (common/): their files are listed there.
        for entry in std::fs::read_dir(&dir).unwrap() {
            let sub = entry.unwrap().path();
            let mod_rs = sub.join("mod.rs");
            if sub.is_dir() && mod_rs.is_file() {
                check_folder(&read(&mod_rs), ".", &sub, tests, &mut missing);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "test files their root never lists (never compiled, so never run):\n{}",
        missing.join("\n")
    );
}

fn check_folder(declaring: &str, folder: &str, sub: &Path, tests: &str, missing: &mut Vec<String>) {
    for file in files(sub, "rs") {
        let name = stem(&file);
        if name == "mod" {
            continue;
        }
        let by_path = declares(declaring, folder, &name);
        // Inside a mod.rs, a child is `mod name;` or a path relative to the folder.
        let by_mod =
            declares(declaring, ".", &name) || declaring.contains(&format!("\"{name}.rs\""));
        if !(by_path || by_mod) {
            missing.push(format!(
                "{tests}/{}: add it to its root file (`mod {name};` or its #[path])",
                file.strip_prefix(root().join(tests)).unwrap().display()
            ));
        }
    }
}

/// The portable variant's storage tables that do not move to the extension, and why: what
/// they hold becomes the extension's own.
const TABLES_THAT_STAY: &[(&str, &str)] = &[
    ("installed", "the installed version: the extension's is pg_extension's"),
    (
        "settings",
        "the limits: the extension reads the server's settings (the move warns with the lines that keep them)",
    ),
];

#[test]
fn every_portable_storage_table_moves_to_the_extension_or_says_why_not() {
    let storage = read(&root().join("sql/src/storage.sql"));
    let tables: Vec<&str> = storage
        .lines()
        .filter_map(|l| l.strip_prefix("CREATE TABLE :\"storage\"."))
        .map(|rest| rest.split([' ', '(']).next().unwrap())
        .collect();
    assert!(tables.contains(&"records"), "{tables:?}");
    let moves = read(&root().join("sql/migrate-to-extension.sql"));
    let missing: Vec<&&str> = tables
        .iter()
        .filter(|t| !TABLES_THAT_STAY.iter().any(|(s, _)| s == *t))
        .filter(|t| {
            !moves.contains(&format!("INSERT INTO idempotency.{t}\n"))
                && !moves.contains(&format!("INSERT INTO idempotency.{t} "))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "sql/migrate-to-extension.sql copies no rows of {missing:?}: add an INSERT INTO idempotency.<table> ... SELECT, \
         or, if the table stays behind, its reason in TABLES_THAT_STAY (tests/tests/consistency/places.rs)"
    );
    for (t, _) in TABLES_THAT_STAY {
        assert!(
            tables.contains(t),
            "TABLES_THAT_STAY names {t}, which sql/src/storage.sql no longer creates"
        );
    }
}

/// The methods of the client's store trait (client/src/store.rs), in order.
fn store_methods() -> Vec<String> {
    let text = read(&root().join("client/src/store.rs"));
    let start = text
        .find("pub trait IdempotencyStore")
        .expect("client/src/store.rs declares IdempotencyStore");
    let body = &text[start..start + text[start..].find("\n}\n").unwrap()];
    body.split("fn ")
        .skip(1)
        .map(|rest| rest.split(['(', '<']).next().unwrap().trim().to_string())
        .collect()
}

/// Every `impl IdempotencyStore for X` at the top level of a file, with its block's text.
fn store_impls(file: &Path) -> Vec<(String, String)> {
    let text = read(file);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("impl IdempotencyStore for ") else {
            continue;
        };
        let name = rest.split([' ', '{']).next().unwrap().to_string();
        let end = lines[i..].iter().position(|l| *l == "}").unwrap() + i;
        out.push((name, lines[i..end].join("\n")));
    }
    out
}

/// A store whose methods call another store's: it forwards, so a method it leaves to the
/// trait's default answers for the wrapper, not for the store behind it.
fn is_wrapper(block: &str) -> bool {
    [".begin(", ".complete(", ".lookup("]
        .iter()
        .any(|call| block.contains(call))
}

/// The methods a block names in its "Defaults kept:" comment (one comment, any lines).
fn defaults_kept(block: &str) -> BTreeSet<String> {
    let mut kept = BTreeSet::new();
    let mut inside = false;
    for line in block.lines().map(str::trim) {
        let Some(comment) = line.strip_prefix("//") else {
            inside = false;
            continue;
        };
        inside |= comment.contains("Defaults kept");
        if inside {
            kept.extend(
                comment
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                    .map(str::to_string),
            );
        }
    }
    kept
}

/// A method added to the store trait with a default body compiles in every wrapper store
/// that does not forward it, and answers there for the wrapper (a `None`, a `true`)
/// instead of for the store behind it. Every wrapper defines each method or names it in
/// a "Defaults kept:" comment, with why.
#[test]
fn every_wrapper_store_forwards_each_method_or_says_why_not() {
    let methods = store_methods();
    assert!(
        methods.len() > 10 && methods.contains(&"statement_mode".to_string()),
        "{methods:?}"
    );
    let rs = tree(&root(), "rs");
    let mut wrappers = 0;
    let mut missing = Vec::new();
    for file in rs {
        for (name, block) in store_impls(&file) {
            if !is_wrapper(&block) {
                continue;
            }
            wrappers += 1;
            let kept = defaults_kept(&block);
            for m in &methods {
                if !block.contains(&format!("fn {m}("))
                    && !block.contains(&format!("fn {m}<"))
                    && !kept.contains(m)
                {
                    missing.push(format!(
                        "{}: {name} neither defines {m} nor names it under \"Defaults kept:\"",
                        file.strip_prefix(root()).unwrap().display()
                    ));
                }
            }
        }
    }
    // The proxy's SplitStore, the fault suite's Counting and the client tests' doubles.
    assert!(wrappers >= 9, "{wrappers} wrapper stores found");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
