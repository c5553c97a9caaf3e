//! Which setting governs a call, end to end on PgStore (whichever backend `PGIDEM_DSN`'s
//! database has installed): the call's own > the tool's > its toolkit's > the scope's
//! policy in the database (`idem_set_policy`) > the server's settings. A setting unset at
//! every client level is not sent, so the database decides it. Through the dispatcher and
//! through the web executor (against a local HTTP service).
//!
//! Every case repeats a call that failed and reads what the repeat got: run again
//! (failures not cached, or `return_cached_if_success`), the remembered failure
//! (`return_cached`), or refused (`fail_fast`); and, where a ttl is at stake, how long the
//! record is kept.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use pg_idempotency_client::*;
use serde_json::{json, Value};

const HOUR: Duration = Duration::from_secs(3600);

/// What the repeat of a failed call got.
#[derive(Debug, PartialEq)]
enum Repeat {
    /// The tool (or the upstream) ran again.
    RanAgain,
    /// The first call's failure, remembered.
    Remembered,
    /// `fail_fast`: refused.
    Refused,
}

/// Reads a repeat's answer, knowing whether the work ran again.
fn repeat_of(answer: Result<Dispatched>, ran_again: bool) -> Repeat {
    let e = answer.expect_err("a repeat of a failed call succeeded");
    let repeat = match e.kind {
        ErrorKind::RepeatRefused => Repeat::Refused,
        ErrorKind::ToolFailed | ErrorKind::Http if e.replayed() => Repeat::Remembered,
        ErrorKind::ToolFailed | ErrorKind::Http => Repeat::RanAgain,
        other => panic!("unexpected {other:?}: {e:?}"),
    };
    assert_eq!(
        ran_again,
        repeat == Repeat::RanAgain,
        "the work ran again: {ran_again}, but the answer was {e:?}"
    );
    repeat
}

/// A scope's policy in the database. (The test connects as postgres: idempotency_admin.)
#[derive(Default)]
struct Policy {
    ttl: Option<&'static str>,
    on_cache_hit: Option<&'static str>,
    cache_failures: Option<bool>,
}

/// fail_fast, failures cached, kept two hours.
fn strict() -> Policy {
    Policy {
        ttl: Some("2 hours"),
        on_cache_hit: Some("fail_fast"),
        cache_failures: Some(true),
    }
}

async fn set_policy(scope: &str, p: Policy) {
    let admin = pool().get().await.unwrap();
    admin
        .execute(
            "SELECT idem_set_policy($1, ttl => ($2::text)::interval, on_cache_hit => $3::text,
                                    cache_failures => $4::boolean)",
            &[&scope, &p.ttl, &p.on_cache_hit, &p.cache_failures],
        )
        .await
        .unwrap();
}

fn store() -> Arc<dyn IdempotencyStore> {
    Arc::new(PgStore::new(pool()))
}

/// How long the record of (scope, input) is kept after its completion.
async fn kept(store: &dyn IdempotencyStore, scope: &str, input: &Value) -> Duration {
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(input).unwrap());
    let rec = store
        .lookup(scope, &key)
        .await
        .unwrap()
        .expect("the record of the failed call");
    rec.expires_at
        .duration_since(rec.completed_at.expect("a completed record"))
        .unwrap()
}

/// The server's `pg_idempotency.default_ttl` as this session sees it (the PL/pgSQL
/// variant reads the same name, and both fall back to the protocol's default).
async fn server_default_ttl() -> Duration {
    let fallback = format!(
        "{}s",
        pg_idempotency_protocol::settings::DEFAULT_TTL.default
    );
    let row = pool()
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT extract(epoch FROM coalesce(nullif(current_setting($1, true), ''), $2)::interval)::float8",
            &[&pg_idempotency_protocol::settings::DEFAULT_TTL.name, &fallback],
        )
        .await
        .unwrap();
    Duration::from_secs_f64(row.get(0))
}

fn about(kept: Duration, expected: Duration) {
    let off = kept.abs_diff(expected);
    assert!(
        off < Duration::from_secs(120),
        "kept {kept:?}, expected {expected:?}"
    );
}

/// A charge_card tool that is always declined, counting its runs.
fn declined(runs: Arc<AtomicU32>) -> Arc<dyn Tool> {
    tool_fn(move |_input: Value| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Err(ToolError::new("declined"))
        }
    })
}

/// A dispatcher with one tool (under a fresh scope, with the database policy given), either
/// alone or in a toolkit; calls it twice and tells what the repeat got. `call` is the
/// repeat's own settings.
struct Dispatch {
    policy: Option<Policy>,
    toolkit: Option<Idempotent>,
    /// None: the tool has no settings of its own.
    tool: Option<Idempotent>,
    call: Option<Idempotent>,
}

impl Dispatch {
    fn tool(tool: Idempotent) -> Dispatch {
        Dispatch {
            policy: Some(strict()),
            toolkit: None,
            tool: Some(tool),
            call: None,
        }
    }
    /// A tool without settings of its own: its toolkit's govern it.
    fn bare() -> Dispatch {
        Dispatch {
            tool: None,
            ..Dispatch::tool(Idempotent::new())
        }
    }
    fn in_toolkit(mut self, toolkit: Idempotent) -> Dispatch {
        self.toolkit = Some(toolkit);
        self
    }
    fn policy(mut self, policy: Option<Policy>) -> Dispatch {
        self.policy = policy;
        self
    }
    fn call(mut self, call: Idempotent) -> Dispatch {
        self.call = Some(call);
        self
    }

    /// What the repeat got, and how long the record is then kept (None: no record).
    async fn repeat(self) -> (Repeat, Option<Duration>) {
        let scope = unique("charge_card");
        if let Some(p) = self.policy {
            set_policy(&scope, p).await;
        }
        let (store, runs) = (store(), Arc::new(AtomicU32::new(0)));
        let d = Dispatcher::new(store.clone());
        let mut spec = ToolSpec::new(&scope, declined(runs.clone()));
        spec.idempotent = self.tool;
        match self.toolkit {
            Some(kit) => d.register_toolkit(Toolkit::new("payments").idempotent(kit).tool(spec)),
            None => d.register(spec),
        }
        .unwrap();
        let input = json!({"card": "4242", "cents": 1999});
        let first = d.dispatch(&scope, input.clone()).await.unwrap_err();
        assert_eq!(first.message, "declined", "{first:?}");
        let answer = match &self.call {
            Some(call) => d.dispatch_with(&scope, input.clone(), call).await,
            None => d.dispatch(&scope, input.clone()).await,
        };
        let repeat = repeat_of(answer, runs.load(Ordering::SeqCst) == 2);
        let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap());
        let kept = match store.lookup(&scope, &key).await.unwrap() {
            Some(_) => Some(kept(&*store, &scope, &input).await),
            None => None,
        };
        (repeat, kept)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_policy_the_servers_settings_rerun_a_failure() {
    let (repeat, record) = Dispatch::tool(Idempotent::new())
        .policy(None)
        .repeat()
        .await;
    assert_eq!(repeat, Repeat::RanAgain);
    assert_eq!(record, None, "a failure is not cached by default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_with_nothing_set_follows_the_database_policy() {
    let (repeat, kept) = Dispatch::tool(Idempotent::new()).repeat().await;
    assert_eq!(repeat, Repeat::Refused, "the policy's fail_fast");
    about(kept.expect("the policy caches failures"), 2 * HOUR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_cached_if_success_from_the_database_reruns_a_cached_failure() {
    let policy = Policy {
        on_cache_hit: Some("return_cached_if_success"),
        cache_failures: Some(true),
        ..Policy::default()
    };
    let (repeat, kept) = Dispatch::tool(Idempotent::new())
        .policy(Some(policy))
        .repeat()
        .await;
    assert_eq!(repeat, Repeat::RanAgain);
    // The failure was cached (the record is there after the rerun's failure too), so it is
    // the policy's on_cache_hit, not an uncached failure, that ran the tool again. No level
    // set a ttl: the server's default_ttl holds.
    about(
        kept.expect("the policy caches failures"),
        server_default_ttl().await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolkit_setting_beats_the_database_policy() {
    let (repeat, kept) = Dispatch::bare()
        .in_toolkit(Idempotent::new().on_cache_hit(OnCacheHit::ReturnCached))
        .repeat()
        .await;
    assert_eq!(repeat, Repeat::Remembered, "the toolkit's return_cached");
    // The toolkit left the ttl unset: the policy's.
    about(kept.expect("the policy caches failures"), 2 * HOUR);

    let (repeat, kept) = Dispatch::bare()
        .in_toolkit(Idempotent::new().cache_failures(false))
        .repeat()
        .await;
    assert_eq!(
        repeat,
        Repeat::RanAgain,
        "the toolkit's cache_failures false"
    );
    assert_eq!(kept, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_own_setting_beats_its_toolkits() {
    // The tool's settings replace the toolkit's whole ("the method wins"): on_cache_hit is
    // the tool's return_cached_if_success, and the ttl, which the tool leaves unset, is the
    // policy's (two hours), not the toolkit's three.
    let (repeat, kept) =
        Dispatch::tool(Idempotent::new().on_cache_hit(OnCacheHit::ReturnCachedIfSuccess))
            .in_toolkit(
                Idempotent::new()
                    .on_cache_hit(OnCacheHit::ReturnCached)
                    .ttl(3 * HOUR),
            )
            .repeat()
            .await;
    assert_eq!(
        repeat,
        Repeat::RanAgain,
        "the tool's return_cached_if_success"
    );
    about(kept.expect("the policy caches failures"), 2 * HOUR);

    // cache_failures: the tool's true over the toolkit's false; on_cache_hit, unset in both,
    // is the policy's fail_fast.
    let (repeat, _) = Dispatch::tool(Idempotent::new().cache_failures(true))
        .in_toolkit(Idempotent::new().cache_failures(false))
        .repeat()
        .await;
    assert_eq!(repeat, Repeat::Refused);

    // ttl: the tool's over the toolkit's over the policy's.
    let (_, kept) = Dispatch::tool(Idempotent::new().ttl(4 * HOUR))
        .in_toolkit(Idempotent::new().ttl(3 * HOUR))
        .repeat()
        .await;
    about(kept.expect("the policy caches failures"), 4 * HOUR);
}

/// The Java framework's rule: an `@Idempotent` on the method replaces the class's whole. A
/// toolkit that caches failures and refuses repeats (the Java framework's place_order settings)
/// lends neither to a tool whose own settings only set a ttl: with no policy in the
/// database, that tool's failure is not cached and its repeat runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolkits_settings_do_not_leak_into_a_tool_with_its_own() {
    let strict_kit = || {
        Idempotent::new()
            .cache_failures(true)
            .on_cache_hit(OnCacheHit::FailFast)
            .ttl(3 * HOUR)
    };
    let (repeat, kept) = Dispatch::tool(Idempotent::new().ttl(HOUR))
        .in_toolkit(strict_kit())
        .policy(None)
        .repeat()
        .await;
    assert_eq!(
        repeat,
        Repeat::RanAgain,
        "the toolkit's cache_failures leaked"
    );
    assert_eq!(kept, None, "the failure was cached");

    // Inheriting field by field is the tool's explicit choice.
    let (repeat, kept) = Dispatch::tool(Idempotent::new().ttl(HOUR).inherit_unset())
        .in_toolkit(strict_kit())
        .policy(None)
        .repeat()
        .await;
    assert_eq!(repeat, Repeat::Refused, "the inherited fail_fast");
    about(kept.expect("the inherited cache_failures"), HOUR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calls_own_setting_beats_the_tools() {
    let (repeat, _) =
        Dispatch::tool(Idempotent::new().on_cache_hit(OnCacheHit::ReturnCachedIfSuccess))
            .in_toolkit(Idempotent::new().on_cache_hit(OnCacheHit::ReturnCached))
            .call(Idempotent::new().on_cache_hit(OnCacheHit::ReturnCached))
            .repeat()
            .await;
    assert_eq!(repeat, Repeat::Remembered, "the call's return_cached");
}

/// The same through the web executor: one upstream service's actions in a toolkit.
struct Execute {
    service: Option<Idempotent>,
    /// None: the action has no settings of its own.
    action: Option<Idempotent>,
    call: Option<Idempotent>,
}

impl Execute {
    fn action(action: Idempotent) -> Execute {
        Execute {
            service: None,
            action: Some(action),
            call: None,
        }
    }
    /// An action without settings of its own: its service's govern it.
    fn bare() -> Execute {
        Execute {
            action: None,
            ..Execute::action(Idempotent::new())
        }
    }
    fn in_service(mut self, service: Idempotent) -> Execute {
        self.service = Some(service);
        self
    }
    fn call(mut self, call: Idempotent) -> Execute {
        self.call = Some(call);
        self
    }

    /// A POST the upstream rejects (422), under a fresh scope with the strict policy,
    /// executed twice: what the repeat got.
    async fn repeat(self) -> Repeat {
        let upstream = crate::toolkit_upstream::start().await;
        let scope = unique("open_account");
        set_policy(&scope, strict()).await;
        let web = WebExecutor::new(store());
        let mut action = Action::new(&scope, Method::POST, format!("{}/reject", upstream.base));
        action.idempotent = self.action;
        match self.service {
            Some(s) => web.register_toolkit(Toolkit::service("bank").idempotent(s).action(action)),
            None => web.register(action),
        }
        .unwrap();
        let input = json!({"name": "Ann"});
        let first = web.execute(&scope, input.clone()).await.unwrap_err();
        assert_eq!(first.kind, ErrorKind::Http, "{first:?}");
        let answer = match &self.call {
            Some(call) => web.execute_with(&scope, input, call).await,
            None => web.execute(&scope, input).await,
        };
        repeat_of(answer, upstream.requests() == 2)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_an_action_with_nothing_set_follows_the_database_policy() {
    assert_eq!(
        Execute::action(Idempotent::new()).repeat().await,
        Repeat::Refused
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_a_service_setting_beats_the_database_policy() {
    let got = Execute::bare()
        .in_service(Idempotent::new().on_cache_hit(OnCacheHit::ReturnCached))
        .repeat()
        .await;
    assert_eq!(got, Repeat::Remembered);
    let got = Execute::bare()
        .in_service(Idempotent::new().cache_failures(false))
        .repeat()
        .await;
    assert_eq!(got, Repeat::RanAgain);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_the_actions_own_setting_beats_its_services() {
    let got = Execute::action(Idempotent::new().on_cache_hit(OnCacheHit::ReturnCachedIfSuccess))
        .in_service(Idempotent::new().on_cache_hit(OnCacheHit::ReturnCached))
        .repeat()
        .await;
    assert_eq!(got, Repeat::RanAgain);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_the_calls_own_setting_beats_the_actions() {
    let got = Execute::action(Idempotent::new().on_cache_hit(OnCacheHit::ReturnCached))
        .in_service(Idempotent::new().on_cache_hit(OnCacheHit::ReturnCached))
        .call(Idempotent::new().on_cache_hit(OnCacheHit::FailFast))
        .repeat()
        .await;
    assert_eq!(got, Repeat::Refused);
}
