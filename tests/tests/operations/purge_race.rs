//! A purge racing claims: it never removes a live claim.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use pg_idempotency_tests::*;

#[test]
fn purging_never_removes_a_live_claim() {
    // It purges every scope's expired records.
    let _alone = crate::purges_alone();
    let scope = scope("purge-race");
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    let mut c = connect();
    for round in 0..5 {
        // Every key expires ...
        c.execute(
            "SELECT count(idem_begin($1, k, ttl => '20 ms', lease => '20 ms', unresolved_ttl => '20 ms')) FROM unnest($2::text[]) k",
            &[&scope, &keys],
        )
        .unwrap();
        wait_for_expiry(&mut c, &scope, &keys);
        // ... and is claimed again by two sessions while a third purges.
        let stop = Arc::new(AtomicBool::new(false));
        let purger = {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut p = connect();
                let mut runs = 0;
                while !stop.load(Ordering::Relaxed) {
                    p.execute("SELECT idem_purge_expired(batch_size => 16)", &[])
                        .unwrap();
                    runs += 1;
                }
                runs
            })
        };
        let claimers: Vec<_> = [0, 1]
            .into_iter()
            .map(|half| {
                let (scope, keys) = (scope.clone(), keys.clone());
                thread::spawn(move || {
                    let mut s = connect();
                    let mut claimed = Vec::new();
                    for k in keys.iter().skip(half).step_by(2) {
                        let b = try_begin(&mut s, &scope, k, None, None, None).unwrap();
                        assert_eq!(b.outcome, "claimed");
                        claimed.push((k.clone(), b.fence.unwrap()));
                    }
                    claimed
                })
            })
            .collect();
        let claimed: Vec<(String, i64)> = claimers
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        stop.store(true, Ordering::Relaxed);
        assert!(purger.join().unwrap() > 0);
        c.execute("SELECT idem_purge_expired()", &[]).unwrap();
        for (k, fence) in &claimed {
            let row = c
                .query_opt("SELECT fence FROM idem_lookup($1, $2)", &[&scope, k])
                .unwrap();
            assert_eq!(
                row.map(|r| r.get::<_, i64>(0)),
                Some(*fence),
                "round {round}: live claim of {k} lost"
            );
        }
        assert_eq!(claimed.len(), keys.len());
        // Forget them, so the next round starts from expired records again.
        c.execute(
            "SELECT count(idem_forget($1, k)) FROM unnest($2::text[]) k",
            &[&scope, &keys],
        )
        .unwrap();
    }
}
