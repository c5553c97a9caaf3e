//! The proxy declares every API function as the partitions do: the same arguments, names
//! and defaults, the same result, comment and grants, so that a caller (the Rust client,
//! a service in any language) cannot tell them apart. What differs is said in
//! docs/scaling.md: a PL/Proxy function is volatile and runs as its caller.

use pg_idempotency_tests::sharded::Sharded;
use pg_idempotency_tests::*;

#[derive(Debug, PartialEq)]
struct Declared {
    arguments: String,
    result: String,
    comment: Option<String>,
    public: bool,
    user: bool,
    admin: bool,
}

fn declared(c: &mut Client, name: &str) -> Declared {
    let r = c
        .query_one(
            "SELECT pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), \
                    obj_description(p.oid, 'pg_proc'), \
                    coalesce(p.proacl IS NULL OR EXISTS (SELECT FROM aclexplode(p.proacl) a \
                             WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'), false), \
                    has_function_privilege('idempotency_user', p.oid, 'EXECUTE'), \
                    has_function_privilege('idempotency_admin', p.oid, 'EXECUTE') \
             FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname = $1",
            &[&name],
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    Declared {
        arguments: r.get(0),
        result: r.get(1),
        comment: r.get(2),
        public: r.get(3),
        user: r.get(4),
        admin: r.get(5),
    }
}

#[test]
fn the_proxy_declares_the_api_as_the_partitions_do() {
    let Some(s) = Sharded::new("decl", 1) else {
        return;
    };
    let (mut proxy, mut partition) = (s.connect(), s.partition(0));
    // The operators' functions over records are the partitions' alone (docs/scaling.md).
    let routed = pg_idempotency_protocol::functions::api()
        .filter(|f| f.proxy != pg_idempotency_protocol::functions::Proxy::Absent);
    for f in routed {
        let (on_proxy, on_partition) = (
            declared(&mut proxy, f.name),
            declared(&mut partition, f.name),
        );
        assert_eq!(on_proxy, on_partition, "{}", f.name);
        assert!(!on_proxy.public, "{} is executable by PUBLIC", f.name);
    }
}
