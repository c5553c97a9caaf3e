//! The default store: a dispatcher or web executor built without one runs on a MemoryStore,
//! and the first call of a tool that requires idempotency logs one warning, once per
//! dispatcher; best-effort tools and durable stores log none. The log is captured by a
//! subscriber scoped to the test's own future.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::*;
use pg_idempotency_client::*;
use serde_json::{json, Value};
use tracing::field::{Field, Visit};
use tracing::instrument::WithSubscriber;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// A warning as logged: its message and its `tool` field.
#[derive(Debug, Clone, Default, PartialEq)]
struct Warning {
    message: String,
    tool: String,
}

/// Keeps every WARN event; spans are accepted and ignored.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<Warning>>>);

impl Warnings {
    fn taken(&self) -> Vec<Warning> {
        self.0.lock().unwrap().clone()
    }
    /// Runs `work` with this subscriber as its default (only while it is polled).
    async fn capture<T>(&self, work: impl Future<Output = T>) -> T {
        work.with_subscriber(self.clone()).await
    }
}

impl Visit for Warning {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "tool" {
            self.tool = value.to_string();
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "tool" => self.tool = format!("{value:?}"),
            _ => {}
        }
    }
}

impl Subscriber for Warnings {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::WARN {
            let mut w = Warning::default();
            event.record(&mut w);
            self.0.lock().unwrap().push(w);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn counting(runs: Arc<AtomicU32>) -> Arc<dyn Tool> {
    tool_fn(move |_: Value| {
        let runs = runs.clone();
        async move { Ok(json!({"run": runs.fetch_add(1, Ordering::SeqCst) + 1})) }
    })
}

const WARNING: &str = "a tool that requires idempotency runs on an in-memory store";

/// Several calls of two Required tools (and a repeat) on one default dispatcher: one
/// warning, naming the first tool that ran; a second dispatcher warns once of its own.
#[tokio::test]
async fn a_required_tool_on_the_default_store_warns_once_per_dispatcher() {
    let warnings = Warnings::default();
    warnings
        .capture(async {
            let runs = Arc::new(AtomicU32::new(0));
            let d = Dispatcher::in_memory();
            d.register(
                ToolSpec::new("send_email", counting(runs.clone()))
                    .required()
                    .idempotent(Idempotent::new()),
            )
            .unwrap();
            d.register(
                ToolSpec::new("charge_card", counting(runs.clone()))
                    .required()
                    .idempotent(Idempotent::new()),
            )
            .unwrap();
            for n in 0..3 {
                d.dispatch("send_email", json!({"n": n})).await.unwrap();
            }
            d.dispatch("send_email", json!({"n": 0})).await.unwrap();
            d.dispatch("charge_card", json!({"n": 0})).await.unwrap();
            // The default store deduplicates: four distinct calls ran, the repeat did not.
            assert_eq!(runs.load(Ordering::SeqCst), 4);
            let got = warnings.taken();
            assert_eq!(got.len(), 1, "{got:?}");
            assert!(got[0].message.starts_with(WARNING), "{got:?}");
            assert_eq!(got[0].tool, "send_email");

            let other = Dispatcher::default();
            other
                .register(
                    ToolSpec::new("charge_card", counting(runs.clone()))
                        .required()
                        .idempotent(Idempotent::new()),
                )
                .unwrap();
            for n in 0..2 {
                other
                    .dispatch("charge_card", json!({"n": n}))
                    .await
                    .unwrap();
            }
            let got = warnings.taken();
            assert_eq!(got.len(), 2, "{got:?}");
            assert_eq!(got[1].tool, "charge_card");
        })
        .await;
}

/// Tools that do not require idempotency (best effort, or without a side effect) run on
/// the default store without a warning.
#[tokio::test]
async fn best_effort_tools_never_warn() {
    let warnings = Warnings::default();
    warnings
        .capture(async {
            let d = Dispatcher::in_memory();
            d.register(
                ToolSpec::new("search_web", counting(Arc::default()))
                    .hint(IdempotencyHint::BestEffort),
            )
            .unwrap();
            // A read has nothing to protect.
            d.register(ToolSpec::new("get_user", counting(Arc::default())).side_effect(false))
                .unwrap();
            for n in 0..3 {
                d.dispatch("search_web", json!({"n": n})).await.unwrap();
                d.dispatch("get_user", json!({"n": n})).await.unwrap();
            }
        })
        .await;
    assert_eq!(warnings.taken(), vec![]);
}

/// A durable store is not warned about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_store_never_warns() {
    let warnings = Warnings::default();
    warnings
        .capture(async {
            let d = Dispatcher::new(Arc::new(PgStore::new(pool())));
            let tool = unique("send_email");
            d.register(
                ToolSpec::new(&tool, counting(Arc::default()))
                    .required()
                    .idempotent(Idempotent::new()),
            )
            .unwrap();
            for n in 0..3 {
                d.dispatch(&tool, json!({"n": n})).await.unwrap();
            }
        })
        .await;
    assert_eq!(warnings.taken(), vec![]);
}

/// The web executor's default store: a GET (best effort) logs nothing; POSTs (Required)
/// log one warning however many run.
#[tokio::test]
async fn the_web_executors_default_store_warns_once_for_unsafe_methods() {
    let upstream = crate::toolkit_upstream::start().await;
    let warnings = Warnings::default();
    warnings
        .capture(async {
            let web = WebExecutor::in_memory();
            web.register_toolkit(
                Toolkit::service("accounts")
                    .action(
                        Action::new("lookup", Method::GET, format!("{}/ok", upstream.base))
                            .params(Params::Query),
                    )
                    .action(Action::new(
                        "open",
                        Method::POST,
                        format!("{}/ok", upstream.base),
                    )),
            )
            .unwrap();
            for n in 0..2 {
                web.execute("lookup", json!({"n": n})).await.unwrap();
            }
            assert_eq!(warnings.taken(), vec![], "a GET warned");
            for n in 0..3 {
                web.execute("open", json!({"n": n})).await.unwrap();
            }
            // Replayed from the default store: the repeat never reached the upstream.
            assert_eq!(
                web.execute("open", json!({"n": 0})).await.unwrap(),
                Dispatched::Replayed(json!({"n": 3}))
            );
            assert_eq!(upstream.requests(), 5);
        })
        .await;
    let got = warnings.taken();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].tool, "open");
}
