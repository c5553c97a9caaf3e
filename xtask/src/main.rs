//! `cargo xtask`: the project's tools. With no arguments it prints the menu: the verbs it
//! runs itself, and the scripts that provision a machine or are the README's entry points
//! (every file in scripts/ is on it; a test says so).

mod menu;
mod portable_migration;
mod render_sql;

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        None | Some("help" | "-h" | "--help") => print!("{}", menu::text()),
        Some("render-sql") => render_sql::run(),
        Some("portable-migration") => portable_migration::run(args),
        Some(other) => {
            eprintln!("cargo xtask: no verb {other:?}\n\n{}", menu::text());
            std::process::exit(2);
        }
    }
}
