//! What must agree with what: the installed catalogue, the SQL files, the docs and the
//! protocol's declarations, one module per check (consistency/<module>.rs), linked as one
//! test binary. Each test reads files or works in databases of its own.
//!
//! - catalogue_lint: our functions are immune to search_path; the lint finds what is broken
//! - distributable: every statement on the tables keeps to DESIGN 8's rules (caught live)
//! - docs_agree: the docs list every SQLSTATE, setting, grant and proxy route the protocol
//!   declares, and each upgrade's notes name the functions it brings
//! - import_circles: no two files of a product crate import each other
//! - places: what a new function, table, store method or test file must reach that nothing
//!   else checks
//! - plain_migrations: the portable variant's plain-SQL migrations are its psql scripts'
//! - portable_settings: the PL/pgSQL variant's copies of the settings are the protocol's
//! - public_execute: no function of ours is executable by PUBLIC
//! - released_files: released SQL files never change (sql/released/SHA256SUMS)
//! - signatures: both backends install each function as protocol/ declares it
//! - sql_kinds: every SQL file is rendered (and says so), frozen, or a source
//! - upgrade: a database on each release, upgraded, is a fresh install of this version

#[path = "consistency/catalogue_lint.rs"]
mod catalogue_lint;
#[path = "consistency/distributable.rs"]
mod distributable;
#[path = "consistency/docs_agree.rs"]
mod docs_agree;
#[path = "consistency/import_circles.rs"]
mod import_circles;
#[path = "consistency/places.rs"]
mod places;
#[path = "consistency/plain_migrations.rs"]
mod plain_migrations;
#[path = "consistency/portable_settings.rs"]
mod portable_settings;
#[path = "consistency/public_execute.rs"]
mod public_execute;
#[path = "consistency/released_files.rs"]
mod released_files;
#[path = "consistency/signatures.rs"]
mod signatures;
#[path = "consistency/sql_kinds.rs"]
mod sql_kinds;
#[path = "consistency/upgrade.rs"]
mod upgrade;
