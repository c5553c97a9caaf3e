//! Upgrades, for the backend under test: a database on each release (its install script as
//! released: `pg_idempotency/sql/released/`, `sql/released/`), upgraded, has exactly the
//! objects of a fresh install of this version, and keeps its records, holders and fences.

use pg_idempotency_tests::*;

/// Every released version, oldest first: each is upgraded to this one.
const RELEASES: &[&str] = &["0.1.0", "0.2.0", "0.3.0", "0.4.0"];
const CURRENT: &str = env!("CARGO_PKG_VERSION");

/// The versions an install of `from` passes through to this one: (from, to) per step.
fn steps(from: &str) -> Vec<(&'static str, &'static str)> {
    let start = RELEASES.iter().position(|r| *r == from).unwrap();
    let mut chain: Vec<&'static str> = RELEASES[start..].to_vec();
    chain.push(CURRENT);
    chain.windows(2).map(|w| (w[0], w[1])).collect()
}

/// Every object an install owns, one sorted line each with what defines it: functions
/// (definition, privileges, comment), tables, columns, constraints, indexes, types,
/// sequences, the storage schema, and the extension's members and dump configuration.
const DESCRIBE: &str = r#"
WITH ours AS (SELECT oid FROM pg_namespace WHERE nspname = 'idempotency'),
ext AS (SELECT oid, extconfig, extcondition FROM pg_extension WHERE extname = 'pg_idempotency')
SELECT line FROM (
    SELECT 'function ' || p.oid::regprocedure || E'\n' || pg_get_functiondef(p.oid)
           || ' acl ' || coalesce(p.proacl::text, '-')
           || ' comment ' || coalesce(obj_description(p.oid, 'pg_proc'), '-')
    FROM pg_proc p
    WHERE p.pronamespace IN (SELECT oid FROM ours)
       OR (p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem\_%')
    UNION ALL
    SELECT 'relation ' || c.oid::regclass || ' ' || c.relkind::text
           || ' options ' || coalesce(c.reloptions::text, '-')
           || ' acl ' || coalesce(c.relacl::text, '-')
           || ' comment ' || coalesce(obj_description(c.oid, 'pg_class'), '-')
    FROM pg_class c WHERE c.relnamespace IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'column ' || a.attrelid::regclass || '.' || a.attname || ' '
           || format_type(a.atttypid, a.atttypmod) || ' not null ' || a.attnotnull
           || ' default ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE c.relnamespace IN (SELECT oid FROM ours) AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'index ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE c.relnamespace IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'type ' || t.oid::regtype || ' ' || t.typtype::text
    FROM pg_type t WHERE t.typnamespace IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'sequence ' || s.seqrelid::regclass || ' ' || format_type(s.seqtypid, NULL)
           || ' start ' || s.seqstart || ' by ' || s.seqincrement || ' min ' || s.seqmin
           || ' max ' || s.seqmax || ' cache ' || s.seqcache || ' cycle ' || s.seqcycle
    FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
    WHERE c.relnamespace IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'schema ' || n.nspname || ' acl ' || coalesce(n.nspacl::text, '-')
           || ' comment ' || coalesce(obj_description(n.oid, 'pg_namespace'), '-')
    FROM pg_namespace n WHERE n.oid IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'member ' || pg_describe_object(d.classid, d.objid, d.objsubid)
    FROM pg_depend d, ext
    WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
    UNION ALL
    SELECT 'dumped ' || coalesce(extconfig::regclass[]::text, '-') || ' '
           || coalesce(extcondition::text, '-')
    FROM ext
) lines(line)
ORDER BY line
"#;

fn describe(c: &mut Client) -> Vec<String> {
    c.query(DESCRIBE, &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
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

/// Installs the released version `from` into the (empty) database of `dsn`.
fn install_released(dsn: &str, from: &str) {
    match backend() {
        Backend::Extension => connect_to(dsn)
            .batch_execute(&format!("CREATE EXTENSION pg_idempotency VERSION '{from}'"))
            .unwrap_or_else(|e| {
                panic!("CREATE EXTENSION ... VERSION '{from}' (scripts/install-extension.sh installs it): {e}")
            }),
        Backend::Portable => {
            let (ok, out) = run_sql_file(
                dsn,
                &format!("released/pg_idempotency--{from}.sql"),
                &[],
                &[],
            );
            assert!(ok, "installing the released {from}:\n{out}");
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
        Backend::Portable => steps(from)
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
    assert_ne!(
        before, expected,
        "{from} and {CURRENT} install the same objects"
    );

    // Work in flight across the upgrade: a completed call, a running holder.
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
    let state = complete(&mut c, "upgrade", "running", running.fence.unwrap(), "{}").unwrap();
    assert_eq!(state, "succeeded");
    let next = begin(&mut c, "upgrade", "new");
    assert!(next.fence.unwrap() > running.fence.unwrap());

    // The new column of 0.2.0.
    let note: Option<String> = c
        .query_one(
            // Counters are the server's (every database's): this session's own row.
            "SELECT note FROM idem_metrics() WHERE scope = 'upgrade' AND owner = session_user::regrole",
            &[],
        )
        .unwrap()
        .get(0);
    match backend() {
        Backend::Extension => assert_eq!(note, None, "the test cluster preloads the library"),
        Backend::Portable => assert!(note.unwrap().contains("portable variant keeps none")),
    }
    drop(c);
    drop_database(&db);
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
    for (from, to) in steps(RELEASES[0]) {
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

#[test]
fn a_filled_0_1_0_works_before_the_update_and_after_it() {
    use pg_idempotency_tests::attack::TestRole;
    const FROM: &str = "0.1.0";
    let dsn = fresh_database("pgidem_upgrade_filled");
    install_released(&dsn, FROM);
    let a = TestRole::create(&dsn, "upgrade_a", "IN ROLE idempotency_user");
    let b = TestRole::create(&dsn, "upgrade_b", "IN ROLE idempotency_user");
    let mut admin = connect_to(&dsn);
    let mut ca = a.session();
    let s = "upgrade-filled";

    // The release's whole API, served by this version's library until the update runs.
    let done = begin_row(&mut ca, s, "done");
    assert_eq!(done.len(), 10, "{FROM}'s idem_begin answers 10 columns");
    complete(&mut ca, s, "done", done.get("fence"), r#"{"sent": 1}"#).unwrap();
    let running = begin(&mut ca, s, "running");
    ca.execute(
        "SELECT idem_extend($1, 'running', $2, '5 minutes')",
        &[&s, &running.fence],
    )
    .unwrap();
    let failed = begin(&mut ca, s, "failed");
    ca.execute(
        "SELECT idem_complete($1, 'failed', $2, '{\"error\": 1}', false, true)",
        &[&s, &failed.fence],
    )
    .unwrap();
    let gone = begin(&mut ca, s, "released");
    ca.execute(
        "SELECT idem_release($1, 'released', $2)",
        &[&s, &gone.fence],
    )
    .unwrap();
    begin(&mut ca, s, "expired");
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
    drop((ca, cb));

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
        complete(&mut ca, s, "running", running.fence.unwrap(), "{}").unwrap(),
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
fn a_filled_0_2_0_works_before_the_update_and_after_it() {
    const FROM: &str = "0.2.0";
    const TOKEN: &str = "3f0a6c1e-5b7d-4e2a-9c8b-1d2e3f4a5b6c";
    let dsn = fresh_database("pgidem_upgrade_filled_020");
    install_released(&dsn, FROM);
    // One session lives through the update: its saved statements are made again for the
    // new layout of the records (the extension) or its functions replaced (portable).
    let mut c = connect_to(&dsn);
    let s = "upgrade-020";

    // The release's idem_begin, served by this version's library until the update runs.
    let done = begin_row(&mut c, s, "done");
    assert_eq!(done.len(), 11, "{FROM}'s idem_begin answers 11 columns");
    complete(&mut c, s, "done", done.get("fence"), r#"{"sent": 1}"#).unwrap();
    let running = begin(&mut c, s, "running");
    let lapsing = try_begin(&mut c, s, "lapsing", None, Some("100 ms"), None).unwrap();
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
        complete(&mut c, s, "running", running.fence.unwrap(), "{}").unwrap(),
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
    assert!(taken.1.unwrap() > lapsing.fence.unwrap());
    assert_eq!(begin_token(&mut c, s, "lapsing", TOKEN), taken);
    // A new claim with a token, and its repeat.
    let fresh = begin_token(&mut c, s, "new", TOKEN);
    assert_eq!(fresh.0, "claimed");
    assert_eq!(begin_token(&mut c, s, "new", TOKEN), fresh);
    drop(c);
    drop_database("pgidem_upgrade_filled_020");
}
