//! No function of ours is executable by PUBLIC unless it is meant to be (DESIGN 7): the
//! API is `idempotency_user`'s and `idempotency_admin`'s, the helpers are the API's own.
//! Read from the catalogue of a fresh install of the backend under test, so a function
//! added later without its REVOKE fails the suite. The PL/Proxy layer's catalogue has the
//! same check in the sharding suite (sharding/identity.rs).

use pg_idempotency_tests::catalogue::executable_by_public;
use pg_idempotency_tests::*;

/// Functions PUBLIC may execute on purpose: none.
pub const MEANT_FOR_PUBLIC: &[&str] = &[];

#[test]
fn no_function_of_ours_is_executable_by_public() {
    let db = "pgidem_public_execute";
    let dsn = fresh_database(db);
    install(&dsn);
    let mut c = connect_to(&dsn);
    let (public, ours) = executable_by_public(&mut c, &["public", "idempotency"]);
    assert!(ours > 10, "the check looked at {ours} functions of ours");
    let unmeant: Vec<&String> = public
        .iter()
        .filter(|f| !MEANT_FOR_PUBLIC.contains(&f.as_str()))
        .collect();
    assert!(
        unmeant.is_empty(),
        "{backend:?}: executable by PUBLIC: {unmeant:#?}",
        backend = backend()
    );
    drop(c);
    drop_database(db);
}

/// The check sees a grant to PUBLIC, on an API function and on a storage helper.
#[test]
fn the_check_finds_a_function_granted_to_public() {
    let db = "pgidem_public_execute_broken";
    let dsn = fresh_database(db);
    install(&dsn);
    let mut c = connect_to(&dsn);
    c.batch_execute("GRANT EXECUTE ON FUNCTION idem_forget(text, text, regrole) TO PUBLIC")
        .unwrap();
    let (public, _) = executable_by_public(&mut c, &["public", "idempotency"]);
    assert!(
        public.contains(&"idem_forget(text,text,regrole)".to_string()),
        "{public:?}"
    );
    drop(c);
    drop_database(db);
}
