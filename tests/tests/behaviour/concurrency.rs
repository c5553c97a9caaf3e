//! Many sessions on one key at once: exactly one claims, nobody errors.

use std::sync::{Arc, Barrier};
use std::thread;

use pg_idempotency_tests::*;

/// Runs `n` sessions that call idem_begin on (scope, key) at the same moment.
fn race(n: usize, scope: &str, key: &str) -> Vec<Result<Begin, String>> {
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (barrier, scope, key) = (barrier.clone(), scope.to_string(), key.to_string());
            thread::spawn(move || {
                let mut c = connect();
                barrier.wait();
                try_begin(
                    &mut c,
                    &scope,
                    &key,
                    Some(r#"{"to": "ann@example.com"}"#),
                    None,
                    None,
                )
                .map_err(|e| format!("{} {e}", sqlstate(&e)))
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("session thread panicked"))
        .collect()
}

/// Asserts that one session claimed, every other one saw in_progress, nobody erred, and
/// nobody but the winner learned a fence; returns the winner.
fn one_claim(results: &[Result<Begin, String>]) -> Begin {
    let errors: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(errors.is_empty(), "errors: {errors:?}");
    let claimed: Vec<&Begin> = results
        .iter()
        .flatten()
        .filter(|b| b.outcome == "claimed")
        .collect();
    let in_progress = results
        .iter()
        .flatten()
        .filter(|b| b.outcome == "in_progress")
        .count();
    assert_eq!((claimed.len(), in_progress), (1, results.len() - 1));
    assert_eq!(
        results
            .iter()
            .flatten()
            .filter(|b| b.fence.is_some())
            .count(),
        1
    );
    claimed[0].clone()
}

#[test]
fn twenty_four_begins_of_a_new_key_give_one_claim() {
    let winner = one_claim(&race(24, &scope("race-new"), "k"));
    assert_eq!(winner.attempt, 1);
}

#[test]
fn twenty_four_begins_after_a_lapsed_lease_give_one_takeover() {
    let scope = scope("race-takeover");
    let mut c = connect();
    let first = try_begin(&mut c, &scope, "k", None, Some("50 ms"), None).unwrap();
    assert_eq!(first.outcome, "claimed");
    wait_for_lapse(&mut c, &scope, "k");
    let winner = one_claim(&race(24, &scope, "k"));
    assert!(winner.recovered);
    assert_eq!(winner.attempt, 2);
    assert_eq!(winner.upstream_key, first.upstream_key);
    assert!(winner.fence > first.fence);
}

#[test]
fn twenty_four_begins_after_expiry_give_one_fresh_claim() {
    let scope = scope("race-expired");
    let mut c = connect();
    c.execute(
        "SELECT idem_begin($1, 'k', ttl => '50 ms', unresolved_ttl => '50 ms')",
        &[&scope],
    )
    .unwrap();
    wait_for_expiry(&mut c, &scope, &["k".to_string()]);
    let winner = one_claim(&race(24, &scope, "k"));
    assert!(!winner.recovered);
    assert_eq!(winner.attempt, 1);
}

#[test]
fn completion_races_a_takeover_and_exactly_one_wins() {
    for round in 0..10 {
        let scope = scope("race-complete");
        let mut c = connect();
        let first = try_begin(&mut c, &scope, "k", None, Some("30 ms"), None).unwrap();
        wait_for_lapse(&mut c, &scope, "k");
        let barrier = Arc::new(Barrier::new(2));
        let (b2, s2) = (barrier.clone(), scope.clone());
        let taker = thread::spawn(move || {
            let mut c = connect();
            b2.wait();
            begin(&mut c, &s2, "k")
        });
        barrier.wait();
        let completed = complete(&mut c, &scope, "k", first.fence.unwrap(), "{}");
        let taken = taker.join().unwrap();
        match (&completed, taken.outcome.as_str()) {
            // The holder completed first: the latecomer replays.
            (Ok(state), "replay") => assert_eq!(state, "succeeded", "round {round}"),
            // The takeover came first: the old holder's completion is refused.
            (Err(e), "claimed") => assert_eq!(sqlstate(e), "IK003", "round {round}"),
            other => panic!("round {round}: inconsistent outcome {other:?}"),
        }
    }
}
