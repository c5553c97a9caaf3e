//! The portable variant as migrations: one file of plain SQL per install or upgrade, for
//! chosen schemas, that a migration tool applies as one migration in its own transaction.
//!
//! Derived, never written by hand: the install of this version from sql/pg_idempotency.sql,
//! an older release's from the released base script and the upgrade scripts up to it (as
//! the releases are kept: sql/released/README.md), an upgrade from the upgrade scripts
//! between the two versions; each turned into plain SQL by [`super::plain`].
//! scripts/portable-migration.sh prints one; cargo xtask render-sql writes the default
//! schemas' ones to sql/migrations/ ([`committed`]), which
//! tests/tests/consistency/plain_migrations.rs holds equal to this rendering.

use std::path::Path;

use super::plain::{plain_sql, psql_ident};

/// The version this checkout installs (the workspace's).
pub const CURRENT: &str = env!("CARGO_PKG_VERSION");
pub const DEFAULT_API: &str = "public";
pub const DEFAULT_STORAGE: &str = "idempotency";
/// Where the default schemas' renderings are kept.
pub const COMMITTED_DIR: &str = "sql/migrations";

/// Why a schema name cannot be used, or None. `which` names it in the message.
pub fn check_name(which: &str, name: &str) -> Result<(), String> {
    let problem = if name.is_empty() {
        Some("is empty".to_string())
    } else if name.len() > 63 {
        // PostgreSQL would cut it to 63 bytes (NAMEDATALEN - 1) and name another schema.
        Some(format!(
            "is {} bytes long; PostgreSQL names are at most 63",
            name.len()
        ))
    } else if name.chars().any(char::is_control) {
        Some("holds a control character".to_string())
    } else if name.starts_with("pg_") {
        Some("starts with pg_, which PostgreSQL reserves for its own schemas".to_string())
    } else {
        None
    };
    match problem {
        Some(p) => Err(format!("the {which} schema name {name:?} {p}")),
        None => Ok(()),
    }
}

/// The releases the repository can install: the base script's version, then each upgrade
/// script's target in chain order, ending at [`CURRENT`] when its upgrade exists.
pub fn versions(root: &Path) -> Result<Vec<String>, String> {
    let list = |dir: &str| -> Result<Vec<String>, String> {
        let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
            .map_err(|e| format!("{dir}: {e}"))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|n| {
                Some(
                    n.strip_prefix("pg_idempotency--")?
                        .strip_suffix(".sql")?
                        .to_string(),
                )
            })
            .collect();
        names.sort();
        Ok(names)
    };
    let bases = list("sql/released")?;
    let [base] = bases.as_slice() else {
        return Err(format!(
            "sql/released holds {} base scripts, not one",
            bases.len()
        ));
    };
    let steps = list("sql/upgrade")?;
    let mut chain = vec![base.clone()];
    while let Some(next) = steps.iter().find_map(|s| {
        let (a, b) = s.split_once("--")?;
        (a == chain.last()?.as_str()).then(|| b.to_string())
    }) {
        chain.push(next);
    }
    if !chain.iter().any(|v| v == CURRENT) {
        chain.push(CURRENT.to_string());
    }
    Ok(chain)
}

/// What a migration does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Installs version `to` into a database without the portable variant.
    Install { to: String },
    /// Upgrades an install of `from` to `to`.
    Upgrade { from: String, to: String },
}

impl Step {
    /// The file name of the step's migration: `pg_idempotency--B.sql` or
    /// `pg_idempotency--A--B.sql`, as the psql scripts are named.
    pub fn file_name(&self) -> String {
        match self {
            Step::Install { to } => format!("pg_idempotency--{to}.sql"),
            Step::Upgrade { from, to } => format!("pg_idempotency--{from}--{to}.sql"),
        }
    }
}

/// The psql scripts a step runs, in order (paths from the repository's root).
pub fn sources(root: &Path, step: &Step) -> Result<Vec<String>, String> {
    let chain = versions(root)?;
    let at = |v: &str| {
        chain.iter().position(|c| c == v).ok_or_else(|| {
            format!(
                "{v} is not a release of the portable variant (releases: {})",
                chain.join(", ")
            )
        })
    };
    let upgrades = |a: usize, b: usize| -> Vec<String> {
        chain[a..=b]
            .windows(2)
            .map(|w| format!("sql/upgrade/pg_idempotency--{}--{}.sql", w[0], w[1]))
            .collect()
    };
    match step {
        Step::Install { to } if to == CURRENT => Ok(vec!["sql/pg_idempotency.sql".to_string()]),
        Step::Install { to } => {
            let mut files = vec![format!("sql/released/pg_idempotency--{}.sql", chain[0])];
            files.extend(upgrades(0, at(to)?));
            Ok(files)
        }
        Step::Upgrade { from, to } => {
            let (a, b) = (at(from)?, at(to)?);
            if a >= b {
                return Err(format!("--from {from} is not older than --to {to}"));
            }
            let files = upgrades(a, b);
            for f in &files {
                if !root.join(f).exists() {
                    return Err(format!("{f} does not exist yet"));
                }
            }
            Ok(files)
        }
    }
}

/// First: refuse to run outside a transaction, and keep the settings the scripts change
/// with SET LOCAL. A statement's local setting lasts to the end of its transaction, so the
/// second statement sees the first's only when both share one: run as separate
/// transactions (autocommit), SET LOCAL would not hold and an error would leave part of
/// the install behind.
fn prologue(set_local: &[String]) -> String {
    let keep: String = set_local
        .iter()
        .map(|name| {
            format!(
                "    PERFORM pg_catalog.set_config('idem_migration.{name}', pg_catalog.current_setting('{name}'), true);\n"
            )
        })
        .collect();
    format!(
        "DO $idem_migration$
BEGIN
    PERFORM pg_catalog.set_config('idem_migration.xact', pg_catalog.txid_current()::text, true);
{keep}END
$idem_migration$;
DO $idem_migration$
BEGIN
    IF pg_catalog.current_setting('idem_migration.xact', true)
       IS DISTINCT FROM pg_catalog.txid_current()::text THEN
        RAISE EXCEPTION 'pg_idempotency''s migration runs in one transaction only'
            USING ERRCODE = 'no_active_sql_transaction',
                  DETAIL = 'Its statements are running in separate transactions: SET LOCAL would not hold, and an error would leave part of it applied.',
                  HINT = 'Let the migration tool run it in a transaction, or send the whole file as one query.';
    END IF;
END
$idem_migration$;
"
    )
}

/// Last: the settings as they were, for the migrations after this one in the same
/// transaction (their search_path, their client_min_messages).
fn epilogue(set_local: &[String]) -> String {
    let back: String = set_local
        .iter()
        .map(|name| {
            format!(
                "    PERFORM pg_catalog.set_config('{name}', pg_catalog.current_setting('idem_migration.{name}'), true);\n"
            )
        })
        .collect();
    format!(
        "\n-- ---- the settings as the migration found them ----\nDO $idem_migration$\nBEGIN\n{back}END\n$idem_migration$;\n"
    )
}

/// The plain SQL of `step` for the API schema `api` and the storage schema `storage`.
pub fn migration_sql(root: &Path, step: &Step, api: &str, storage: &str) -> Result<String, String> {
    check_name("API", api)?;
    check_name("storage", storage)?;
    if api == storage {
        return Err(format!(
            "the API schema and the storage schema are both {api:?}: they must differ"
        ));
    }
    let files = sources(root, step)?;
    let refs: Vec<&str> = files.iter().map(String::as_str).collect();
    let plain = plain_sql(root, &refs, api, storage)?;
    let set_local: Vec<String> = plain.set_local.into_iter().collect();
    for name in &set_local {
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("SET LOCAL {name}: not a setting this can keep"));
        }
    }
    let what = match step {
        Step::Install { to } => format!("pg_idempotency {to}, portable SQL variant: the install"),
        Step::Upgrade { from, to } => {
            format!("pg_idempotency, portable SQL variant: the upgrade from {from} to {to}")
        }
    };
    let header = format!(
        "-- {what}, as one migration in plain SQL
-- (no psql commands): API schema {api}, storage schema {storage}.
--
-- Generated by scripts/portable-migration.sh from {sources}
-- (the psql scripts, which stay the source): not edited by hand.
--
-- Apply it as one migration, in one transaction (migration tools open one per migration
-- or per run; this file has no BEGIN or COMMIT of its own). Run outside a transaction it
-- refuses to start (SQLSTATE 25P01) and changes nothing. Migrations after it in the same
-- transaction see the search_path they had. docs/installation.md, \"The portable variant
-- in a migration tool\".
",
        api = psql_ident(api),
        storage = psql_ident(storage),
        sources = files.join(", "),
    );
    Ok(format!(
        "{header}\n{}{}{}",
        prologue(&set_local),
        plain.sql,
        epilogue(&set_local)
    ))
}

/// The default schemas' migrations kept in sql/migrations/: the install of this version and
/// each upgrade: (path from the root, text).
pub fn committed(root: &Path) -> Result<Vec<(String, String)>, String> {
    let chain = versions(root)?;
    let mut steps = vec![Step::Install {
        to: CURRENT.to_string(),
    }];
    for w in chain.windows(2) {
        let step = Step::Upgrade {
            from: w[0].clone(),
            to: w[1].clone(),
        };
        if sources(root, &step).is_ok() {
            steps.push(step);
        }
    }
    steps
        .iter()
        .map(|s| {
            Ok((
                format!("{COMMITTED_DIR}/{}", s.file_name()),
                migration_sql(root, s, DEFAULT_API, DEFAULT_STORAGE)?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
    }

    #[test]
    fn names_postgresql_cannot_take_as_they_are_are_refused_with_a_reason() {
        for (name, says) in [
            ("", "is empty"),
            (&"x".repeat(64) as &str, "64 bytes long"),
            ("a\nb", "control character"),
            ("pg_app", "starts with pg_"),
        ] {
            let err = migration_sql(
                root(),
                &Step::Install { to: CURRENT.into() },
                "public",
                name,
            )
            .unwrap_err();
            assert!(
                err.contains("the storage schema name") && err.contains(says),
                "{name:?}: {err}"
            );
        }
        let err = migration_sql(
            root(),
            &Step::Install { to: CURRENT.into() },
            "same",
            "same",
        )
        .unwrap_err();
        assert!(err.contains("must differ"), "{err}");
        assert!(check_name("API", "My \"App\" ünï").is_ok());
        assert!(check_name("API", &"é".repeat(31)).is_ok());
    }

    #[test]
    fn an_older_release_is_the_base_and_the_upgrades_up_to_it() {
        let chain = versions(root()).unwrap();
        assert_eq!(chain.first().map(String::as_str), Some("0.1.0"));
        assert_eq!(chain.last().map(String::as_str), Some(CURRENT));
        let files = sources(root(), &Step::Install { to: "0.3.0".into() }).unwrap();
        assert_eq!(
            files,
            [
                "sql/released/pg_idempotency--0.1.0.sql",
                "sql/upgrade/pg_idempotency--0.1.0--0.2.0.sql",
                "sql/upgrade/pg_idempotency--0.2.0--0.3.0.sql"
            ]
        );
        assert_eq!(
            sources(root(), &Step::Install { to: CURRENT.into() }).unwrap(),
            ["sql/pg_idempotency.sql"]
        );
        assert!(sources(
            root(),
            &Step::Upgrade {
                from: "0.4.0".into(),
                to: "0.2.0".into()
            }
        )
        .is_err());
        assert!(sources(root(), &Step::Install { to: "0.9.9".into() })
            .unwrap_err()
            .contains("not a release"));
    }

    #[test]
    fn every_migration_is_plain_sql_that_keeps_and_gives_back_its_settings() {
        let chain = versions(root()).unwrap();
        let mut steps: Vec<Step> = chain
            .iter()
            .map(|v| Step::Install { to: v.clone() })
            .collect();
        steps.extend(chain.windows(2).map(|w| Step::Upgrade {
            from: w[0].clone(),
            to: w[1].clone(),
        }));
        for step in steps {
            let sql = migration_sql(root(), &step, "App API", "app store").unwrap();
            let code: String = super::super::psql_lex::lex(&sql)
                .unwrap()
                .into_iter()
                .filter_map(|p| match p {
                    super::super::psql_lex::Piece::Code(t) => Some(t),
                    _ => None,
                })
                .collect();
            assert!(!code.contains('\\'), "{step:?}: a backslash outside quotes");
            for word in ["BEGIN;", "COMMIT;", ":\"", ":'"] {
                assert!(!code.contains(word), "{step:?}: {word} outside quotes");
            }
            assert!(
                sql.contains("CREATE SCHEMA \"app store\";")
                    || matches!(step, Step::Upgrade { .. })
            );
            // The first statement keeps search_path; the last gives it back.
            assert!(
                sql.contains("set_config('idem_migration.search_path'"),
                "{step:?}"
            );
            assert!(sql.trim_end().ends_with(
                "PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('idem_migration.search_path'), true);\nEND\n$idem_migration$;"
            ) || sql.contains("set_config('client_min_messages'"), "{step:?}");
        }
    }
}
