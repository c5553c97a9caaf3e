//! Expiry is decided at read time: after its ttl a record is absent, purged or not, and
//! its key is claimed afresh; purge removes expired records and nothing live
//! (tests/regress/sql/leases.sql's expiry part, purge.sql).

use std::time::{Duration, SystemTime};

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

/// Polls until the record is absent; it must not be before its expiry.
async fn until_absent(h: &Harness, scope: &str, key: &str, expires_at: SystemTime) {
    let mut deadline = Deadline::new("the record expired", Duration::from_secs(5));
    while h.lookup(scope, key).await.unwrap().is_some() {
        deadline.tick().await;
    }
    assert!(SystemTime::now() >= expires_at, "absent before its expiry");
}

/// A completed record replays until its ttl ends, then is absent, and the key is claimed
/// afresh: attempt 1, a new upstream key, a higher fence.
pub async fn an_expired_record_is_claimed_afresh(h: Harness) {
    let sc = h.scope("expiry");
    // A ttl long enough for the replay below to come before it ends on a loaded machine.
    let o = BeginOptions {
        ttl: Some(Duration::from_millis(2500)),
        lease: Some(Duration::from_millis(1000)),
        ..opts()
    };
    let c = claimed(h.begin(&sc, KEY, &o).await);
    assert_eq!(
        between(c.lease_until, c.expires_at),
        Duration::from_millis(1500)
    );
    h.complete(&sc, KEY, c.fence, Some(&json!({"sent": true})), true, None)
        .await
        .unwrap();
    let r = replayed(h.begin(&sc, KEY, &opts()).await);
    assert!(r.expires_at >= c.expires_at);
    until_absent(&h, &sc, KEY, r.expires_at).await;
    let fresh = claimed(h.begin(&sc, KEY, &opts()).await);
    assert_eq!((fresh.attempt, fresh.recovered), (1, false));
    assert_ne!(fresh.upstream_key, c.upstream_key);
    assert!(fresh.fence > c.fence);
}

/// An expired claim's holder has lost it: its fence is refused, the key has no live record.
/// (A lapsed claim is kept past its ttl for its unresolved bound: a short one here.)
pub async fn an_expired_claims_holder_has_lost_it(h: Harness) {
    let sc = h.scope("gone");
    let o = BeginOptions {
        ttl: Some(Duration::from_millis(150)),
        unresolved_ttl: Some(Duration::from_millis(1)),
        ..opts()
    };
    let c = claimed(h.begin(&sc, KEY, &o).await);
    until_absent(&h, &sc, KEY, c.expires_at).await;
    holder_finds_no_record(&h, &sc, KEY, c.fence).await;
}

/// Purge removes the expired record, and keeps a live claim, a live result, and a claim
/// whose lease lapsed but whose ttl has not (its holder may still complete).
pub async fn purge_removes_only_expired_records(h: Harness) {
    let sc = h.scope("purge");
    let brief = BeginOptions {
        ttl: Some(Duration::from_millis(100)),
        unresolved_ttl: Some(Duration::from_millis(1)),
        ..opts()
    };
    let lapsing = BeginOptions {
        lease: Some(Duration::from_millis(100)),
        ..opts()
    };
    let gone = claimed(h.begin(&sc, "gone", &brief).await);
    claimed(h.begin(&sc, "live", &opts()).await);
    let done = claimed(h.begin(&sc, "done", &opts()).await);
    h.complete(&sc, "done", done.fence, Some(&json!(1)), true, None)
        .await
        .unwrap();
    let lapsed = claimed(h.begin(&sc, "lapsed", &lapsing).await);
    until_absent(&h, &sc, "gone", gone.expires_at).await;
    let mut deadline = Deadline::new("the lease lapsed", Duration::from_secs(5));
    while SystemTime::now() <= lapsed.lease_until {
        deadline.tick().await;
    }

    let kept = h.kept(&sc, "gone").await;
    let purged = h.purge().await.unwrap();
    if h.private() {
        assert_eq!(purged, 1, "only this test's expired record");
    } else if kept == Some(true) {
        assert!(
            purged >= 1,
            "the expired record was kept, and purge removed nothing"
        );
    }
    assert_ne!(h.kept(&sc, "gone").await, Some(true), "purged");
    assert_eq!(h.lookup(&sc, "gone").await.unwrap(), None);
    for (key, state) in [
        ("live", State::InProgress),
        ("done", State::Succeeded),
        ("lapsed", State::InProgress),
    ] {
        let rec = h.lookup(&sc, key).await.unwrap().expect(key);
        assert_eq!(rec.state, state, "{key}");
        assert_ne!(h.kept(&sc, key).await, Some(false), "{key} kept");
    }
    let done = h
        .complete(&sc, "lapsed", lapsed.fence, None, true, None)
        .await;
    assert_eq!(done.unwrap(), Completed::Succeeded);
}
