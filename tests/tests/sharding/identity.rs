//! The identity table of docs/security.md through the PL/Proxy layer: the owner of a
//! record made through the proxy is the role a call made on a partition would give it (the
//! outer role: direct, SET ROLE, SET SESSION AUTHORIZATION), or the call is refused where
//! PL/Proxy cannot make it as that role (inside an application's SECURITY DEFINER function
//! owned by another role); a grant role is refused as on the partitions (IK006). And no
//! function of the layer is executable by PUBLIC.

use pg_idempotency_tests::catalogue::executable_by_public;
use pg_idempotency_tests::sharded::Sharded;
use pg_idempotency_tests::*;

/// Roles of one test, dropped with it (the proxy and its partitions share the server).
struct Roles(Vec<String>);

impl Roles {
    fn create(&mut self, c: &mut Client, name: &str, clause: &str) -> String {
        let name = format!("{name}_{}", std::process::id());
        c.batch_execute(&format!(
            "DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN {clause}"
        ))
        .unwrap();
        self.0.push(name.clone());
        name
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let mut c = connect_to(&with_db(&dsn(), "postgres"));
        for r in self.0.iter().rev() {
            let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {r}"));
        }
    }
}

/// The owners of (scope, key) on the partition it routes to.
fn owners(s: &Sharded, scope: &str, key: &str) -> Vec<String> {
    s.partition(s.partition_of(scope, key))
        .query(
            "SELECT owner::text FROM idempotency.records WHERE scope = $1 AND key = $2 \
             ORDER BY 1",
            &[&scope, &key],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// How many records of `scope` every partition holds together.
fn records_of(s: &Sharded, scope: &str) -> i64 {
    (0..s.partitions.len())
        .map(|p| -> i64 {
            s.partition(p)
                .query_one(
                    "SELECT count(*) FROM idempotency.records WHERE scope = $1",
                    &[&scope],
                )
                .unwrap()
                .get(0)
        })
        .sum()
}

fn outcome(c: &mut Client, scope: &str, key: &str) -> Result<String, postgres::Error> {
    c.query_one("SELECT outcome FROM idem_begin($1, $2)", &[&scope, &key])
        .map(|r| r.get(0))
}

#[test]
fn the_owner_through_the_proxy_is_the_outer_role() {
    let Some(s) = Sharded::new("ident", 2) else {
        return;
    };
    let mut su = s.connect();
    let mut roles = Roles(Vec::new());
    let group = roles.create(&mut su, "ident_group", "IN ROLE idempotency_user");
    let login = roles.create(
        &mut su,
        "ident_login",
        &format!("IN ROLE idempotency_user, {group}"),
    );
    let authorized = roles.create(&mut su, "ident_auth", "IN ROLE idempotency_user");
    let scope = scope("ident");

    // Direct: the login role.
    let mut c = s.connect_as(&login);
    assert_eq!(outcome(&mut c, &scope, "direct").unwrap(), "claimed");
    assert_eq!(owners(&s, &scope, "direct"), vec![login.clone()]);
    // SET ROLE: the group.
    c.batch_execute(&format!("SET ROLE {group}")).unwrap();
    assert_eq!(outcome(&mut c, &scope, "set-role").unwrap(), "claimed");
    assert_eq!(owners(&s, &scope, "set-role"), vec![group.clone()]);
    // SET SESSION AUTHORIZATION by a superuser: the authorized role.
    su.batch_execute(&format!("SET SESSION AUTHORIZATION {authorized}"))
        .unwrap();
    assert_eq!(outcome(&mut su, &scope, "authorized").unwrap(), "claimed");
    assert_eq!(owners(&s, &scope, "authorized"), vec![authorized.clone()]);
    drop((c, su));
    drop(s);
}

/// An application's SECURITY DEFINER wrapper on the proxy: called directly on a partition
/// its callers keep their own records; through the proxy PL/Proxy would connect as its
/// owner, so its callers' calls are refused rather than put in the owner's key space. The
/// owner calling its own wrapper is served, as itself.
#[test]
fn a_security_definer_wrappers_callers_never_share_its_owners_key_space() {
    let Some(s) = Sharded::new("identsd", 2) else {
        return;
    };
    let mut su = s.connect();
    let mut roles = Roles(Vec::new());
    let owner = roles.create(&mut su, "identsd_owner", "IN ROLE idempotency_user");
    let ann = roles.create(&mut su, "identsd_ann", "");
    let bob = roles.create(&mut su, "identsd_bob", "");
    let app = format!("identsd_app_{}", std::process::id());
    su.batch_execute(&format!(
        "CREATE SCHEMA {app} AUTHORIZATION {owner}; \
         GRANT USAGE ON SCHEMA {app} TO {ann}, {bob}; \
         SET ROLE {owner}; \
         CREATE FUNCTION {app}.claim(scope text, key text) RETURNS text \
             LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp \
             AS $$ SELECT outcome FROM idem_begin(scope, key) $$; \
         CREATE FUNCTION {app}.seen(scope text, key text) RETURNS bigint \
             LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp \
             AS $$ SELECT fence FROM idem_lookup(scope, key) $$; \
         CREATE FUNCTION {app}.metrics() RETURNS bigint \
             LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp \
             AS $$ SELECT count(*) FROM idem_metrics() $$; \
         GRANT EXECUTE ON FUNCTION {app}.claim(text, text), {app}.seen(text, text), \
             {app}.metrics() TO {ann}, {bob}; \
         RESET ROLE"
    ))
    .unwrap();
    let scope = scope("identsd");

    // Ann would claim in the owner's key space, and Bob would then be told it is running.
    for who in [&ann, &bob] {
        let mut c = s.connect_as(who);
        for (what, sql) in [
            ("claim", format!("SELECT {app}.claim($1, 'k')::text")),
            ("lookup", format!("SELECT {app}.seen($1, 'k')::text")),
            (
                "metrics",
                format!("SELECT {app}.metrics()::text WHERE $1 <> ''"),
            ),
        ] {
            let e = c
                .query_one(&sql, &[&scope])
                .err()
                .unwrap_or_else(|| panic!("{who}'s {what} through {owner}'s wrapper was served"));
            let db = e.as_db_error().expect("a server error");
            assert_eq!(db.code().code(), "0A000", "{what}: {db:?}");
            let detail = db.detail().unwrap_or_default();
            assert!(
                detail.contains(&format!("made by role {who} as role {owner}")),
                "{what}: {detail}"
            );
            assert!(db.hint().unwrap_or_default().contains("SECURITY INVOKER"));
        }
    }
    assert_eq!(records_of(&s, &scope), 0, "nothing in anyone's key space");

    // The owner through its own wrapper is itself.
    let mut o = s.connect_as(&owner);
    let claimed: String = o
        .query_one(&format!("SELECT {app}.claim($1, 'k')"), &[&scope])
        .unwrap()
        .get(0);
    assert_eq!(claimed, "claimed");
    assert_eq!(owners(&s, &scope, "k"), vec![owner.clone()]);
    drop((o, su));
    drop(s);
}

/// A grant role is refused through the proxy as on the partitions: IK006 with the same
/// words, before any partition is asked.
#[test]
fn a_call_as_a_grant_role_is_refused_through_the_proxy() {
    let Some(s) = Sharded::new("identgr", 2) else {
        return;
    };
    let mut su = s.connect();
    let mut roles = Roles(Vec::new());
    let tenant = roles.create(&mut su, "identgr_t", "NOINHERIT IN ROLE idempotency_user");
    let scope = scope("identgr");
    let mut c = s.connect_as(&tenant);
    c.batch_execute("SET ROLE idempotency_user").unwrap();
    for sql in [
        "SELECT outcome FROM idem_begin($1, 'k')",
        "SELECT outcome FROM idem_begin_batch($1, ARRAY['k', 'l'])",
        "SELECT fence::text FROM idem_lookup($1, 'k')",
        "SELECT idem_forget($1, 'k')::text",
        "SELECT scope FROM idem_metrics() WHERE scope = $1",
    ] {
        let e = c
            .query(sql, &[&scope])
            .err()
            .unwrap_or_else(|| panic!("{sql} as idempotency_user was served"));
        let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
        assert_eq!(db.code().code(), "IK006", "{sql}: {db:?}");
        assert!(db
            .detail()
            .unwrap_or_default()
            .contains("made as idempotency_user,"));
        assert!(db
            .hint()
            .unwrap_or_default()
            .contains("WITH INHERIT TRUE, SET FALSE"));
    }
    assert_eq!(records_of(&s, &scope), 0);
    drop((c, su));
    drop(s);
}

/// No function of the layer, on the proxy, is executable by PUBLIC: the API is granted to
/// idempotency_user, the routing helpers too, the configuration's to nobody (a
/// superuser's).
#[test]
fn no_function_of_the_layer_is_executable_by_public() {
    let Some(s) = Sharded::new("identpub", 1) else {
        return;
    };
    let (public, ours) = executable_by_public(&mut s.connect(), &["public", "idempotency"]);
    assert!(
        ours > 10,
        "the check looked at {ours} functions of the layer"
    );
    assert_eq!(
        public,
        Vec::<String>::new(),
        "executable by PUBLIC on the proxy"
    );
    for p in 0..s.partitions.len() {
        let (public, _) = executable_by_public(&mut s.partition(p), &["public", "idempotency"]);
        assert_eq!(
            public,
            Vec::<String>::new(),
            "executable by PUBLIC on partition {p}"
        );
    }
    drop(s);
}
