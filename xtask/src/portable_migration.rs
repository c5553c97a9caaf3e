//! `cargo xtask portable-migration`: prints the portable variant's install or upgrade as one
//! migration in plain SQL (no psql commands), for the schemas given: what a migration tool
//! applies. scripts/portable-migration.sh, which every plain-SQL migration file names, runs
//! it.

use xtask::render::migration::{migration_sql, Step, CURRENT, DEFAULT_API, DEFAULT_STORAGE};

const USAGE: &str =
    "usage: cargo xtask portable-migration [--schema S] [--storage T] [--from A] [--to B]
  --schema S   the API schema (the idem_* functions; it must exist): default public
  --storage T  the storage schema the install creates: default idempotency
  --from A     print the upgrade from release A (default: the install)
  --to B       the version installed or upgraded to: default this checkout's";

pub fn run(mut args: impl Iterator<Item = String>) {
    let fail = |msg: &str| -> ! {
        eprintln!("portable-migration: {msg}");
        std::process::exit(2);
    };
    let (mut api, mut storage) = (DEFAULT_API.to_string(), DEFAULT_STORAGE.to_string());
    let (mut from, mut to) = (None, CURRENT.to_string());
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            return;
        }
        let Some(value) = args.next() else {
            fail(&format!("{flag} needs a value\n{USAGE}"));
        };
        match flag.as_str() {
            "--schema" => api = value,
            "--storage" => storage = value,
            "--from" => from = Some(value),
            "--to" => to = value,
            _ => fail(&format!("unknown argument {flag:?}\n{USAGE}")),
        }
    }
    let step = match from {
        None => Step::Install { to },
        Some(from) => Step::Upgrade { from, to },
    };
    match migration_sql(&xtask::repository(), &step, &api, &storage) {
        Ok(sql) => print!("{sql}"),
        Err(e) => fail(&e),
    }
}
