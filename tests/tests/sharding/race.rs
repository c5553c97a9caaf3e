//! A hot key through the proxy: many sessions begin the same call at once; exactly one
//! claims it, the others learn it runs, and one record exists, on the key's partition.

use std::sync::{Arc, Barrier};
use std::thread;

use pg_idempotency_tests::sharded::Sharded;
use pg_idempotency_tests::*;

#[test]
fn concurrent_begins_through_the_proxy_give_one_claim() {
    let Some(s) = Sharded::new("race", 4) else {
        return;
    };
    let scope = scope("race");
    const SESSIONS: usize = 16;
    for round in 0..5 {
        let key = format!("hot-{round}");
        let barrier = Arc::new(Barrier::new(SESSIONS));
        let sessions: Vec<_> = (0..SESSIONS)
            .map(|_| {
                let mut c = s.connect();
                // Each session's connection to the key's partition is made before the race.
                c.query("SELECT * FROM idem_lookup($1, $2)", &[&scope, &key])
                    .unwrap();
                let (barrier, scope, key) = (barrier.clone(), scope.clone(), key.clone());
                thread::spawn(move || {
                    barrier.wait();
                    try_begin(&mut c, &scope, &key, None, None, None).map(|b| b.outcome)
                })
            })
            .collect();
        let outcomes: Vec<String> = sessions
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("a racing begin failed: {e}"))
            })
            .collect();
        let claimed = outcomes.iter().filter(|o| *o == "claimed").count();
        assert_eq!(claimed, 1, "round {round}: {outcomes:?}");
        assert!(outcomes
            .iter()
            .all(|o| o == "claimed" || o == "in_progress"));
        assert_eq!(s.holders(&scope, &key), vec![s.partition_of(&scope, &key)]);
        assert_eq!(s.rows_on(s.partition_of(&scope, &key), &scope, &key), 1);
    }
}
