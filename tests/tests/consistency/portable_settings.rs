//! The PL/pgSQL variant keeps its own copies of the settings' defaults and ranges (SQL cannot
//! read protocol/src/settings.rs): held here to the protocol's, in its source and in a fresh
//! install.

use pg_idempotency_protocol::settings::{IntSetting, Unit, INT_SETTINGS};
use pg_idempotency_tests::backends::installed;
use pg_idempotency_tests::{connect_to, sql_file, Backend};

fn setting(name: &str) -> &'static IntSetting {
    INT_SETTINGS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} is not a protocol setting"))
}

/// Every `_idem_setting('name', fallback, unit, lo, hi)` of the source: the fallback and
/// the range are the protocol's default and range, the unit its unit.
#[test]
fn each_setting_the_variant_reads_has_the_protocol_s_default_and_range() {
    let source = std::fs::read_to_string(sql_file("pg_idempotency.sql")).unwrap();
    let mut read = Vec::new();
    for (at, _) in source.match_indices("_idem_setting('pg_idempotency.") {
        let call = &source[at + "_idem_setting(".len()..];
        let call = &call[..call.find(')').unwrap()];
        let parts: Vec<&str> = call.split(',').map(|p| p.trim()).collect();
        let [name, fallback, unit, lo, hi] = parts[..] else {
            panic!("an _idem_setting call of another shape: {call}");
        };
        let s = setting(name.trim_matches('\''));
        let unit_word = match s.unit {
            Unit::Plain => "''",
            Unit::Bytes => "'B'",
            Unit::Seconds => "'s'",
        };
        assert_eq!(
            (fallback, unit, lo, hi),
            (
                s.default.to_string().as_str(),
                unit_word,
                s.min.to_string().as_str(),
                s.max.to_string().as_str()
            ),
            "{call}"
        );
        read.push(s.name);
    }
    // The defaults, the four limits (seeded into settings) and the purge's batch.
    for s in INT_SETTINGS {
        if s.name.ends_with("purge_interval") {
            continue; // no worker in the variant
        }
        if s.name.ends_with("count_flush_interval_ms") {
            continue; // the variant writes each count in its call's transaction
        }
        assert!(read.contains(&s.name), "the variant never reads {}", s.name);
    }
}

/// A fresh install, by a role with no settings of its own, holds the protocol's defaults as
/// its limits, and refuses a limit just outside the protocol's range.
#[test]
fn a_fresh_install_holds_the_protocol_s_limits() {
    let dsn = installed(Backend::Portable, "portable_settings");
    let mut c = connect_to(&dsn);
    let row = c
        .query_one(
            "SELECT max_key_bytes, max_scope_bytes, extract(epoch FROM max_ttl)::integer,
                    max_response_bytes
             FROM idempotency.settings",
            &[],
        )
        .unwrap();
    for (i, name) in [
        "pg_idempotency.max_key_bytes",
        "pg_idempotency.max_scope_bytes",
        "pg_idempotency.max_ttl",
        "pg_idempotency.max_response_bytes",
    ]
    .into_iter()
    .enumerate()
    {
        let s = setting(name);
        assert_eq!(row.get::<_, i32>(i), s.default, "{name}");
        let column = s.short_name();
        let value = |v: i64| match s.unit {
            Unit::Seconds => format!("'{v} seconds'"),
            _ => v.to_string(),
        };
        let mut tx = c.transaction().unwrap();
        tx.batch_execute(&format!(
            "UPDATE idempotency.settings SET {column} = {}",
            value(s.max as i64)
        ))
        .unwrap_or_else(|e| panic!("{column} = its maximum: {e}"));
        let err = tx
            .batch_execute(&format!(
                "UPDATE idempotency.settings SET {column} = {}",
                value(s.min as i64 - 1)
            ))
            .unwrap_err();
        assert!(
            matches!(err.code().map(|c| c.code()), Some("22023" | "23514")),
            "{column} below its minimum: {err}"
        );
        tx.rollback().unwrap();
    }
    drop(c);
    pg_idempotency_tests::drop_database(
        dsn.split_whitespace()
            .find_map(|p| p.strip_prefix("dbname="))
            .unwrap(),
    );
}

/// `_idem_retry_after` keeps its own copies of pg_idempotency_protocol::estimate's constants: the
/// no-history answer, the floor (both in microseconds) and how many records it averages.
#[test]
fn the_variant_s_retry_after_has_the_protocol_s_constants() {
    use pg_idempotency_protocol::estimate::{FLOOR_MS, PORTABLE_SAMPLE, UNKNOWN_MS};
    let source = std::fs::read_to_string(sql_file("pg_idempotency.sql")).unwrap();
    let start = source
        .find("CREATE FUNCTION :\"storage\"._idem_retry_after(")
        .expect("the variant defines _idem_retry_after");
    let body = &source[start..];
    let body = &body[..body.find("\n$fn$;").unwrap()];
    for needle in [
        format!("LIMIT {PORTABLE_SAMPLE})"),
        format!("least({}, lease_left)", UNKNOWN_MS * 1000),
        format!(", {}), lease_left)", FLOOR_MS * 1000),
    ] {
        assert!(body.contains(&needle), "_idem_retry_after lacks {needle:?}");
    }
}
