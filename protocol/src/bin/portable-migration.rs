//! Prints the portable variant's install or upgrade as one migration in plain SQL (no psql
//! commands), for the schemas given: what a migration tool applies. Run by
//! scripts/portable-migration.sh, which says how.

use std::path::Path;

use protocol::render::migration::{migration_sql, Step, CURRENT, DEFAULT_API, DEFAULT_STORAGE};

const USAGE: &str = "usage: portable-migration [--schema S] [--storage T] [--from A] [--to B]
  --schema S   the API schema (the idem_* functions; it must exist): default public
  --storage T  the storage schema the install creates: default idempotency
  --from A     print the upgrade from release A (default: the install)
  --to B       the version installed or upgraded to: default this checkout's";

fn main() {
    let fail = |msg: &str| -> ! {
        eprintln!("portable-migration: {msg}");
        std::process::exit(2);
    };
    let (mut api, mut storage) = (DEFAULT_API.to_string(), DEFAULT_STORAGE.to_string());
    let (mut from, mut to) = (None, CURRENT.to_string());
    let mut args = std::env::args().skip(1);
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
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository");
    match migration_sql(root, &step, &api, &storage) {
        Ok(sql) => print!("{sql}"),
        Err(e) => fail(&e),
    }
}
