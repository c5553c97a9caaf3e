//! The grant roles own no records (docs/security.md, "Isolation between roles"): every
//! role granted `idempotency_user` may `SET ROLE idempotency_user` (a NOINHERIT role must,
//! to call at all), so a call made as it would put every such role in one key space, where
//! one replays another's result and a third forgets it. Each call that acts on records as
//! its caller is refused as a grant role with IK006, a detail naming the role and a hint
//! saying how to grant; the tenants keep their own key spaces through the grants the hint
//! gives.

use pg_idempotency_protocol::ErrorCode;
use pg_idempotency_tests::attack::TestRole;
use pg_idempotency_tests::*;

const GRANT_ROLE: &str = "IK006";

/// The calls that act on records as their caller, each with its arguments (a fence of 1:
/// the refusal comes before any record is read).
const CALLS: &[(&str, &str)] = &[
    ("idem_begin", "SELECT * FROM idem_begin($1, 'k')"),
    (
        "idem_begin_batch",
        "SELECT * FROM idem_begin_batch($1, ARRAY['k', 'l'])",
    ),
    (
        "idem_complete",
        "SELECT * FROM idem_complete($1, 'k', 1, '{}')",
    ),
    (
        "idem_complete_batch",
        "SELECT * FROM idem_complete_batch($1, ARRAY['k'], ARRAY[1::bigint], ARRAY['{}'::jsonb])",
    ),
    ("idem_release", "SELECT * FROM idem_release($1, 'k', 1)"),
    (
        "idem_extend",
        "SELECT * FROM idem_extend($1, 'k', 1, '1 minute')",
    ),
    ("idem_lookup", "SELECT * FROM idem_lookup($1, 'k')"),
    ("idem_forget", "SELECT * FROM idem_forget($1, 'k')"),
    (
        "idem_metrics",
        "SELECT * FROM idem_metrics() WHERE scope = $1",
    ),
];

/// The IK006 refusal of `e` for `role`: SQLSTATE, a detail naming the role, the hint's
/// two recipes.
fn assert_grant_role_refusal(e: &postgres::Error, role: &str, what: &str) {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("{what}: not a server error: {e}"));
    assert_eq!(
        db.code().code(),
        GRANT_ROLE,
        "{what}: {} / {:?}",
        db.message(),
        db.detail()
    );
    assert_eq!(
        ErrorCode::from_sqlstate(GRANT_ROLE),
        Some(ErrorCode::GrantRoleCaller)
    );
    let detail = db.detail().unwrap_or_default();
    assert!(
        detail.contains(&format!("made as {role},")),
        "{what}: the detail names {role}: {detail}"
    );
    let hint = db.hint().unwrap_or_default();
    for recipe in [
        "GRANT idempotency_user TO tenant WITH INHERIT TRUE, SET FALSE",
        "CREATE ROLE tenant_calls NOLOGIN; GRANT idempotency_user TO tenant_calls; GRANT tenant_calls TO tenant;",
        "SET ROLE tenant_calls",
    ] {
        assert!(hint.contains(recipe), "{what}: the hint gives {recipe:?}: {hint}");
    }
}

/// Every row of `scope`'s records, as text (the storage schema is the same on both
/// backends).
fn stored(scope: &str) -> Vec<String> {
    connect()
        .query(
            "SELECT (r.*)::text FROM idempotency.records r WHERE r.scope = $1 ORDER BY 1",
            &[&scope],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A NOINHERIT tenant in `idempotency_user`: it can call only after `SET ROLE`.
fn noinherit_tenant(name: &str) -> TestRole {
    TestRole::create(&dsn(), name, "NOINHERIT IN ROLE idempotency_user")
}

#[test]
fn every_call_on_records_made_as_idempotency_user_is_refused_and_changes_nothing() {
    let tenant = noinherit_tenant("gr_tenant");
    let scope = scope("grant-role");
    let mut c = tenant.login();
    c.batch_execute("SET ROLE idempotency_user").unwrap();
    for (name, sql) in CALLS {
        let e = c.query(*sql, &[&scope]).err().unwrap_or_else(|| {
            panic!("{name} as idempotency_user was served: the grant role owns a key space")
        });
        assert_grant_role_refusal(&e, "idempotency_user", name);
    }
    assert_eq!(stored(&scope), Vec::<String>::new(), "nothing was written");
}

#[test]
fn tenants_through_the_grant_role_neither_replay_nor_forget_each_other() {
    let (a, b, c) = (
        noinherit_tenant("gr_a"),
        noinherit_tenant("gr_b"),
        noinherit_tenant("gr_c"),
    );
    let scope = scope("grant-role-shared");
    let as_grant_role = |t: &TestRole| {
        let mut s = t.login();
        s.batch_execute("SET ROLE idempotency_user").unwrap();
        s
    };
    // A would claim and complete; B would replay A's result; C would forget it.
    let mut sa = as_grant_role(&a);
    let claimed = try_begin(&mut sa, &scope, "k", None, None, None);
    let e = claimed.expect_err("A's claim as idempotency_user was served");
    assert_grant_role_refusal(&e, "idempotency_user", "A's idem_begin");
    let mut sb = as_grant_role(&b);
    let replay = try_begin(&mut sb, &scope, "k", None, None, None);
    let e = replay.expect_err("B's call as idempotency_user was served");
    assert_grant_role_refusal(&e, "idempotency_user", "B's idem_begin");
    let mut sc = as_grant_role(&c);
    let e = sc
        .query_one("SELECT idem_forget($1, 'k')", &[&scope])
        .expect_err("C's forget as idempotency_user was served");
    assert_grant_role_refusal(&e, "idempotency_user", "C's idem_forget");
    assert_eq!(stored(&scope), Vec::<String>::new());
}

/// The hint's recipe for NOINHERIT tenants: a group role of each one's own, in
/// `idempotency_user`, that the tenant sets its role to. Each keeps its own key space; the
/// grant role itself stays refused.
#[test]
fn noinherit_tenants_keep_their_own_key_spaces_through_group_roles() {
    let su_dsn = dsn();
    let mut su = connect();
    let scope = scope("grant-role-recipe");
    let mut sessions = Vec::new();
    let mut kept = Vec::new();
    for name in ["gr_recipe_a", "gr_recipe_b"] {
        let tenant = TestRole::create(&su_dsn, name, "NOINHERIT");
        let calls = TestRole::create(&su_dsn, &format!("{name}_calls"), "");
        su.batch_execute(&format!(
            "ALTER ROLE {calls} NOLOGIN; GRANT idempotency_user TO {calls}; GRANT {calls} TO {tenant}",
            calls = calls.ident(),
            tenant = tenant.ident()
        ))
        .unwrap();
        let mut s = tenant.login();
        // The grant role is refused to the tenant as to anyone.
        let e = s
            .batch_execute("SET ROLE idempotency_user")
            .and_then(|()| try_begin(&mut s, &scope, "k", None, None, None).map(|_| ()))
            .expect_err("the tenant's call as idempotency_user was served");
        assert!(
            [GRANT_ROLE, "42501"].contains(&sqlstate(&e).as_str()),
            "{e:?}"
        );
        s.batch_execute(&format!("RESET ROLE; SET ROLE {}", calls.ident()))
            .unwrap();
        sessions.push((s, calls.name.clone()));
        kept.push((tenant, calls));
    }
    let (first, rest) = sessions.split_first_mut().unwrap();
    let (sa, a_calls) = first;
    let (sb, _) = &mut rest[0];
    let a = begin(sa, &scope, "k");
    assert_eq!(a.outcome, "claimed");
    complete(sa, &scope, "k", a.fence.unwrap(), r#"{"by": "a"}"#).unwrap();
    let b = begin(sb, &scope, "k");
    assert_eq!(
        b.outcome, "claimed",
        "B's key space is its own: no replay of A's"
    );
    let forgot: bool = sb
        .query_one("SELECT idem_forget($1, 'k')", &[&scope])
        .unwrap()
        .get(0);
    assert!(forgot, "B forgets its own record");
    let replay = begin(sa, &scope, "k");
    assert_eq!(replay.outcome, "replay", "A's record outlives B's forget");
    let owners: Vec<String> = su
        .query(
            "SELECT DISTINCT pg_get_userbyid(owner) FROM idempotency.records WHERE scope = $1",
            &[&scope],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(owners, vec![a_calls.clone()]);
    drop(sessions);
    drop(kept);
}

/// The hint's recipe on PostgreSQL 16 and later: granted WITH INHERIT TRUE, SET FALSE, a
/// tenant calls as itself and cannot become the grant role at all.
#[test]
fn a_grant_without_set_keeps_the_tenant_its_own_identity() {
    let mut su = connect();
    if server_major(&mut su) < 16 {
        skip(
            Skip::NotApplicable,
            "GRANT ... WITH INHERIT TRUE, SET FALSE needs PostgreSQL 16 or later",
        );
        return;
    }
    let tenant = TestRole::create(&dsn(), "gr_noset", "NOINHERIT");
    su.batch_execute(&format!(
        "GRANT idempotency_user TO {} WITH INHERIT TRUE, SET FALSE",
        tenant.ident()
    ))
    .unwrap();
    let scope = scope("grant-role-noset");
    let mut s = tenant.login();
    assert_eq!(begin(&mut s, &scope, "k").outcome, "claimed");
    let e = s.batch_execute("SET ROLE idempotency_user").unwrap_err();
    assert_eq!(
        sqlstate(&e),
        "42501",
        "SET ROLE to a grant without SET: {e:?}"
    );
    let owner: String = su
        .query_one(
            "SELECT pg_get_userbyid(owner) FROM idempotency.records WHERE scope = $1",
            &[&scope],
        )
        .unwrap()
        .get(0);
    assert_eq!(owner, tenant.name);
}

/// idempotency_admin owns no records either, but acts as the admin where a call names an
/// owner (a record a grant role made before 0.7.0 too) and sees every owner's metrics.
#[test]
fn idempotency_admin_names_owners_but_owns_nothing() {
    let tenant = TestRole::create(&dsn(), "gr_owner", "IN ROLE idempotency_user");
    let ops = TestRole::create(&dsn(), "gr_ops", "NOINHERIT IN ROLE idempotency_admin");
    let scope = scope("grant-role-admin");
    let mut t = tenant.login();
    assert_eq!(begin(&mut t, &scope, "k").outcome, "claimed");

    let mut o = ops.login();
    o.batch_execute("SET ROLE idempotency_admin").unwrap();
    let e = try_begin(&mut o, &scope, "mine", None, None, None).unwrap_err();
    assert_grant_role_refusal(&e, "idempotency_admin", "idem_begin as idempotency_admin");
    let e = o
        .query("SELECT * FROM idem_lookup($1, 'k')", &[&scope])
        .unwrap_err();
    assert_grant_role_refusal(&e, "idempotency_admin", "its own idem_lookup");
    let named = o
        .query(
            "SELECT pg_get_userbyid(owner) FROM idem_lookup($1, 'k', \
                 owner => (SELECT oid FROM pg_roles WHERE rolname = $2)::regrole)",
            &[&scope, &tenant.name],
        )
        .unwrap();
    assert_eq!(
        named.len(),
        1,
        "the admin sees the tenant's record by naming it"
    );
    let metrics = o
        .query(
            "SELECT pg_get_userbyid(owner) FROM idem_metrics() WHERE scope = $1",
            &[&scope],
        )
        .unwrap();
    assert_eq!(metrics.len(), 1, "every owner's metrics");
    assert_eq!(stored(&scope).len(), 1, "only the tenant's record");
}
