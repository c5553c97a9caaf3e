//! Rust internals, run inside the server by `cargo pgrx test`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::datum::Interval;
    use pgrx::prelude::*;

    use crate::args::{self, interval_micros, seconds, MICROS_PER_DAY};
    use crate::{durability, ids};

    #[pg_test]
    fn intervals_normalise_like_postgres_compares_them() {
        let month = Interval::new(1, 0, 0).unwrap();
        let thirty_days = Interval::new(0, 30, 0).unwrap();
        assert_eq!(interval_micros(&month), interval_micros(&thirty_days));
        assert_eq!(
            interval_micros(&Interval::new(0, 1, -1).unwrap()),
            Some(MICROS_PER_DAY - 1)
        );
        // PostgreSQL 17+ spells infinity with every field at its extreme.
        let inf = pgrx::pg_sys::Interval {
            time: i64::MAX,
            day: i32::MAX,
            month: i32::MAX,
        };
        // SAFETY: pgrx's Interval is #[repr(transparent)] over pg_sys::Interval.
        let inf: Interval = unsafe { std::mem::transmute(inf) };
        assert_eq!(interval_micros(&inf), None);
        assert_eq!(seconds(1_500_000), "1.5 s");
        assert_eq!(seconds(-3_600_000_000), "-3600 s");
    }

    #[pg_test]
    fn a_lease_is_capped_by_the_ttl() {
        Spi::run("SET pg_idempotency.default_lease = '10min'").unwrap();
        assert_eq!(args::effective_lease(None, None, 5_000_000), Ok(5_000_000));
        assert_eq!(
            args::effective_lease(None, None, 3_600_000_000),
            Ok(600_000_000)
        );
        // A policy's lease is a default too: capped by the call's ttl.
        assert_eq!(
            args::effective_lease(None, Some(7_000_000), 5_000_000),
            Ok(5_000_000)
        );
        // A call's own lease above its ttl is an error.
        let six = args::lease(Some(Interval::new(0, 0, 6_000_000).unwrap())).unwrap();
        assert!(args::effective_lease(six, None, 5_000_000).is_err());
    }

    #[pg_test]
    fn fences_only_grow() {
        let a = ids::next_fence();
        let b = ids::next_fence();
        assert!(b > a, "{b} should follow {a}");
    }

    #[pg_test]
    fn upstream_keys_are_fresh_v4_uuids() {
        let a = ids::new_upstream_key();
        let b = ids::new_upstream_key();
        assert_ne!(a, b);
        assert_eq!(a.as_bytes()[6] >> 4, 4);
        assert_eq!(a.as_bytes()[8] >> 6, 0b10);
    }

    #[pg_test]
    fn a_durable_commit_overrides_asynchronous_commit() {
        Spi::run("SET LOCAL synchronous_commit = off").unwrap();
        durability::ensure_durable_commit();
        assert_eq!(
            Spi::get_one::<String>("SHOW synchronous_commit"),
            Ok(Some("on".into()))
        );
    }

    /// Our SQLSTATEs survive being caught by PL/pgSQL, as a caller's EXCEPTION block sees them.
    #[pg_test]
    fn errors_keep_their_sqlstate_through_plpgsql() {
        Spi::run(
            "CREATE FUNCTION pg_temp.sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $$
             BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN others THEN RETURN SQLSTATE; END $$",
        )
        .unwrap();
        let code = |q: &str| {
            Spi::get_one_with_args::<String>("SELECT pg_temp.sqlstate_of($1)", &[q.into()])
                .unwrap()
                .unwrap()
        };
        assert_eq!(code("SELECT idem_begin('s', 'k', ttl => '-1 s')"), "22023");
        assert_eq!(
            code("SELECT idem_complete('s', 'nobody', 1, '{}')"),
            "IK003"
        );
        assert_eq!(code("SELECT idem_begin('s', 'k', '{\"a\": 1}')"), "ok");
        assert_eq!(code("SELECT idem_begin('s', 'k', '{\"a\": 2}')"), "IK001");
    }
}
