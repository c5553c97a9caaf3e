//! Claim tokens: a repeat of the `begin` whose answer was lost, with the same token, gets
//! the same claim back instead of in_progress.

use std::time::Duration;

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

pub async fn a_repeat_with_the_token_gets_the_claim_back(h: Harness) {
    let sc = h.scope("token");
    let token = BeginOptions {
        claim_token: Some(uuid::Uuid::new_v4()),
        // Long enough for the repeats below to find it held on a loaded machine.
        lease: Some(Duration::from_millis(1500)),
        ..opts()
    };
    let first = claimed(h.begin(&sc, KEY, &token).await);
    // The same attempt again: the same claim, at once even with a wait.
    let waiting = BeginOptions {
        wait: Duration::from_secs(30),
        ..token.clone()
    };
    assert_eq!(claimed(h.begin(&sc, KEY, &waiting).await), first);
    // Another attempt, or none, finds it running.
    let other = BeginOptions {
        claim_token: Some(uuid::Uuid::new_v4()),
        ..opts()
    };
    for o in [&other, &opts()] {
        let p = running(h.begin(&sc, KEY, o).await);
        assert_eq!((p.attempt, p.upstream_key), (1, first.upstream_key));
    }
    // Once the lease lapsed, the same token takes over like any caller; its repeat says so.
    let mut deadline = Deadline::new(
        "the token's lease lapsed and taken over",
        Duration::from_secs(5),
    );
    let taken = loop {
        let c = claimed(h.begin(&sc, KEY, &token).await);
        if c.fence != first.fence {
            break c;
        }
        assert_eq!(c, first);
        deadline.tick().await;
    };
    assert_eq!((taken.attempt, taken.recovered), (2, true));
    assert!(taken.fence > first.fence);
    assert_eq!(taken.upstream_key, first.upstream_key);
    assert_eq!(claimed(h.begin(&sc, KEY, &token).await), taken);
    refused(
        h.complete(&sc, KEY, first.fence, None, true, None).await,
        ErrorKind::LeaseLost,
    );
    h.complete(&sc, KEY, taken.fence, Some(&json!({"ok": 1})), true, None)
        .await
        .unwrap();
    // Completed, the token no longer names a claim: a repeat replays.
    let r = replayed(h.begin(&sc, KEY, &token).await);
    assert_eq!((r.attempt, r.response), (2, Some(json!({"ok": 1}))));
}
