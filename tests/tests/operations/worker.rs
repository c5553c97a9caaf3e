//! Extension only: the purge worker of a server that preloads pg_idempotency (the portable
//! variant has none; pg_cron.rs schedules its purge). Its database is
//! `pg_idempotency.database` (pgidem_worker in the private clusters). One test, in steps,
//! since they share the worker and its settings.

use std::time::Duration;

use pg_idempotency_tests::*;

const DB: &str = "pgidem_worker";

fn worker_pid(admin: &mut Client) -> Option<i32> {
    admin
        .query_opt(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_idempotency purger'",
            &[],
        )
        .unwrap()
        .map(|r| r.get(0))
}

/// What the worker shows as its activity: the purge interval it applies.
fn worker_activity(admin: &mut Client) -> String {
    admin
        .query_opt(
            "SELECT query FROM pg_stat_activity WHERE backend_type = 'pg_idempotency purger'",
            &[],
        )
        .unwrap()
        .and_then(|r| r.get(0))
        .unwrap_or_default()
}

fn set_interval(admin: &mut Client, seconds: i32) {
    admin
        .batch_execute(&format!(
            "ALTER SYSTEM SET pg_idempotency.purge_interval = {seconds}"
        ))
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
}

/// Adds `n` records that expire 50 ms from now, and waits until they have expired.
fn expire_some(c: &mut Client, n: i32) {
    c.execute(
        "SELECT count(idem_begin('worker', 'gone-' || g || '-' || clock_timestamp(), ttl => '50 ms', lease => '50 ms', \
                                     unresolved_ttl => '50 ms')) \
         FROM generate_series(1, $1) g",
        &[&n],
    )
    .unwrap();
    // Until then the worker has nothing to purge.
    wait_until(
        "the short-lived records to expire",
        Duration::from_secs(10),
        || live_rows(c, "gone-%") == 0,
    );
}

/// How many records of the test's scope whose key is LIKE `pattern` are stored, expired
/// or not (the purge removes the row; expiry alone does not).
fn stored_rows(c: &mut Client, pattern: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM idempotency.records WHERE scope = 'worker' AND key LIKE $1",
        &[&pattern],
    )
    .unwrap()
    .get(0)
}

/// How many of those have not expired.
fn live_rows(c: &mut Client, pattern: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM idempotency.records \
         WHERE scope = 'worker' AND key LIKE $1 AND expires_at > clock_timestamp()",
        &[&pattern],
    )
    .unwrap()
    .get(0)
}

#[test]
fn the_worker_purges_survives_termination_and_follows_its_interval() {
    if backend() == Backend::Portable {
        skip(
            Skip::NotApplicable,
            "extension only: the portable variant has no worker (pg_cron purges it: pg_cron.rs)",
        );
        return;
    }
    let mut admin = connect_to(&with_db(&dsn(), "postgres"));
    let setting: String = admin
        .query_one("SHOW pg_idempotency.database", &[])
        .unwrap()
        .get(0);
    assert_eq!(setting, DB, "the server under test must purge {DB}");
    ensure_database(DB);
    let mut c = connect_to(&with_db(&dsn(), DB));
    set_interval(&mut admin, 1);
    assert!(
        eventually(Duration::from_secs(30), || worker_pid(&mut admin).is_some()),
        "no worker running"
    );

    // Without the extension the worker waits, harmlessly. First a run that found it (the
    // database may be new, or an earlier run left it dropped), so that the waiting shown
    // next can only come from a run after the drop.
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_idempotency")
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || worker_activity(&mut admin)
            .contains("purging every 1 s")),
        "the worker does not show that it found the extension: {}",
        worker_activity(&mut admin)
    );
    let pid = worker_pid(&mut admin).unwrap();
    c.batch_execute("DROP EXTENSION pg_idempotency").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || worker_activity(&mut admin)
            .contains(&format!("pg_idempotency is not created in \"{DB}\""))),
        "no run of the worker found the extension missing: {}",
        worker_activity(&mut admin)
    );
    assert_eq!(
        worker_pid(&mut admin),
        Some(pid),
        "the worker restarted while the extension was missing"
    );

    // Created without a restart: picked up, and it purges within three intervals.
    c.batch_execute("CREATE EXTENSION pg_idempotency").unwrap();
    c.execute(
        "SELECT count(idem_begin('worker', 'live-' || g)) FROM generate_series(1, 10) g",
        &[],
    )
    .unwrap();
    expire_some(&mut c, 200);
    assert!(
        eventually(Duration::from_secs(3), || stored_rows(&mut c, "gone-%")
            == 0),
        "not purged within 3 intervals"
    );
    assert_eq!(
        stored_rows(&mut c, "live-%"),
        10,
        "the worker removed live records"
    );

    // pg_terminate_backend: the postmaster starts it again.
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    assert!(
        eventually(Duration::from_secs(40), || worker_pid(&mut admin)
            .is_some_and(|p| p != pid)),
        "the worker did not come back after pg_terminate_backend"
    );
    expire_some(&mut c, 50);
    assert!(
        eventually(Duration::from_secs(3), || stored_rows(&mut c, "gone-%")
            == 0),
        "the restarted worker does not purge"
    );

    // Interval 0: off.
    set_interval(&mut admin, 0);
    // The worker shows the interval it applies as its activity.
    assert!(
        eventually(Duration::from_secs(10), || worker_activity(&mut admin)
            .contains("purging is off")),
        "the worker did not apply purge_interval = 0: {}",
        worker_activity(&mut admin)
    );
    expire_some(&mut c, 50);
    // What is checked is that time passes without a purge: three of the old intervals.
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(
        stored_rows(&mut c, "gone-%"),
        50,
        "the worker purged with purge_interval = 0"
    );

    // A changed interval after a reload.
    set_interval(&mut admin, 2);
    assert!(
        eventually(Duration::from_secs(10), || worker_activity(&mut admin)
            .contains("purging every 2 s")),
        "the worker does not show purge_interval = 2: {}",
        worker_activity(&mut admin)
    );
    assert!(
        eventually(Duration::from_secs(6), || stored_rows(&mut c, "gone-%")
            == 0),
        "not purged within 3 intervals of 2 s"
    );

    admin
        .batch_execute("ALTER SYSTEM RESET pg_idempotency.purge_interval")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
}
