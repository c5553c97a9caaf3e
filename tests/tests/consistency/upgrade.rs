//! Upgrades, for the backend under test: a database on each release, upgraded, has exactly
//! the objects of a fresh install of this version, and keeps its records, holders and
//! fences.
//!
//! A release is installed as the releases were kept: the base script, 0.1.0's
//! (`pg_idempotency/sql/released/`, `sql/released/`), and the upgrade scripts up to it. For
//! the extension PostgreSQL does that itself (`CREATE EXTENSION ... VERSION` finds no
//! script for the version and takes the update path from 0.1.0); for the portable variant
//! the scripts run in order. That each release installed fresh equals its predecessor
//! upgraded was proven when it was released (docs/decisions.md, "Releases").
//!
//! The extension's library serves a window of older schemas before their update (from
//! 0.5.0 on, docs/installation.md, "Upgrading"): calls on one in it are served, calls on
//! an older one are refused (SQLSTATE 55000) until `ALTER EXTENSION pg_idempotency UPDATE`.

use pg_idempotency_tests::catalogue;
use pg_idempotency_tests::*;

/// Every released version, oldest first: each is upgraded to this one. The first is the
/// base, the one install script kept.
const RELEASES: &[&str] = &[
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0",
];
const CURRENT: &str = env!("CARGO_PKG_VERSION");
/// The oldest release whose schema the extension's library serves before its update.
const OLDEST_SERVED: &str = "0.5.0";
/// Releases the extension's update to this version leaves every object of as it was (when
/// the change is the library's alone, as 0.7.0's was). Their catalogue is the fresh
/// install's before the update too. None for 0.9.0: records keep `lease_length`.
const EXTENSION_OBJECTS_UNCHANGED_FROM: &[&str] = &[];

/// The steps from release `from` to `to` (a later release, or this version): (a, b) per
/// upgrade script.
fn steps(from: &str, to: &str) -> Vec<(&'static str, &'static str)> {
    let mut all: Vec<&'static str> = RELEASES.to_vec();
    all.push(CURRENT);
    let at = |v: &str| {
        all.iter()
            .position(|r| *r == v)
            .unwrap_or_else(|| panic!("{v} is not a release"))
    };
    all[at(from)..=at(to)]
        .windows(2)
        .map(|w| (w[0], w[1]))
        .collect()
}

/// Whether the backend under test serves a database left on release `from` before its
/// update: the portable variant's functions are the release's own; the extension's library
/// serves the window.
fn served_before_update(from: &str) -> bool {
    let at = |v: &str| RELEASES.iter().position(|r| *r == v).unwrap();
    backend() == Backend::Portable || at(from) >= at(OLDEST_SERVED)
}

fn describe(c: &mut Client) -> Vec<String> {
    catalogue::describe(c, "public", "idempotency")
}

fn installed_version(c: &mut Client) -> String {
    let sql = match backend() {
        Backend::Extension => {
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_idempotency'"
        }
        Backend::Portable => "SELECT version FROM idempotency.installed",
    };
    c.query_one(sql, &[]).unwrap().get(0)
}

/// Installs the released version `from` into the (empty) database of `dsn`: the base
/// script and the upgrade scripts up to `from`.
fn install_released(dsn: &str, from: &str) {
    match backend() {
        Backend::Extension => connect_to(dsn)
            .batch_execute(&format!("CREATE EXTENSION pg_idempotency VERSION '{from}'"))
            .unwrap_or_else(|e| {
                panic!("CREATE EXTENSION ... VERSION '{from}' (scripts/install-extension.sh installs the base script): {e}")
            }),
        Backend::Portable => {
            let base = RELEASES[0];
            let (ok, out) = run_sql_file(
                dsn,
                &format!("released/pg_idempotency--{base}.sql"),
                &[],
                &[],
            );
            assert!(ok, "installing the base script {base}:\n{out}");
            for (a, b) in steps(base, from) {
                portable_step(dsn, a, b)
                    .unwrap_or_else(|e| panic!("installing {from}: the upgrade from {a}: {e}"));
            }
        }
    }
}

/// Upgrades the database of `dsn` from `from` to this version, as a user would: the
/// extension in one `ALTER EXTENSION ... UPDATE` (PostgreSQL chains the scripts), the portable
/// variant one script per step. Whether it worked, and what it said.
fn upgrade(dsn: &str, from: &str) -> Result<(), String> {
    match backend() {
        Backend::Extension => connect_to(dsn)
            .batch_execute("ALTER EXTENSION pg_idempotency UPDATE")
            .map_err(|e| format!("{}: {e}", sqlstate(&e))),
        Backend::Portable => steps(from, CURRENT)
            .into_iter()
            .try_for_each(|(a, b)| portable_step(dsn, a, b)),
    }
}

fn portable_step(dsn: &str, from: &str, to: &str) -> Result<(), String> {
    let file = format!("upgrade/pg_idempotency--{from}--{to}.sql");
    let args = ["-v", "VERBOSITY=verbose", "-f", &sql_file(&file)].map(String::from);
    let (ok, out) = run_psql(dsn, &args, &[]);
    if ok {
        Ok(())
    } else {
        Err(out)
    }
}

#[test]
fn an_upgraded_install_is_a_fresh_install_and_keeps_its_records() {
    let fresh_dsn = fresh_database("pgidem_upgrade_fresh");
    install(&fresh_dsn);
    let mut fresh = connect_to(&fresh_dsn);
    let expected = describe(&mut fresh);
    assert_eq!(installed_version(&mut fresh), CURRENT);
    for from in RELEASES {
        upgraded_equals_fresh(from, &expected);
    }
    drop(fresh);
    drop_database("pgidem_upgrade_fresh");
}

fn upgraded_equals_fresh(from: &str, expected: &[String]) {
    let db = format!("pgidem_upgrade_{}", from.replace('.', "_"));
    let dsn = fresh_database(&db);
    install_released(&dsn, from);
    let mut c = connect_to(&dsn);
    assert_eq!(installed_version(&mut c), from);
    let before = describe(&mut c);
    if backend() == Backend::Extension && EXTENSION_OBJECTS_UNCHANGED_FROM.contains(&from) {
        assert_eq!(before, expected, "{from}'s objects are {CURRENT}'s");
    } else {
        assert_ne!(
            before, expected,
            "{from} and {CURRENT} install the same objects"
        );
    }

    // Work in flight across the upgrade: a completed call, a running holder. Made through
    // the API where it is served before the update; else written as the release's library
    // wrote it (this one refuses the calls).
    let running_fence = if served_before_update(from) {
        let done = begin(&mut c, "upgrade", "done");
        complete(
            &mut c,
            "upgrade",
            "done",
            done.fence.unwrap(),
            r#"{"sent": 1}"#,
        )
        .unwrap();
        let running = begin(&mut c, "upgrade", "running");
        assert_eq!(running.outcome, "claimed");
        running.fence.unwrap()
    } else {
        assert_refused(&mut c, "SELECT * FROM idem_begin('upgrade', 'done')", from);
        let owner = &current_role(&mut c);
        write_record(
            &mut c,
            "upgrade",
            "done",
            owner,
            Written::Succeeded(r#"{"sent": 1}"#),
        );
        write_record(
            &mut c,
            "upgrade",
            "running",
            owner,
            Written::Running("5 minutes"),
        )
    };

    upgrade(&dsn, from).unwrap_or_else(|e| panic!("upgrade from {from}: {e}"));
    let mut c = connect_to(&dsn);
    assert_eq!(installed_version(&mut c), CURRENT);
    let after = describe(&mut c);
    let missing: Vec<_> = expected.iter().filter(|l| !after.contains(l)).collect();
    let extra: Vec<_> = after.iter().filter(|l| !expected.contains(l)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "upgraded from {from} != fresh\nonly in a fresh install:\n{missing:#?}\nonly after the upgrade:\n{extra:#?}"
    );

    let replay = begin(&mut c, "upgrade", "done");
    assert_eq!(replay.outcome, "replay");
    assert_eq!(replay.response.as_deref(), Some(r#"{"sent": 1}"#));
    let state = complete(&mut c, "upgrade", "running", running_fence, "{}").unwrap();
    assert_eq!(state, "succeeded");
    let next = begin(&mut c, "upgrade", "new");
    assert!(next.fence.unwrap() > running_fence);

    // The new column of 0.2.0, and the counts of 0.8.0: the calls since the update
    // (begin "done" replayed, "new" claimed) are counted on both backends.
    let row = c
        .query_one(
            "SELECT note, claimed_total, replay_total FROM idem_metrics() \
             WHERE scope = 'upgrade' AND owner = session_user::regrole",
            &[],
        )
        .unwrap();
    let note: Option<String> = row.get(0);
    // A release that counts (0.8.0 on) counted its two claims before the update too.
    let at = |v: &str| RELEASES.iter().position(|r| *r == v).unwrap();
    let claimed_before = if at(from) >= at("0.8.0") { 2 } else { 0 };
    assert_eq!(
        (row.get::<_, i64>(1), row.get::<_, i64>(2)),
        (1 + claimed_before, 1),
        "{from}: counted since the update"
    );
    match backend() {
        Backend::Extension => assert_eq!(note, None),
        Backend::Portable => assert!(note.unwrap().contains("not counted")),
    }
    drop(c);
    drop_database(&db);
}

/// A record as a release's library wrote it.
enum Written<'a> {
    /// Claimed, its lease running for this long.
    Running(&'a str),
    /// Completed with this response.
    Succeeded(&'a str),
    /// Failed with this response, kept to replay.
    Failed(&'a str),
}

/// Writes `owner`'s record of (`scope`, `key`) into the tables of a release whose schema
/// this library refuses before its update, as that release's library did on a claim (and a
/// completion): a fence from the sequence, attempt 1, a day's ttl. Returns its fence.
fn write_record(c: &mut Client, scope: &str, key: &str, owner: &str, what: Written) -> i64 {
    let (state, response, lease) = match what {
        Written::Running(lease) => ("in_progress", None, Some(lease)),
        Written::Succeeded(response) => ("succeeded", Some(response), None),
        Written::Failed(response) => ("failed", Some(response), None),
    };
    c.query_one(
        "INSERT INTO idempotency.records (scope, key, state, fence, attempt, upstream_key, \
             response, created_at, completed_at, lease_until, expires_at, ttl, owner) \
         SELECT $1, $2, $3, nextval('idempotency.fence_seq'), 1, gen_random_uuid(), \
             $4::text::jsonb, now.t, CASE WHEN $4 IS NOT NULL THEN now.t END, \
             now.t + $5::text::interval, now.t + interval '1 day', interval '1 day', \
             $6::text::regrole \
         FROM (SELECT clock_timestamp() AS t) now \
         RETURNING fence",
        &[&scope, &key, &state, &response, &lease, &owner],
    )
    .unwrap_or_else(|e| panic!("writing the record {scope}/{key}: {e}"))
    .get(0)
}

/// The role a session's calls are made as: the owner of the records they claim.
fn current_role(c: &mut Client) -> String {
    c.query_one("SELECT current_user::text", &[])
        .unwrap()
        .get(0)
}

/// Asserts that `sql` is refused, changing nothing, because the database's schema is
/// `from`'s, older than the extension's library serves: SQLSTATE 55000, the version found
/// in the message, the window in the detail, and the update in the hint.
fn assert_refused(c: &mut Client, sql: &str, from: &str) {
    let err = c
        .batch_execute(sql)
        .expect_err(&format!("{sql} was served on a {from} schema"));
    let db = err
        .as_db_error()
        .unwrap_or_else(|| panic!("{sql}: not an error of the server: {err}"));
    assert_eq!(db.code().code(), "55000", "{sql}: {db:?}");
    // The library names the release that made the records' layout: 0.4.0 kept 0.3.0's.
    let layout = if from == "0.4.0" { "0.3.0" } else { from };
    assert!(
        db.message()
            .contains(&format!("schema in this database is {layout},")),
        "{sql}: {}",
        db.message()
    );
    assert!(
        db.detail()
            .is_some_and(|d| d.contains(&format!("{OLDEST_SERVED} and later"))),
        "{sql}: {db:?}"
    );
    assert!(
        db.hint()
            .is_some_and(|h| h.contains("ALTER EXTENSION pg_idempotency UPDATE")),
        "{sql}: {db:?}"
    );
}

/// One call of each function of the API that goes through the library, with arguments
/// every release's signature takes, in an order that succeeds on a served schema: 'k'
/// claimed, extended, completed, looked up and forgotten; 'r' claimed and released; then
/// the rest.
const EVERY_LIBRARY_CALL: &[&str] = &[
    "SELECT * FROM idem_begin('window', 'k')",
    "SELECT * FROM idem_extend('window', 'k', (SELECT fence FROM idem_lookup('window', 'k')), '1 minute')",
    "SELECT * FROM idem_complete('window', 'k', (SELECT fence FROM idem_lookup('window', 'k')), '{\"sent\": 1}')",
    "SELECT * FROM idem_lookup('window', 'k')",
    "SELECT idem_forget('window', 'k')",
    "SELECT * FROM idem_begin('window', 'r')",
    "SELECT idem_release('window', 'r', (SELECT fence FROM idem_lookup('window', 'r')))",
    "SELECT idem_canonical('{\"b\": 1, \"a\": 2}')",
    "SELECT idem_hash('{\"b\": 1, \"a\": 2}')",
    "SELECT idem_purge_expired()",
    "SELECT * FROM idem_set_policy('window', ttl => '1 hour')",
    "SELECT idem_drop_policy('window')",
    "SELECT * FROM idem_metrics()",
];

fn every_library_call_succeeds(c: &mut Client, on: &str) {
    for sql in EVERY_LIBRARY_CALL {
        c.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{on}: {sql}: {e:?}"));
    }
    let live: i64 = c
        .query_one(
            "SELECT count(*) FROM idempotency.records WHERE scope = 'window'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(live, 0, "{on}: 'k' was forgotten and 'r' released");
}

/// EVERY_LIBRARY_CALL is kept by hand: every C function the oldest schema in the window
/// declares must be in it, or a change to that function's C entry point could break the
/// releases the library serves with no test noticing.
#[test]
fn every_library_call_covers_the_c_functions_of_the_oldest_served_schema() {
    if backend() != Backend::Extension {
        skip(
            Skip::NotApplicable,
            "the extension's library window (the portable variant has no C functions)",
        );
        return;
    }
    let db = "pgidem_window_c_functions";
    let dsn = fresh_database(db);
    install_released(&dsn, OLDEST_SERVED);
    let c_functions: Vec<String> = connect_to(&dsn)
        .query(
            "SELECT DISTINCT p.proname::text FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
             WHERE p.pronamespace = 'public'::regnamespace AND l.lanname = 'c'
               AND p.proname LIKE 'idem\\_%' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    drop_database(db);
    assert!(
        c_functions.len() > 5,
        "{OLDEST_SERVED}'s C functions: {c_functions:?}"
    );
    let calls = EVERY_LIBRARY_CALL.concat();
    let missing: Vec<&String> = c_functions
        .iter()
        .filter(|name| !calls.contains(&format!("{name}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "{OLDEST_SERVED} declares C functions EVERY_LIBRARY_CALL (tests/tests/consistency/upgrade.rs) does not call: {missing:?}"
    );
}

#[test]
fn a_schema_older_than_the_window_refuses_every_call_until_its_update() {
    if backend() != Backend::Extension {
        skip(
            Skip::NotApplicable,
            "the extension's library window (the portable variant's functions are each release's own)",
        );
        return;
    }
    for from in RELEASES.iter().filter(|r| !served_before_update(r)) {
        let db = format!("pgidem_window_{}", from.replace('.', "_"));
        let dsn = fresh_database(&db);
        install_released(&dsn, from);
        // One session across the update: what it learnt of the old schema must not stick.
        let mut c = connect_to(&dsn);
        for sql in EVERY_LIBRARY_CALL {
            assert_refused(&mut c, sql, from);
        }
        let written: i64 = c
            .query_one("SELECT count(*) FROM idempotency.records", &[])
            .unwrap()
            .get(0);
        assert_eq!(written, 0, "a refused call wrote a record");
        // A policy set before the library was replaced still reads: idem_policies is SQL
        // over its table, which every release has.
        c.batch_execute(
            "INSERT INTO idempotency.policies (scope, ttl, updated_at, updated_by) \
             VALUES ('window-kept', '2 hours', now(), current_user::regrole)",
        )
        .unwrap();
        let scopes: i64 = c
            .query_one("SELECT count(*) FROM idem_policies()", &[])
            .unwrap()
            .get(0);
        assert_eq!(scopes, 1);

        upgrade(&dsn, from).unwrap_or_else(|e| panic!("upgrade from {from}: {e}"));
        every_library_call_succeeds(&mut c, &format!("{from} after its update"));
        drop(c);
        drop_database(&db);
    }
}

/// The releases in the window are served before their update, with what their schema
/// keeps: claim tokens (0.3.0) give a repeat its claim back, a duplicate gets a
/// retry_after (before 0.5.0 counted from the record's creation, as the schema has no
/// claim time), and the claims made then complete after the update.
#[test]
fn a_schema_in_the_window_is_served_before_its_update() {
    const TOKEN: &str = "6a1f0c2e-9b3d-4c5e-8f7a-0b1c2d3e4f50";
    let in_window: Vec<&str> = RELEASES
        .iter()
        .copied()
        .skip_while(|r| *r != OLDEST_SERVED)
        .collect();
    assert_eq!(in_window, ["0.5.0", "0.6.0", "0.7.0", "0.8.0"]);
    for from in in_window {
        let db = format!("pgidem_window_{}", from.replace('.', "_"));
        let dsn = fresh_database(&db);
        install_released(&dsn, from);
        let mut c = connect_to(&dsn);
        assert_eq!(installed_version(&mut c), from);
        every_library_call_succeeds(&mut c, from);

        let claim = begin_token(&mut c, "window", "held", TOKEN);
        assert_eq!((claim.0.as_str(), claim.2), ("claimed", false), "{from}");
        assert_eq!(
            begin_token(&mut c, "window", "held", TOKEN),
            claim,
            "{from}: the repeat"
        );
        let duplicate = c
            .query_one(
                "SELECT outcome, retry_after IS NOT NULL FROM idem_begin('window', 'held')",
                &[],
            )
            .unwrap();
        assert_eq!(duplicate.get::<_, String>(0), "in_progress", "{from}");
        assert!(
            duplicate.get::<_, bool>(1),
            "{from}: a duplicate gets a retry_after"
        );

        upgrade(&dsn, from).unwrap_or_else(|e| panic!("upgrade from {from}: {e}"));
        assert_eq!(installed_version(&mut c), CURRENT);
        assert_eq!(
            begin_token(&mut c, "window", "held", TOKEN),
            claim,
            "{from}: the repeat after the update"
        );
        // Claimed before 0.9.0, its lease's length is unknown (its duplicates keep the
        // release's rule); a claim after the update keeps it.
        let length: Option<String> = c
            .query_one(
                "SELECT lease_length::text FROM idempotency.records \
                 WHERE scope = 'window' AND key = 'held'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(length, None, "{from}: a claim from before the update");
        assert_eq!(
            complete(&mut c, "window", "held", claim.1.unwrap(), "{}").unwrap(),
            "succeeded",
            "{from}"
        );
        c.batch_execute("SELECT * FROM idem_begin('window', 'after', lease => '42 seconds')")
            .unwrap();
        let length: Option<String> = c
            .query_one(
                "SELECT lease_length::text FROM idempotency.records \
                 WHERE scope = 'window' AND key = 'after'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(
            length.as_deref(),
            Some("00:00:42"),
            "{from}: a claim after it"
        );
        drop(c);
        drop_database(&db);
    }
}

#[test]
fn a_portable_upgrade_from_another_version_changes_nothing() {
    if backend() != Backend::Portable {
        skip(
            Skip::NotApplicable,
            "the portable variant's upgrade scripts (the extension's version check is PostgreSQL's own)",
        );
        return;
    }
    let dsn = fresh_database("pgidem_upgrade_twice");
    install(&dsn);
    let mut c = connect_to(&dsn);
    let before = describe(&mut c);
    for (from, to) in steps(RELEASES[0], CURRENT) {
        let err = portable_step(&dsn, from, to)
            .expect_err(&format!("an upgrade from {from} ran on {CURRENT}"));
        assert!(err.contains("55000"), "{err}");
        assert!(
            err.contains(&format!("from {from}, not from {CURRENT}")),
            "{err}"
        );
        assert_eq!(describe(&mut c), before);
    }
    assert_eq!(installed_version(&mut c), CURRENT);
    drop(c);
    drop_database("pgidem_upgrade_twice");
}

/// `idem_begin(scope, key)` as the session's role, every column.
fn begin_row(c: &mut Client, scope: &str, key: &str) -> postgres::Row {
    c.query_one("SELECT * FROM idem_begin($1, $2)", &[&scope, &key])
        .unwrap_or_else(|e| panic!("idem_begin({scope}, {key}): {e}"))
}

fn fence_of(c: &mut Client, scope: &str, key: &str) -> i64 {
    c.query_one("SELECT fence FROM idem_lookup($1, $2)", &[&scope, &key])
        .unwrap_or_else(|e| panic!("idem_lookup({scope}, {key}): {e}"))
        .get(0)
}

/// 0.1.0's whole API, as its functions serve it (the portable variant's: the extension's
/// library refuses a 0.1.0 schema), filling scope `s` for role `a` (whose session is `ca`):
/// done, running (extended), failed (kept), released (and forgotten), expired (claimed);
/// a policy set, another set and dropped. Returns the running call's fence.
fn fill_0_1_0_through_its_api(
    admin: &mut Client,
    ca: &mut Client,
    a: &pg_idempotency_tests::attack::TestRole,
    b: &pg_idempotency_tests::attack::TestRole,
    s: &str,
) -> i64 {
    const FROM: &str = "0.1.0";
    let done = begin_row(ca, s, "done");
    assert_eq!(done.len(), 10, "{FROM}'s idem_begin answers 10 columns");
    complete(ca, s, "done", done.get("fence"), r#"{"sent": 1}"#).unwrap();
    let running = begin(ca, s, "running");
    ca.execute(
        "SELECT idem_extend($1, 'running', $2, '5 minutes')",
        &[&s, &running.fence],
    )
    .unwrap();
    let failed = begin(ca, s, "failed");
    ca.execute(
        "SELECT idem_complete($1, 'failed', $2, '{\"error\": 1}', false, true)",
        &[&s, &failed.fence],
    )
    .unwrap();
    let gone = begin(ca, s, "released");
    ca.execute(
        "SELECT idem_release($1, 'released', $2)",
        &[&s, &gone.fence],
    )
    .unwrap();
    begin(ca, s, "expired");
    let owner: String = ca
        .query_one("SELECT owner::text FROM idem_lookup($1, 'done')", &[&s])
        .unwrap()
        .get(0);
    assert_eq!(owner, a.name);
    let hash: Vec<u8> = ca
        .query_one("SELECT idem_hash('{\"b\": 1, \"a\": [1.0]}')", &[])
        .unwrap()
        .get(0);
    assert_eq!(hash.len(), 32);
    // In the release, every role shares one key space: b replays a's call.
    let mut cb = b.session();
    assert_eq!(begin(&mut cb, s, "done").outcome, "replay");
    admin
        .execute("SELECT * FROM idem_set_policy($1, ttl => '2 hours')", &[&s])
        .unwrap();
    admin
        .execute("SELECT idem_set_policy('upgrade-dropped')", &[])
        .unwrap();
    assert!(admin
        .query_one("SELECT idem_drop_policy('upgrade-dropped')", &[])
        .unwrap()
        .get::<_, bool>(0));
    let in_progress: i64 = admin
        .query_one(
            "SELECT in_progress FROM idem_metrics() WHERE scope = $1",
            &[&s],
        )
        .unwrap()
        .get(0);
    assert_eq!(in_progress, 2, "running and expired are in progress");
    assert!(admin
        .query_one("SELECT idem_forget($1, 'released')", &[&s])
        .unwrap()
        .get::<_, Option<bool>>(0)
        .is_some());
    running.fence.unwrap()
}

#[test]
fn a_filled_0_1_0_keeps_its_records_through_the_update() {
    use pg_idempotency_tests::attack::TestRole;
    const FROM: &str = "0.1.0";
    let dsn = fresh_database("pgidem_upgrade_filled");
    install_released(&dsn, FROM);
    let a = TestRole::create(&dsn, "upgrade_a", "IN ROLE idempotency_user");
    let b = TestRole::create(&dsn, "upgrade_b", "IN ROLE idempotency_user");
    let mut admin = connect_to(&dsn);
    let mut ca = a.session();
    let s = "upgrade-filled";

    // The release's whole API where it is served before the update; the extension's
    // library refuses it, so the release's records are written as its library wrote them.
    let running_fence = if served_before_update(FROM) {
        fill_0_1_0_through_its_api(&mut admin, &mut ca, &a, &b, s)
    } else {
        assert_refused(
            &mut ca,
            "SELECT * FROM idem_begin('upgrade-filled', 'done')",
            FROM,
        );
        let record = |admin: &mut Client, key: &str, what: Written| {
            write_record(admin, s, key, &a.name, what)
        };
        record(&mut admin, "done", Written::Succeeded(r#"{"sent": 1}"#));
        let running = record(&mut admin, "running", Written::Running("5 minutes"));
        record(&mut admin, "failed", Written::Failed(r#"{"error": 1}"#));
        record(&mut admin, "expired", Written::Running("1 minute"));
        admin
            .execute(
                "INSERT INTO idempotency.policies (scope, ttl, updated_at, updated_by) \
                 VALUES ($1, '2 hours', now(), current_user::regrole)",
                &[&s],
            )
            .unwrap();
        running
    };
    // An expired record, as time would leave it.
    admin
        .execute(
            "UPDATE idempotency.records SET created_at = created_at - interval '3 hours', \
                 lease_until = lease_until - interval '3 hours', expires_at = clock_timestamp() - interval '1 hour' \
             WHERE scope = $1 AND key = 'expired'",
            &[&s],
        )
        .unwrap();
    let fences_before: i64 = admin
        .query_one("SELECT max(fence) FROM idempotency.records", &[])
        .unwrap()
        .get(0);
    drop(ca);

    upgrade(&dsn, FROM).unwrap_or_else(|e| panic!("upgrade from {FROM}: {e}"));

    let mut ca = a.session();
    let mut cb = b.session();
    // Every record keeps the owner that claimed it, and its state.
    let owners: Vec<(String, String, String)> = admin
        .query(
            "SELECT key, state, owner::text FROM idempotency.records WHERE scope = $1 ORDER BY key",
            &[&s],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let expect = |key: &str, state: &str| (key.to_string(), state.to_string(), a.name.clone());
    assert_eq!(
        owners,
        vec![
            expect("done", "succeeded"),
            expect("expired", "in_progress"),
            expect("failed", "failed"),
            expect("running", "in_progress"),
        ]
    );
    // The owner's calls go on as before.
    let replay = begin_row(&mut ca, s, "done");
    assert_eq!(replay.get::<_, String>("outcome"), "replay");
    assert_eq!(replay.get::<_, String>("key"), "done");
    assert_eq!(
        begin(&mut ca, s, "failed").succeeded,
        Some(false),
        "the cached failure replays"
    );
    assert_eq!(
        complete(&mut ca, s, "running", running_fence, "{}").unwrap(),
        "succeeded"
    );
    let again = begin(&mut ca, s, "expired");
    assert_eq!(again.outcome, "claimed");
    assert!(again.fence.unwrap() > fences_before, "fences keep rising");
    // Another role now has a key space of its own.
    let theirs = begin(&mut cb, s, "done");
    assert_eq!((theirs.outcome.as_str(), theirs.attempt), ("claimed", 1));
    let first_upstream: String = ca
        .query_one(
            "SELECT upstream_key::text FROM idem_lookup($1, 'done')",
            &[&s],
        )
        .unwrap()
        .get(0);
    assert_ne!(theirs.upstream_key, first_upstream);
    let refused = cb
        .query(
            "SELECT * FROM idem_lookup($1, 'done', $2::text::regrole)",
            &[&s, &a.name],
        )
        .expect_err("b read a's record");
    assert_eq!(sqlstate(&refused), "42501");
    assert_eq!(fence_of(&mut cb, s, "done"), theirs.fence.unwrap());
    // The policy set before the update still applies.
    let ttl: String = admin
        .query_one(
            "SELECT ttl::text FROM idem_policies() WHERE scope = $1",
            &[&s],
        )
        .unwrap()
        .get(0);
    assert_eq!(ttl, "02:00:00");
    assert!(ca
        .query_one("SELECT idem_forget($1, 'done')", &[&s])
        .unwrap()
        .get::<_, bool>(0));
    let mine: Vec<String> = ca
        .query("SELECT owner::text FROM idem_metrics()", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        !mine.is_empty() && mine.iter().all(|o| *o == a.name),
        "{mine:?}"
    );
    drop((ca, cb, admin));
    drop_database("pgidem_upgrade_filled");
}

/// `idem_begin` with a claim token (0.3.0): outcome, fence, recovered.
fn begin_token(c: &mut Client, scope: &str, key: &str, token: &str) -> (String, Option<i64>, bool) {
    let row = c
        .query_one(
            "SELECT outcome, fence, recovered FROM idem_begin($1, $2, claim_token => $3::text::uuid)",
            &[&scope, &key, &token],
        )
        .unwrap_or_else(|e| panic!("idem_begin({scope}, {key}, claim_token): {e:?}"));
    (row.get(0), row.get(1), row.get(2))
}

#[test]
fn a_filled_0_2_0_keeps_its_claims_through_the_update() {
    const FROM: &str = "0.2.0";
    const TOKEN: &str = "3f0a6c1e-5b7d-4e2a-9c8b-1d2e3f4a5b6c";
    let dsn = fresh_database("pgidem_upgrade_filled_020");
    install_released(&dsn, FROM);
    // One session lives through the update: what the extension's library learnt of the
    // old schema does not stick, and the portable variant's functions are replaced.
    let mut c = connect_to(&dsn);
    let s = "upgrade-020";

    // The release's idem_begin where it is served before the update; the extension's
    // library refuses it, so the release's records are written as its library wrote them.
    let (running_fence, lapsing_fence) = if served_before_update(FROM) {
        let done = begin_row(&mut c, s, "done");
        assert_eq!(done.len(), 11, "{FROM}'s idem_begin answers 11 columns");
        complete(&mut c, s, "done", done.get("fence"), r#"{"sent": 1}"#).unwrap();
        let running = begin(&mut c, s, "running");
        let lapsing = try_begin(&mut c, s, "lapsing", None, Some("100 ms"), None).unwrap();
        (running.fence.unwrap(), lapsing.fence.unwrap())
    } else {
        assert_refused(
            &mut c,
            "SELECT * FROM idem_begin('upgrade-020', 'done')",
            FROM,
        );
        let owner = &current_role(&mut c);
        write_record(
            &mut c,
            s,
            "done",
            owner,
            Written::Succeeded(r#"{"sent": 1}"#),
        );
        (
            write_record(&mut c, s, "running", owner, Written::Running("5 minutes")),
            write_record(&mut c, s, "lapsing", owner, Written::Running("100 ms")),
        )
    };
    let no_token = c
        .query_one(
            "SELECT outcome FROM idem_begin($1, 'k', claim_token => $2::text::uuid)",
            &[&s, &TOKEN],
        )
        .expect_err("the release's idem_begin took a claim token");
    assert_eq!(sqlstate(&no_token), "42883");

    upgrade(&dsn, FROM).unwrap_or_else(|e| panic!("upgrade from {FROM}: {e}"));
    assert_eq!(installed_version(&mut c), CURRENT);

    // Claims made before the update carry no token: no repeat gets them back.
    assert_eq!(
        begin_token(&mut c, s, "running", TOKEN),
        ("in_progress".to_string(), None, false)
    );
    assert_eq!(begin(&mut c, s, "done").outcome, "replay");
    assert_eq!(
        complete(&mut c, s, "running", running_fence, "{}").unwrap(),
        "succeeded"
    );
    // A lease taken before the update lapses and is taken over with a token; its repeat
    // gets the takeover back.
    assert!(
        eventually(std::time::Duration::from_secs(10), || {
            c.query_one(
                "SELECT lease_until < clock_timestamp() FROM idem_lookup($1, 'lapsing')",
                &[&s],
            )
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or(false)
        }),
        "the lease never lapsed"
    );
    let taken = begin_token(&mut c, s, "lapsing", TOKEN);
    assert_eq!((taken.0.as_str(), taken.2), ("claimed", true));
    assert!(taken.1.unwrap() > lapsing_fence);
    assert_eq!(begin_token(&mut c, s, "lapsing", TOKEN), taken);
    // A new claim with a token, and its repeat.
    let fresh = begin_token(&mut c, s, "new", TOKEN);
    assert_eq!(fresh.0, "claimed");
    assert_eq!(begin_token(&mut c, s, "new", TOKEN), fresh);
    drop(c);
    drop_database("pgidem_upgrade_filled_020");
}
