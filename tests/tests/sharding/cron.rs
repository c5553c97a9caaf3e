//! One pg_cron job in the proxy database purges every partition (docs/scaling.md,
//! "Purging"): the job runs the proxy's idem_purge_expired(), which asks them all. pg_cron
//! has minute granularity, so this test waits up to two and a half minutes. It runs where
//! the server has pg_cron (the private PostgreSQL 15 cluster preloads Debian's
//! postgresql-15-cron, `cron.database_name = 'pgidem_cron'`); elsewhere it is skipped.

use std::time::Duration;

use pg_idempotency_tests::sharded::{partition_of, Sharded};
use pg_idempotency_tests::*;

#[test]
fn a_pg_cron_job_on_the_proxy_purges_every_partition() {
    let mut admin = connect_to(&with_db(&dsn(), "postgres"));
    let cron_db: Option<String> = admin
        .query_opt(
            "SELECT setting FROM pg_settings WHERE name = 'cron.database_name'",
            &[],
        )
        .unwrap()
        .map(|r| r.get(0));
    let Some(cron_db) = cron_db else {
        let why = if server_major(&mut admin) == 15 {
            Skip::Missing
        } else {
            Skip::NotApplicable
        };
        skip(why, "pg_cron is not loaded by this server (setup installs Debian's postgresql-15-cron for PostgreSQL 15)");
        return;
    };
    let Some(s) = Sharded::new("cron", 2) else {
        return;
    };
    let proxy_db = s
        .proxy
        .split_whitespace()
        .find_map(|p| p.strip_prefix("dbname="))
        .unwrap()
        .to_string();
    let mut c = s.connect();
    let scope = scope("cron");
    let gone: Vec<String> = (0..20).map(|i| format!("gone-{i}")).collect();
    assert!((0..2).all(|p| gone.iter().any(|k| partition_of(&scope, k, 2) == p)));
    for key in &gone {
        c.execute(
            "SELECT idem_begin($1, $2, ttl => '10 ms', lease => '10 ms', unresolved_ttl => '10 ms')",
            &[&scope, key],
        )
        .unwrap();
    }
    for i in 0..4 {
        begin(&mut c, &scope, &format!("live-{i}"));
    }
    wait_for_expiry(&mut c, &scope, &gone);

    ensure_database(&cron_db);
    let mut cron = connect_to(&with_db(&dsn(), &cron_db));
    cron.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
        .unwrap();
    let name = format!("idem-purge-{proxy_db}");
    let job: i64 = cron
        .query_one(
            "SELECT cron.schedule_in_database($1, '* * * * *', 'SELECT idem_purge_expired()', $2)",
            &[&name, &proxy_db],
        )
        .unwrap()
        .get(0);
    let ran = eventually(Duration::from_secs(150), || {
        cron.query_one(
            "SELECT count(*) FROM cron.job_run_details WHERE jobid = $1 AND status = 'succeeded'",
            &[&job],
        )
        .map(|r| r.get::<_, i64>(0) > 0)
        .unwrap_or(false)
    });
    let failures: Vec<String> = cron
        .query(
            "SELECT return_message FROM cron.job_run_details WHERE jobid = $1 AND status = 'failed'",
            &[&job],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    cron.execute("SELECT cron.unschedule($1::bigint)", &[&job])
        .unwrap();
    assert!(
        ran,
        "pg_cron did not run the proxy's purge within 150 s; failed runs: {failures:?}"
    );
    let left: i64 = (0..2)
        .map(|p| -> i64 {
            s.partition(p)
                .query_one(
                    "SELECT count(*) FROM idempotency.records WHERE scope = $1",
                    &[&scope],
                )
                .unwrap()
                .get(0)
        })
        .sum();
    assert_eq!(
        left, 4,
        "the scheduled purge left expired rows or removed live ones"
    );
}
