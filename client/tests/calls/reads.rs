//! Read-only tools (`side_effect(false)`, the typed `#[tool(read_only)]`): the Java framework
//! says to skip deduplication for reads, so neither a toolkit's settings nor the
//! dispatcher's defaults deduplicate them; only settings on the tool itself do. The
//! listing says which (`ToolInfo::deduplicated`). On PgStore.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use pg_idempotency_client::*;
use serde_json::{json, Value};

const HOUR: Duration = Duration::from_secs(3600);

fn get_user(runs: Arc<AtomicU32>) -> Arc<dyn Tool> {
    tool_fn(move |_: Value| {
        let runs = runs.clone();
        async move { Ok(json!({"read": runs.fetch_add(1, Ordering::SeqCst) + 1})) }
    })
}

fn store() -> Arc<dyn IdempotencyStore> {
    Arc::new(PgStore::new(pool()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_tool_is_not_deduplicated_by_its_toolkit_or_the_defaults() {
    let strict = || Idempotent::new().hash_input().ttl(HOUR);
    let d = Dispatcher::new(store()).with_defaults(strict());
    let (in_kit, alone, own) = (
        unique("get_user"),
        unique("search_web"),
        unique("get_quote"),
    );
    let runs: [Arc<AtomicU32>; 3] = Default::default();
    d.register_toolkit(
        Toolkit::new("users")
            .idempotent(strict())
            .tool(ToolSpec::new(&in_kit, get_user(runs[0].clone())).side_effect(false)),
    )
    .unwrap();
    d.register(ToolSpec::new(&alone, get_user(runs[1].clone())).side_effect(false))
        .unwrap();
    // Settings of its own protect a read: a quote is kept for the hour it is valid.
    d.register(
        ToolSpec::new(&own, get_user(runs[2].clone()))
            .side_effect(false)
            .idempotent(strict()),
    )
    .unwrap();
    let input = json!({"id": 42});
    for name in [&in_kit, &alone, &own] {
        for _ in 0..2 {
            d.dispatch(name, input.clone()).await.unwrap();
        }
    }
    let counted: Vec<u32> = runs.iter().map(|r| r.load(Ordering::SeqCst)).collect();
    assert_eq!(
        counted,
        [2, 2, 1],
        "runs of (in a toolkit, under defaults, own settings)"
    );
    let listed: Vec<(String, bool)> = d
        .tool_infos()
        .into_iter()
        .map(|t| (t.name, t.deduplicated))
        .collect();
    for (name, deduplicated) in [(&in_kit, false), (&alone, false), (&own, true)] {
        assert!(
            listed.contains(&(name.clone(), deduplicated)),
            "{name} listed as deduplicated: {}, expected {deduplicated}: {listed:?}",
            !deduplicated
        );
    }
    // Nothing was remembered for the reads the defaults did not cover.
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap());
    let s = d.store();
    assert!(s.lookup(&in_kit, &key).await.unwrap().is_none());
    assert!(s.lookup(&alone, &key).await.unwrap().is_none());
    assert!(s.lookup(&own, &key).await.unwrap().is_some());
}

/// A read-only tool's own settings may still opt in to its toolkit's other fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_tools_own_settings_may_inherit_the_rest() {
    let d = Dispatcher::new(store());
    let name = unique("get_report");
    let runs = Arc::new(AtomicU32::new(0));
    d.register_toolkit(
        Toolkit::new("reports")
            .idempotent(Idempotent::new().ttl(2 * HOUR))
            .tool(
                ToolSpec::new(&name, get_user(runs.clone()))
                    .side_effect(false)
                    .idempotent(Idempotent::new().hash_input().inherit_unset()),
            ),
    )
    .unwrap();
    let input = json!({"month": "2026-11"});
    d.dispatch(&name, input.clone()).await.unwrap();
    assert!(matches!(
        d.dispatch(&name, input.clone()).await.unwrap(),
        Dispatched::Replayed(_)
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap());
    let rec = d.store().lookup(&name, &key).await.unwrap().unwrap();
    let kept = rec
        .expires_at
        .duration_since(rec.completed_at.unwrap())
        .unwrap();
    assert!(kept > HOUR + HOUR / 2, "the toolkit's two hours: {kept:?}");
}
