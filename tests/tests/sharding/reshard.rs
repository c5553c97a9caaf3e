//! Growing a proxy from 2 to 4 partitions (scripts/reshard.sh) while calls go on: no
//! record is lost, no call runs twice, every replay is the first result, fences stay
//! unique, and every record ends on the partition the 4-way hash names (the fault suite's
//! invariants, docs/reliability.md, checked here on the sharded records).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use pg_idempotency_protocol::ErrorCode;
use pg_idempotency_tests::sharded::{partition_of, Sharded};
use pg_idempotency_tests::*;

const KEYS: usize = 240;
const WORKERS: usize = 6;

/// What the workers saw, shared.
#[derive(Default)]
struct Ledger {
    /// How many times each key's effect ran (claimed, then the work done).
    effects: Mutex<HashMap<String, u32>>,
    /// Each key's result, as its claimer completed it.
    results: Mutex<HashMap<String, String>>,
    calls: AtomicUsize,
    retried: AtomicUsize,
}

/// One call of `key`: claim, do the effect, complete; a replay must be the first result.
/// A 40001 (the key moving) is retried; true when the key's call is now complete.
fn call(c: &mut Client, scope: &str, key: &str, worker: usize, ledger: &Ledger) -> bool {
    loop {
        ledger.calls.fetch_add(1, Ordering::Relaxed);
        let b = match try_begin(c, scope, key, None, Some("1 minute"), None) {
            Ok(b) => b,
            Err(e) if sqlstate(&e) == ErrorCode::Contention.sqlstate() => {
                ledger.retried.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => panic!("begin {key}: {e}"),
        };
        match b.outcome.as_str() {
            "claimed" => {
                *ledger
                    .effects
                    .lock()
                    .unwrap()
                    .entry(key.to_string())
                    .or_default() += 1;
                let result = format!(
                    r#"{{"key": "{key}", "worker": {worker}, "fence": {}}}"#,
                    b.fence.unwrap()
                );
                ledger
                    .results
                    .lock()
                    .unwrap()
                    .insert(key.to_string(), result.clone());
                loop {
                    match complete(c, scope, key, b.fence.unwrap(), &result) {
                        Ok(_) => return true,
                        Err(e) if sqlstate(&e) == ErrorCode::Contention.sqlstate() => {
                            ledger.retried.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("complete {key} (fence {:?}): {e}", b.fence),
                    }
                }
            }
            "replay" => {
                let first = ledger.results.lock().unwrap().get(key).cloned();
                let got: serde_json::Value =
                    serde_json::from_str(b.response.as_deref().unwrap()).unwrap();
                let want: serde_json::Value =
                    serde_json::from_str(&first.expect("a replay of a call nobody claimed"))
                        .unwrap();
                assert_eq!(got, want, "{key}: the replay is not the first result");
                return true;
            }
            "in_progress" => return false,
            other => panic!("{key}: outcome {other}"),
        }
    }
}

#[test]
fn growing_from_2_to_4_partitions_under_load_loses_nothing_and_runs_nothing_twice() {
    let Some(mut s) = Sharded::new("reshard", 2) else {
        return;
    };
    let scope = scope("reshard");
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|i| format!("k{i}")).collect());
    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));

    // A call that is running across the move: claimed before, completed after.
    let mut holder = s.connect();
    let held = (0..)
        .map(|i| format!("held{i}"))
        .find(|k| partition_of(&scope, k, 2) == 0 && partition_of(&scope, k, 4) == 2)
        .unwrap();
    let held_claim = begin(&mut holder, &scope, &held);

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (keys, ledger, stop, scope) =
                (keys.clone(), ledger.clone(), stop.clone(), scope.clone());
            let mut c = s.connect();
            thread::spawn(move || {
                let mut done = HashSet::new();
                let mut round = 0usize;
                // Each worker goes over every key, in its own order, until told to stop and
                // every key's call is complete as it last saw it.
                while !(stop.load(Ordering::Relaxed) && done.len() == keys.len()) {
                    for i in 0..keys.len() {
                        let key = &keys[(i * (2 * w + 1) + round) % keys.len()];
                        if call(&mut c, &scope, key, w, &ledger) {
                            done.insert(key.clone());
                        }
                    }
                    round += 1;
                }
            })
        })
        .collect();

    // The move starts once calls run on every key.
    wait_until("the first calls", PATIENCE, || {
        ledger.results.lock().unwrap().len() >= KEYS / 4
    });
    let before = ledger.calls.load(Ordering::Relaxed);
    let new = s.new_partitions(2);
    let (ok, out) = s.reshard(new);
    assert!(ok, "scripts/reshard.sh failed:\n{out}");
    let during = ledger.calls.load(Ordering::Relaxed) - before;
    // Calls go on after the move too, before the workers are let go.
    let after_switch = ledger.calls.load(Ordering::Relaxed);
    wait_until("calls after the move", PATIENCE, || {
        ledger.calls.load(Ordering::Relaxed) >= after_switch + 2 * KEYS
    });
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("a worker failed");
    }
    eprintln!(
        "{} calls during the move, {} refused with 40001 and retried; {out}",
        during,
        ledger.retried.load(Ordering::Relaxed)
    );

    // The held call completes on its new partition, under its fence.
    assert_eq!(
        complete(
            &mut holder,
            &scope,
            &held,
            held_claim.fence.unwrap(),
            r#"{"held": true}"#
        )
        .unwrap(),
        "succeeded"
    );
    assert_eq!(begin(&mut holder, &scope, &held).outcome, "replay");

    // Exactly one effect per key, and its record on its 4-way partition only.
    let effects = ledger.effects.lock().unwrap();
    for key in keys.iter().chain(std::iter::once(&held)) {
        if key != &held {
            assert_eq!(
                effects.get(key),
                Some(&1),
                "{key}'s effect ran {:?} times",
                effects.get(key)
            );
        }
        assert_eq!(
            s.holders(&scope, key),
            vec![s.partition_of(&scope, key)],
            "{key}"
        );
    }
    // Every record replays its first result; fences never repeat across partitions.
    let mut c = s.connect();
    let results = ledger.results.lock().unwrap();
    for key in keys.iter() {
        let b = begin(&mut c, &scope, key);
        assert_eq!(b.outcome, "replay", "{key}");
        let got: serde_json::Value = serde_json::from_str(b.response.as_deref().unwrap()).unwrap();
        let want: serde_json::Value = serde_json::from_str(&results[key]).unwrap();
        assert_eq!(got, want, "{key}");
    }
    let mut fences = HashSet::new();
    for p in 0..4 {
        for r in s
            .partition(p)
            .query(
                "SELECT fence FROM idempotency.records WHERE scope = $1",
                &[&scope],
            )
            .unwrap()
        {
            assert!(fences.insert(r.get::<_, i64>(0)), "a fence on two records");
        }
    }
    assert_eq!(fences.len(), KEYS + 1);

    // New claims of a key that moved land on its new partition, with a fence of its range.
    let fresh = (0..)
        .map(|i| format!("fresh{i}"))
        .find(|k| partition_of(&scope, k, 4) == 3)
        .unwrap();
    let f = begin(&mut c, &scope, &fresh).fence.unwrap();
    assert!(f >= 3 << 44, "fence {f} is not partition 3's");
    // An old partition refuses a claim of a key that is no longer its own.
    let mut p1 = s.partition(1);
    let moved = try_begin(&mut p1, &scope, &fresh, None, None, None).unwrap_err();
    assert_eq!(
        sqlstate(&moved),
        ErrorCode::Contention.sqlstate(),
        "{moved}"
    );
}

#[test]
fn a_reshard_that_does_not_match_the_proxy_is_refused() {
    let Some(mut s) = Sharded::new("reshardbad", 2) else {
        return;
    };
    let new = s.new_partitions(2);
    // The current partitions in the wrong order.
    let mut wrong = s.clone_partitions();
    wrong.swap(0, 1);
    let (ok, out) = s.reshard_from(wrong, new.clone());
    assert!(!ok && out.contains("not the first 2 given"), "{out}");
    // A new partition that already holds records.
    let mut c = connect_to(&new[0]);
    begin(&mut c, "s", "k");
    let (ok, out) = s.reshard(new);
    assert!(!ok && out.contains("already holds 1 records"), "{out}");
    assert_eq!(s.partitions.len(), 2);
}
