//! The calling role reaches the partition: PL/Proxy connects as it, so the partition's
//! functions see it as the owner, and each role keeps its own key space through the proxy.

use pg_idempotency_protocol::ErrorCode;
use pg_idempotency_tests::sharded::Sharded;
use pg_idempotency_tests::*;

fn role(c: &mut Client, name: &str) {
    c.batch_execute(&format!(
        "DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN IN ROLE idempotency_user"
    ))
    .unwrap();
}

#[test]
fn two_roles_with_one_key_are_two_calls_each_owned_by_its_caller() {
    let Some(s) = Sharded::new("roles", 2) else {
        return;
    };
    let pid = std::process::id();
    let (ann, bob) = (format!("shard_ann_{pid}"), format!("shard_bob_{pid}"));
    let mut admin = s.connect();
    role(&mut admin, &ann);
    role(&mut admin, &bob);
    let scope = scope("roles");
    let mut a = s.connect_as(&ann);
    let mut b = s.connect_as(&bob);
    let first = begin(&mut a, &scope, "k");
    let second = begin(&mut b, &scope, "k");
    assert_eq!(first.outcome, "claimed");
    assert_eq!(second.outcome, "claimed", "bob's call is his own");
    let p = s.partition_of(&scope, "k");
    let owners: Vec<String> = s
        .partition(p)
        .query(
            "SELECT owner::text FROM idempotency.records WHERE scope = $1 ORDER BY owner::text",
            &[&scope],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut expected = vec![ann.clone(), bob.clone()];
    expected.sort();
    assert_eq!(owners, expected);
    // Bob can neither complete nor see Ann's call.
    let theirs = complete(&mut b, &scope, "k", first.fence.unwrap(), "{}").unwrap_err();
    assert_eq!(sqlstate(&theirs), ErrorCode::LeaseLost.sqlstate());
    let fence: i64 = b
        .query_one("SELECT fence FROM idem_lookup($1, 'k')", &[&scope])
        .unwrap()
        .get(0);
    assert_eq!(fence, second.fence.unwrap(), "bob sees his own record only");
    complete(&mut a, &scope, "k", first.fence.unwrap(), "{}").unwrap();
    drop((a, b));
    drop(s);
    admin_cleanup(&[&ann, &bob]);
}

#[test]
fn a_role_without_the_api_grant_is_refused_on_the_proxy() {
    let Some(s) = Sharded::new("norole", 2) else {
        return;
    };
    let name = format!("shard_nobody_{}", std::process::id());
    let mut admin = s.connect();
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN"
        ))
        .unwrap();
    let mut c = s.connect_as(&name);
    let e = c
        .query_one("SELECT * FROM idem_begin('s', 'k')", &[])
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    drop(c);
    drop(s);
    admin_cleanup(&[&name]);
}

fn admin_cleanup(roles: &[&str]) {
    let mut c = connect_to(&with_db(&dsn(), "postgres"));
    for r in roles {
        c.batch_execute(&format!("DROP ROLE IF EXISTS {r}"))
            .unwrap();
    }
}
