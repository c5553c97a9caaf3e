//! pg_cron runs the purge: the scheduler the portable variant relies on (tested with the
//! backend under test). pg_cron has
//! minute granularity, so this test waits up to two minutes. It runs where the server has
//! pg_cron (the private PostgreSQL 15 cluster preloads Debian's postgresql-15-cron, with
//! `cron.database_name = 'pgidem_cron'`); elsewhere it is skipped, with the reason.

use std::time::Duration;

use pg_idempotency_tests::*;

const DB: &str = "pgidem_cron";

#[test]
fn pg_cron_schedules_the_purge() {
    let mut admin = connect_to(&with_db(&dsn(), "postgres"));
    let cron_db: Option<String> = admin
        .query_opt(
            "SELECT setting FROM pg_settings WHERE name = 'cron.database_name'",
            &[],
        )
        .unwrap()
        .map(|r| r.get(0));
    if cron_db.as_deref() != Some(DB) {
        // Setup installs Debian's pg_cron for PostgreSQL 15, the version it packages; the
        // embedded PostgreSQL 18 has no pg_cron build.
        let why = if server_major(&mut admin) == 15 {
            Skip::Missing
        } else {
            Skip::NotApplicable
        };
        skip(
            why,
            &format!(
                "pg_cron is not loaded by this PostgreSQL {} server (setup installs Debian's postgresql-15-cron for PostgreSQL 15)",
                server_major(&mut admin)
            ),
        );
        return;
    }
    ensure_database(DB);
    let mut c = connect_to(&with_db(&dsn(), DB));
    c.batch_execute(
        "CREATE EXTENSION IF NOT EXISTS pg_cron; \
         SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = 'idem-purge'",
    )
    .unwrap();
    reinstall(&with_db(&dsn(), DB));
    // Unresolved claims too (their lease lapsed): gone once their unresolved bound passes.
    c.execute("SELECT count(idem_begin('cron', 'gone-' || g, ttl => '10 ms', lease => '10 ms', unresolved_ttl => '10 ms')) FROM generate_series(1, 50) g", &[])
        .unwrap();
    c.execute(
        "SELECT count(idem_begin('cron', 'live-' || g)) FROM generate_series(1, 5) g",
        &[],
    )
    .unwrap();
    // The recipe from the docs.
    let job: i64 = c
        .query_one(
            "SELECT cron.schedule('idem-purge', '* * * * *', 'SELECT idem_purge_expired()')",
            &[],
        )
        .unwrap()
        .get(0);
    let ran = eventually(Duration::from_secs(150), || {
        c.query_one(
            "SELECT count(*) FROM cron.job_run_details WHERE jobid = $1 AND status = 'succeeded'",
            &[&job],
        )
        .map(|r| r.get::<_, i64>(0) > 0)
        .unwrap_or(false)
    });
    let left: i64 = c
        .query_one("SELECT count(*) FROM idempotency.records", &[])
        .unwrap()
        .get(0);
    c.execute("SELECT cron.unschedule($1::bigint)", &[&job])
        .unwrap();
    assert!(ran, "pg_cron did not run the purge within two minutes");
    assert_eq!(
        left, 5,
        "the scheduled purge left expired rows or removed live ones"
    );
}
