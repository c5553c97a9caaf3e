//! Leases: a lapsed one is taken over; until then the fence, not the clock, is the
//! authority (tests/regress/sql/leases.sql).

use std::time::{Duration, SystemTime};

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

const LATER: &str =
    "The record is held under a later fence: the call was taken over or claimed again.";

/// A holder that stops extending loses the call once its lease lapses: the next begin
/// takes it over (a higher fence, attempt 2, recovered, the same upstream key), and every
/// call with the old fence is refused.
pub async fn a_lapsed_lease_is_taken_over(h: Harness) {
    let sc = h.scope("takeover");
    // Long enough for the duplicate below to find it running on a loaded machine.
    let short = BeginOptions {
        lease: Some(Duration::from_millis(1500)),
        ..opts()
    };
    let first = claimed(h.begin(&sc, KEY, &short).await);
    let created = h.lookup(&sc, KEY).await.unwrap().unwrap().created_at;
    let p = running(h.begin(&sc, KEY, &opts()).await);
    assert!(p.retry_after <= Duration::from_millis(1500));
    // Polled: each begin answers in_progress until the lease has lapsed, then takes over.
    let mut deadline = Deadline::new("the lapsed lease taken over", Duration::from_secs(5));
    let second = loop {
        match h.begin(&sc, KEY, &opts()).await {
            Ok(Begin::InProgress(_)) => deadline.tick().await,
            other => break claimed(other),
        }
    };
    assert!(SystemTime::now() >= first.lease_until);
    assert_eq!((second.attempt, second.recovered), (2, true));
    assert!(second.fence > first.fence);
    assert_eq!(second.upstream_key, first.upstream_key);
    assert!(second.lease_until > first.lease_until);
    assert!(second.expires_at >= first.expires_at);

    for e in [
        refused(
            h.complete(
                &sc,
                KEY,
                first.fence,
                Some(&json!({"sent": true})),
                true,
                None,
            )
            .await,
            ErrorKind::LeaseLost,
        ),
        refused(
            h.extend(&sc, KEY, first.fence, None).await,
            ErrorKind::LeaseLost,
        ),
        refused(h.release(&sc, KEY, first.fence).await, ErrorKind::LeaseLost),
    ] {
        assert_eq!(e.detail(), Some(LATER));
        assert!(e.hint().is_some_and(|h| !h.is_empty()));
    }
    let rec = h.lookup(&sc, KEY).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.fence, rec.attempt),
        (State::InProgress, second.fence, 2)
    );
    assert_eq!(
        rec.created_at, created,
        "the same call: its creation time stays"
    );
    assert_eq!(rec.upstream_key, first.upstream_key);

    let done = h
        .complete(
            &sc,
            KEY,
            second.fence,
            Some(&json!({"sent": true})),
            true,
            None,
        )
        .await;
    assert_eq!(done.unwrap(), Completed::Succeeded);
    let r = replayed(h.begin(&sc, KEY, &opts()).await);
    assert_eq!((r.attempt, r.upstream_key), (2, first.upstream_key));
    assert_eq!(r.response, Some(json!({"sent": true})));
}

/// A lapsed lease that nobody took over still lets its holder extend and complete, and the
/// record stays visible meanwhile.
pub async fn a_lapsed_lease_not_taken_over_still_completes(h: Harness) {
    let sc = h.scope("slow");
    let short = BeginOptions {
        lease: Some(Duration::from_millis(100)),
        ..opts()
    };
    let c = claimed(h.begin(&sc, KEY, &short).await);
    let mut deadline = Deadline::new("the lease lapsed", Duration::from_secs(5));
    loop {
        let rec = h.lookup(&sc, KEY).await.unwrap().expect("still visible");
        assert_eq!((rec.state, rec.fence), (State::InProgress, c.fence));
        if rec.lease_until.expect("a lease") < SystemTime::now() {
            break;
        }
        deadline.tick().await;
    }
    let until = h
        .extend(&sc, KEY, c.fence, Some(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(until > c.lease_until);
    let done = h
        .complete(&sc, KEY, c.fence, Some(&json!(1)), true, None)
        .await;
    assert_eq!(done.unwrap(), Completed::Succeeded);
    let r = replayed(h.begin(&sc, KEY, &opts()).await);
    assert_eq!((r.attempt, r.response), (1, Some(json!(1))));
}
