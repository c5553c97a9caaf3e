//! Concurrent first begins of one key: exactly one claims (the isolation specs' race, in
//! the client).

use pg_idempotency_client::*;

use super::harness::Harness;
use super::support::*;

pub async fn concurrent_begins_give_one_claim(h: Harness) {
    let sc = h.scope("race");
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let (s, sc) = (h.store.clone(), sc.clone());
            tokio::spawn(async move { s.begin(&sc, KEY, &opts()).await })
        })
        .collect();
    let mut claims = Vec::new();
    let mut upstream = Vec::new();
    for call in calls {
        match call.await.expect("a begin's task").expect("a begin") {
            Begin::Claimed(c) => {
                upstream.push(c.upstream_key);
                claims.push(c)
            }
            Begin::InProgress(p) => upstream.push(p.upstream_key),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert!(upstream.iter().all(|u| *u == claims[0].upstream_key));
    let rec = h.lookup(&sc, KEY).await.unwrap().unwrap();
    assert_eq!(rec.fence, claims[0].fence);
}
