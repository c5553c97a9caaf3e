//! pg_dump -Fc / pg_restore --exit-on-error of a database that two roles use: the records
//! keep their owners, each role still sees and completes only its own, policies and
//! grants come back, and the fence sequence stays above every fence issued.
//! (operations/dump_restore.rs covers one role's records and the fence sequence.)

use std::process::Command;

use pg_idempotency_tests::attack::{storage_picture, TestRole};
use pg_idempotency_tests::*;

fn tag() -> &'static str {
    match backend() {
        Backend::Extension => "ext",
        Backend::Portable => "por",
    }
}

/// Dumps the database of `src` and restores it into the (empty) database of `dst`, with
/// the server's own programs.
fn dump_and_restore(src: &str, dst: &str) {
    let file = std::env::temp_dir().join(format!(
        "pidem-atk2-dump-{}-{}.custom",
        tag(),
        std::process::id()
    ));
    let out = Command::new(format!("{}/pg_dump", bindir()))
        .args(["-Fc", "-f", file.to_str().unwrap(), "-d", src])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(format!("{}/pg_restore", bindir()))
        .args(["--exit-on-error", "-d", dst, file.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "pg_restore failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The privileges on our functions and storage, as text, to compare two databases (a NULL
/// ACL is the default one: pg_dump leaves out an ACL equal to the default).
fn grants(c: &mut Client) -> Vec<String> {
    c.query(
        "SELECT 'function ' || p.oid::regprocedure::text || ' ' || coalesce(p.proacl, acldefault('f'::\"char\", p.proowner))::text \
         FROM pg_proc p WHERE p.proname LIKE 'idem\\_%' \
         UNION ALL \
         SELECT 'relation ' || c.oid::regclass::text || ' ' || coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::\"char\", c.relowner))::text \
         FROM pg_class c WHERE c.relnamespace = 'idempotency'::regnamespace \
         UNION ALL \
         SELECT 'schema idempotency ' || coalesce(n.nspacl, acldefault('n'::\"char\", n.nspowner))::text \
         FROM pg_namespace n WHERE n.nspname = 'idempotency' \
         ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// What `role` sees of (scope, key) through the API: (state, owner, response).
fn seen_by(c: &mut Client, scope: &str, key: &str) -> Option<(String, String, Option<String>)> {
    c.query_opt(
        "SELECT state, owner::text, response::text FROM idem_lookup($1, $2)",
        &[&scope, &key],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

#[test]
fn two_roles_records_policies_and_grants_survive_dump_and_restore() {
    let (src_db, dst_db) = (
        format!("pidem_atk2_dump_src_{}", tag()),
        format!("pidem_atk2_dump_dst_{}", tag()),
    );
    let src = fresh_database(&src_db);
    let dst = fresh_database(&dst_db);
    install(&src);
    let a = TestRole::create(&src, "dump_a", "IN ROLE idempotency_user");
    let b = TestRole::create(&src, "dump_b", "IN ROLE idempotency_user");
    let sc = "dumped";

    let mut admin = connect_to(&src);
    admin
        .query_one(
            "SELECT * FROM idem_set_policy('policed', ttl => '2 hours', on_cache_hit => 'fail_fast')",
            &[],
        )
        .unwrap();
    // A grant beyond the defaults: a may purge.
    admin
        .batch_execute(&format!(
            "GRANT EXECUTE ON FUNCTION idem_purge_expired(integer) TO {}",
            a.ident()
        ))
        .unwrap();
    let mut ca = a.login();
    let mut cb = b.login();
    let f = begin(&mut ca, sc, "a-done").fence.unwrap();
    complete(&mut ca, sc, "a-done", f, r#"{"by": "a"}"#).unwrap();
    let f = begin(&mut ca, sc, "shared").fence.unwrap();
    complete(&mut ca, sc, "shared", f, r#"{"by": "a"}"#).unwrap();
    let b_running = begin(&mut cb, sc, "b-running");
    let b_shared = begin(&mut cb, sc, "shared");
    assert_eq!(b_shared.outcome, "claimed", "b's key space is its own");
    begin(&mut admin, sc, "superuser's");
    let max_fence: i64 = admin
        .query_one("SELECT max(fence) FROM idempotency.records", &[])
        .unwrap()
        .get(0);
    let picture = storage_picture(&mut admin);
    let src_grants = grants(&mut admin);
    drop((ca, cb, admin));

    dump_and_restore(&src, &dst);

    let mut restored = connect_to(&dst);
    // Every record (its owner included), every policy, the sequence's position.
    assert_eq!(storage_picture(&mut restored), picture);
    assert_eq!(grants(&mut restored), src_grants);
    let may_purge = |c: &mut Client, role: &TestRole| -> bool {
        c.query_one(
            "SELECT has_function_privilege($1, 'idem_purge_expired(integer)', 'EXECUTE')",
            &[&role.name],
        )
        .unwrap()
        .get(0)
    };
    assert!(may_purge(&mut restored, &a), "a's grant is not back");
    assert!(!may_purge(&mut restored, &b), "b gained a's grant");

    // Each role sees its own records, and only them.
    let dsn_as = |role: &TestRole| {
        let rest: Vec<&str> = dst
            .split_whitespace()
            .filter(|p| !p.starts_with("user="))
            .collect();
        format!("{} user={}", rest.join(" "), role.name)
    };
    let mut ra = connect_to(&dsn_as(&a));
    let mut rb = connect_to(&dsn_as(&b));
    let (an, bn) = (a.name.clone(), b.name.clone());
    let by_a = Some(r#"{"by": "a"}"#.to_string());
    assert_eq!(
        seen_by(&mut ra, sc, "a-done"),
        Some(("succeeded".into(), an.clone(), by_a.clone()))
    );
    assert_eq!(
        seen_by(&mut ra, sc, "shared"),
        Some(("succeeded".into(), an.clone(), by_a.clone()))
    );
    assert_eq!(seen_by(&mut ra, sc, "b-running"), None);
    assert_eq!(seen_by(&mut ra, sc, "superuser's"), None);
    assert_eq!(seen_by(&mut rb, sc, "a-done"), None);
    assert_eq!(
        seen_by(&mut rb, sc, "shared"),
        Some(("in_progress".into(), bn.clone(), None))
    );
    assert_eq!(
        seen_by(&mut rb, sc, "b-running"),
        Some(("in_progress".into(), bn.clone(), None))
    );

    // The calls go on where they were: a replays, b's claims still hold with their fences.
    let replay = begin(&mut ra, sc, "shared");
    assert_eq!(replay.outcome, "replay");
    assert_eq!(replay.response, by_a);
    assert_eq!(begin(&mut rb, sc, "shared").outcome, "in_progress");
    let e = complete(&mut ra, sc, "b-running", b_running.fence.unwrap(), "{}").unwrap_err();
    assert_eq!(sqlstate(&e), "IK003", "a completed b's call with b's fence");
    assert_eq!(
        complete(
            &mut rb,
            sc,
            "shared",
            b_shared.fence.unwrap(),
            r#"{"by": "b"}"#
        )
        .unwrap(),
        "succeeded"
    );
    assert_eq!(seen_by(&mut ra, sc, "shared").and_then(|s| s.2), by_a);
    // The policy is back: a repeat in its scope is refused.
    let f = begin(&mut ra, "policed", "k").fence.unwrap();
    complete(&mut ra, "policed", "k", f, "{}").unwrap();
    let e = try_begin(&mut ra, "policed", "k", None, None, None).unwrap_err();
    assert_eq!(sqlstate(&e), "IK002", "the policy did not come back");
    // New fences are above every fence issued before the dump.
    assert!(f > max_fence, "fence {f} not above {max_fence}");
    let fb = begin(&mut rb, sc, "new").fence.unwrap();
    assert!(fb > max_fence, "fence {fb} not above {max_fence}");

    drop((restored, ra, rb));
    // The restored database holds grants to the roles: it goes before them.
    drop_database(&dst_db);
    drop((a, b));
    drop_database(&src_db);
}
