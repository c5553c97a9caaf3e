//! Forged, stale and foreign fences on complete, extend and release: every one is lease
//! lost (IK003) and changes nothing. And a fence sequence at its end: the next claim fails
//! with a clear error, changes nothing, and earlier claims still complete.

use pg_idempotency_tests::attack::{storage_picture, Db, TestRole};
use pg_idempotency_tests::*;

/// The three calls that present a fence.
const FENCED: [&str; 3] = ["complete", "extend", "release"];

fn fenced_call(
    c: &mut Client,
    call: &str,
    scope: &str,
    key: &str,
    fence: i64,
) -> Result<(), postgres::Error> {
    let sql = match call {
        "complete" => "SELECT * FROM idem_complete($1, $2, $3, '{\"forged\": true}')",
        "extend" => "SELECT * FROM idem_extend($1, $2, $3)",
        "release" => "SELECT idem_release($1, $2, $3)",
        _ => unreachable!(),
    };
    c.query(sql, &[&scope, &key, &fence]).map(|_| ())
}

/// Each fenced call with `fence` on (scope, key) is lease lost and changes nothing. `admin`
/// reads the storage; `caller` makes the calls (the same session, or another role's).
fn lease_lost_unchanged(
    admin: &mut Client,
    caller: &mut Client,
    scope: &str,
    key: &str,
    fence: i64,
    what: &str,
) {
    for call in FENCED {
        let before = storage_picture(admin);
        let e = fenced_call(caller, call, scope, key, fence)
            .expect_err(&format!("{call} with {what} succeeded"));
        assert_eq!(sqlstate(&e), "IK003", "{call} with {what}: {e}");
        assert_eq!(
            storage_picture(admin),
            before,
            "{call} with {what} changed the storage"
        );
    }
}

#[test]
fn forged_fences_are_lease_lost() {
    let db = Db::fresh("fences_forged");
    let mut c = db.connect();
    let sc = scope("forged");
    let f1 = begin(&mut c, &sc, "k1").fence.unwrap();
    let f2 = begin(&mut c, &sc, "k2").fence.unwrap();
    let mut other = db.connect();
    for (what, fence) in [
        ("fence -1", -1),
        ("fence 0", 0),
        ("fence i64::MAX", i64::MAX),
        ("fence i64::MIN", i64::MIN),
        ("another key's fence", f2),
        ("a fence not issued yet", f2 + 1),
    ] {
        lease_lost_unchanged(&mut c, &mut other, &sc, "k1", fence, what);
    }
    // A real fence on a key that has no record.
    lease_lost_unchanged(
        &mut c,
        &mut other,
        &sc,
        "absent",
        f1,
        "a fence of an absent key",
    );
    // The holder is unharmed.
    assert_eq!(complete(&mut c, &sc, "k1", f1, "{}").unwrap(), "succeeded");
    drop((c, other));
}

#[test]
fn the_previous_holders_fence_is_lease_lost_after_a_takeover() {
    let db = Db::fresh("fences_takeover");
    let mut c = db.connect();
    let sc = scope("takeover");
    let old = try_begin(&mut c, &sc, "k", None, Some("1 microsecond"), None).unwrap();
    let old_fence = old.fence.unwrap();
    // Ordered by the record's state: its lease has lapsed once the clock passed it.
    let lapsed = eventually(std::time::Duration::from_secs(5), || {
        c.query_one(
            "SELECT lease_until < clock_timestamp() FROM idem_lookup($1, 'k')",
            &[&sc],
        )
        .map(|r| r.get::<_, bool>(0))
        .unwrap_or(false)
    });
    assert!(lapsed, "the 1 microsecond lease did not lapse");
    let new = begin(&mut c, &sc, "k");
    assert_eq!(new.outcome, "claimed");
    assert!(new.recovered, "the takeover is not marked recovered");
    let new_fence = new.fence.unwrap();
    assert!(new_fence > old_fence);
    let mut previous = db.connect();
    lease_lost_unchanged(
        &mut c,
        &mut previous,
        &sc,
        "k",
        old_fence,
        "the previous holder's fence",
    );
    assert_eq!(
        complete(&mut c, &sc, "k", new_fence, "{}").unwrap(),
        "succeeded"
    );
    // Completed: the old fence is still nothing, and the new one cannot release or extend.
    lease_lost_unchanged(
        &mut c,
        &mut previous,
        &sc,
        "k",
        old_fence,
        "the previous holder's fence, after completion",
    );
    drop((c, previous));
}

/// 0.2.0 isolation (spec-isolation.md): another role's fence on a key that is the other
/// role's alone is lease lost, exactly as a made-up fence on an absent key.
#[test]
fn another_roles_fence_on_its_key_is_lease_lost() {
    let db = Db::fresh("fences_stolen");
    let mut admin = db.connect();
    let owner = TestRole::create(&db.dsn, "fence_owner", "IN ROLE idempotency_user");
    let thief = TestRole::create(&db.dsn, "fence_thief", "IN ROLE idempotency_user");
    let sc = scope("stolen");
    let mut o = owner.login();
    let mut t = thief.login();
    let fence = begin(&mut o, &sc, "k").fence.unwrap();
    lease_lost_unchanged(
        &mut admin,
        &mut t,
        &sc,
        "k",
        fence,
        "the owner's fence, by another role",
    );
    // The same role's session (SET ROLE) is the thief too.
    let mut t2 = thief.session();
    lease_lost_unchanged(
        &mut admin,
        &mut t2,
        &sc,
        "k",
        fence,
        "the owner's fence, by another role via SET ROLE",
    );
    assert_eq!(
        complete(&mut o, &sc, "k", fence, "{}").unwrap(),
        "succeeded"
    );
    drop((o, t, t2));
    drop((owner, thief));
    drop(admin);
}

/// 0.2.0 isolation: the same (scope, key) held by two roles is two calls, each with its own
/// fence; neither fence works on the other's record.
#[test]
fn two_roles_fences_on_the_same_key_do_not_cross() {
    let db = Db::fresh("fences_cross");
    let mut admin = db.connect();
    let a = TestRole::create(&db.dsn, "fence_a", "IN ROLE idempotency_user");
    let b = TestRole::create(&db.dsn, "fence_b", "IN ROLE idempotency_user");
    let sc = scope("cross");
    let (mut ca, mut cb) = (a.login(), b.login());
    let fa = begin(&mut ca, &sc, "k");
    let fb = begin(&mut cb, &sc, "k");
    assert_eq!(fa.outcome, "claimed");
    assert_eq!(
        fb.outcome, "claimed",
        "the other role's record is not absent for b"
    );
    let (fa, fb) = (fa.fence.unwrap(), fb.fence.unwrap());
    lease_lost_unchanged(&mut admin, &mut cb, &sc, "k", fa, "a's fence, by b");
    lease_lost_unchanged(&mut admin, &mut ca, &sc, "k", fb, "b's fence, by a");
    assert_eq!(
        complete(&mut ca, &sc, "k", fa, r#"{"by": "a"}"#).unwrap(),
        "succeeded"
    );
    assert_eq!(
        complete(&mut cb, &sc, "k", fb, r#"{"by": "b"}"#).unwrap(),
        "succeeded"
    );
    assert_eq!(
        begin(&mut ca, &sc, "k").response.as_deref(),
        Some(r#"{"by": "a"}"#)
    );
    assert_eq!(
        begin(&mut cb, &sc, "k").response.as_deref(),
        Some(r#"{"by": "b"}"#)
    );
    drop((ca, cb));
    drop((a, b));
    drop(admin);
}

#[test]
fn an_exhausted_fence_sequence_fails_clearly_and_changes_nothing() {
    let db = Db::fresh("fences_exhausted");
    let mut c = db.connect();
    let sc = scope("exhausted");
    let early = begin(&mut c, &sc, "early").fence.unwrap();
    // As the superuser: the sequence two fences before its end.
    c.query_one(
        "SELECT setval('idempotency.fence_seq', $1)",
        &[&(i64::MAX - 2)],
    )
    .unwrap();
    let last_but_one = begin(&mut c, &sc, "a").fence.unwrap();
    let last = begin(&mut c, &sc, "b").fence.unwrap();
    assert_eq!((last_but_one, last), (i64::MAX - 1, i64::MAX));
    let before = storage_picture(&mut c);
    let e = try_begin(&mut c, &sc, "c", None, None, None).unwrap_err();
    assert_eq!(
        sqlstate(&e),
        "2200H",
        "a claim past the sequence's end: {e}"
    );
    assert_eq!(
        storage_picture(&mut c),
        before,
        "the failed claim changed something"
    );
    // Every earlier claim still completes, and replays.
    for (key, fence) in [("early", early), ("a", last_but_one), ("b", last)] {
        assert_eq!(
            complete(&mut c, &sc, key, fence, "{}").unwrap(),
            "succeeded",
            "{key}"
        );
        assert_eq!(begin(&mut c, &sc, key).outcome, "replay", "{key}");
    }
    drop(c);
}
