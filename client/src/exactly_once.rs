//! Exactly-once tools: a registry of transactional tools whose calls run inside the
//! caller's transaction. The claim (`idem_begin`), the tool's writes and the completion
//! (`idem_complete`) commit or roll back together, so a write to the same database happens
//! once however often the call is repeated, and a crash at any point leaves either all of
//! it or none.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio_postgres::Transaction;
use tracing::Instrument;

use crate::call::{tool_failed, Dispatched};
use crate::error::{Error, ErrorKind, Result};
use crate::holder::Plan;
use crate::idempotent::{Idempotent, KeyStrategy, Reconcile, Reconciled};
use crate::pg::PgStore;
use crate::pg_sql::{ApiSchema, StatementMode};
use crate::ran::Ran;
use crate::replayed::{outcome_unknown, replayed};
use crate::resolve;
use crate::savepoint::{CALL, TOOL};
use crate::store::IdempotencyStore;
use crate::tool::CallContext;
use crate::tx_tool::TxToolSpec;
use crate::types::{Begin, Claim};

/// Transactional tools by name, each called inside the caller's transaction:
///
/// ```no_run
/// # use pg_idempotency_client::*;
/// # use serde_json::json;
/// # async fn f(pool: deadpool_postgres::Pool) -> std::result::Result<(), Box<dyn std::error::Error>> {
/// let tools = ExactlyOnce::new();
/// tools.register(TxToolSpec::new("send_email", tx_tool_fn(|tx, input| Box::pin(async move {
///     let row = tx.query_one("INSERT INTO outbox (recipient) VALUES ($1) RETURNING id",
///                            &[&input["to"].as_str()]).await?;
///     Ok(json!({"email_id": row.get::<_, i32>(0)}))
/// }))).idempotent(Idempotent::new()))?;
///
/// let mut client = pool.get().await?;
/// let tx = client.transaction().await?;
/// let sent = tools.dispatch_in(&tx, "send_email", json!({"to": "ann@example.com"})).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
///
/// The store is the transaction itself (`PgStore` over it). What a call leaves in the
/// transaction until the caller commits:
/// - `Ok`: the claim, the tool's writes and the completion (a replay or `InProgress`
///   writes nothing).
/// - the tool's `Err`: its writes undone (a savepoint), its failure recorded as
///   `cache_failures` says (cached: commit to keep it; not cached: nothing is left).
/// - a refusal of the store (a mismatch, a refused repeat, a result too large): nothing;
///   the transaction is as it was before the call.
/// - a timeout: whatever was done so far: roll the transaction back.
///
/// A duplicate in another transaction waits on the call's row until this transaction ends,
/// then replays the result (or claims the call, if this transaction rolled back); under
/// REPEATABLE READ or SERIALIZABLE it fails instead with `ErrorKind::Contention` (40001):
/// retry its transaction. No heartbeat runs: nobody can take over a claim that is not
/// committed; the lease matters only for a claim committed without its completion.
#[derive(Default)]
pub struct ExactlyOnce {
    /// What every tool leaves unset; Some also means every tool is deduplicated.
    defaults: Option<Idempotent>,
    tools: RwLock<HashMap<String, Arc<Registered>>>,
    /// Where the SQL API is: every call's `PgStore` over the transaction names it.
    schema: ApiSchema,
    /// How every call's `PgStore` sends its statements.
    mode: StatementMode,
}

struct Registered {
    spec: TxToolSpec,
    idem: Idempotent,
    /// Whether any level gave it settings: without, it is not deduplicated.
    protected: bool,
}

/// How a call failed, and what of it the transaction keeps.
enum Failed {
    /// The call's record (a cached failure, a refusal mark) is kept; the tool's writes are
    /// not.
    Kept(Error),
    /// Nothing of the call is kept: the transaction is as it was before it.
    Undone(Error),
}

impl ExactlyOnce {
    pub fn new() -> ExactlyOnce {
        ExactlyOnce::default()
    }

    /// The settings of every tool without its own (a tool's own replace these whole, unless
    /// they say `Idempotent::inherit_unset`). With defaults, every tool is deduplicated
    /// (HashInput unless a level names a strategy).
    pub fn with_defaults(mut self, idem: Idempotent) -> ExactlyOnce {
        self.defaults = Some(idem);
        self
    }

    /// Calls the SQL API in `schema` (default `public`, where `CREATE EXTENSION` puts it):
    /// the schema it was installed in.
    pub fn in_schema(mut self, schema: ApiSchema) -> ExactlyOnce {
        self.schema = schema;
        self
    }

    /// Sends the store's statements the way `mode` says (`PgStore::statement_mode`).
    /// Inside the caller's transaction a pooler in transaction mode keeps one server
    /// connection, so named statements work there too; `StatementMode::Unnamed` leaves
    /// nothing behind on the server connection the pooler lends next.
    pub fn statement_mode(mut self, mode: StatementMode) -> ExactlyOnce {
        self.mode = mode;
        self
    }

    /// Registers a tool; one that requires idempotency and would not be deduplicated (or
    /// has a zero ttl) is refused here, not at its first call.
    pub fn register(&self, spec: TxToolSpec) -> Result<()> {
        let (idem, protected) = resolve::layer(
            spec.idempotent.as_ref(),
            None,
            self.defaults.as_ref(),
            false,
        );
        let reg = Registered {
            spec,
            idem,
            protected,
        };
        settle(&reg, None)?;
        let mut tools = self.tools.write().unwrap_or_else(|p| p.into_inner());
        tools.insert(reg.spec.name.clone(), Arc::new(reg));
        Ok(())
    }

    /// The registered tools, by name.
    pub fn tools(&self) -> Vec<TxToolSpec> {
        let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
        let mut specs: Vec<TxToolSpec> = tools.values().map(|r| r.spec.clone()).collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        specs
    }

    /// Runs a call of tool `name` inside `tx` (a deadpool transaction derefs to one), or
    /// answers it from the record. The caller commits.
    pub async fn dispatch_in(
        &self,
        tx: &Transaction<'_>,
        name: &str,
        input: Value,
    ) -> Result<Dispatched> {
        self.call_in(tx, name, input, None).await
    }

    /// As `dispatch_in`, with this call's own settings over the tool's (field by field).
    pub async fn dispatch_in_with(
        &self,
        tx: &Transaction<'_>,
        name: &str,
        input: Value,
        call: &Idempotent,
    ) -> Result<Dispatched> {
        self.call_in(tx, name, input, Some(call)).await
    }

    async fn call_in(
        &self,
        tx: &Transaction<'_>,
        name: &str,
        input: Value,
        call: Option<&Idempotent>,
    ) -> Result<Dispatched> {
        let reg = {
            let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
            tools.get(name).cloned()
        }
        .ok_or_else(|| {
            Error::new(ErrorKind::UnknownTool, format!("no tool named {name}"))
                .with_hint("Register it first (ExactlyOnce::register); ExactlyOnce::tools lists the registered ones.")
        })?;
        let idem = settle(&reg, call)?;
        reg.spec.tool.check(&input)?;
        let span = tracing::info_span!(
            "idempotent_call",
            scope = name,
            outcome = tracing::field::Empty,
            attempt = tracing::field::Empty
        );
        let work = in_savepoint(tx, &self.schema, self.mode, &reg, &idem, input).instrument(span);
        match idem.timeout {
            Some(limit) => tokio::time::timeout(limit, work)
                .await
                .map_err(|_| timed_out(name, limit))?,
            None => work.await,
        }
    }
}

fn settle(reg: &Registered, call: Option<&Idempotent>) -> Result<Idempotent> {
    resolve::settle(
        &reg.spec.name,
        reg.spec.requires_idempotency(),
        &reg.idem,
        reg.protected,
        None,
        call,
    )
}

/// The call inside the CALL savepoint: kept unless the store refused a step.
async fn in_savepoint(
    tx: &Transaction<'_>,
    schema: &ApiSchema,
    mode: StatementMode,
    reg: &Registered,
    idem: &Idempotent,
    input: Value,
) -> Result<Dispatched> {
    CALL.open(tx).await?;
    let (answer, keep) = match call(tx, schema, mode, reg, idem, input).await {
        Ok(done) => (Ok(done), true),
        Err(Failed::Kept(e)) => (Err(e), true),
        Err(Failed::Undone(e)) => (Err(e), false),
    };
    let closed = if keep {
        CALL.keep(tx).await
    } else {
        CALL.undo(tx).await
    };
    // The call's own error says more than a savepoint's on a connection that broke.
    let done = answer?;
    closed?;
    Ok(done)
}

async fn call(
    tx: &Transaction<'_>,
    schema: &ApiSchema,
    mode: StatementMode,
    reg: &Registered,
    idem: &Idempotent,
    input: Value,
) -> std::result::Result<Dispatched, Failed> {
    let name = reg.spec.name.as_str();
    let strategy = idem.key_strategy();
    let Some(key) = resolve::call_key(name, &strategy, &input).map_err(Failed::Undone)? else {
        // Not deduplicated: the tool runs, and its failure undoes its writes all the same.
        let ctx = CallContext {
            key: matches!(strategy, KeyStrategy::Uuid).then(|| uuid::Uuid::new_v4().to_string()),
            attempt: 1,
            ..CallContext::default()
        };
        return match run_tool(tx, reg, input, ctx).await? {
            Ran::Ok(v) => Ok(Dispatched::Ran(v)),
            Ran::Failed(e) => Err(Failed::Kept(tool_failed(e))),
            _ => unreachable_ran(name),
        };
    };
    tracing::debug!(key = %key, "idempotency key");
    let store = PgStore::new(tx).in_schema(schema).statement_mode(mode);
    let options = resolve::begin_options(idem, &strategy, &input);
    let span = tracing::Span::current();
    match store
        .begin(name, &key, &options)
        .await
        .map_err(Failed::Undone)?
    {
        Begin::Replay(r) => {
            span.record("outcome", "replay");
            span.record("attempt", r.attempt);
            replayed(name, reg.spec.tool.failure_kind(), r).map_err(Failed::Kept)
        }
        Begin::InProgress(p) => {
            span.record("outcome", "in_progress");
            span.record("attempt", p.attempt);
            Ok(Dispatched::InProgress {
                retry_after: p.retry_after,
            })
        }
        Begin::Claimed(claim) => {
            span.record("outcome", "claimed");
            span.record("attempt", claim.attempt);
            let ran = claimed(tx, reg, idem, &key, &claim, input).await?;
            record(&store, reg, idem, &key, &claim, ran).await
        }
    }
}

/// What the claim is used for: the tool, or the tool's choice for a takeover of a call
/// whose earlier attempt may have acted.
async fn claimed(
    tx: &Transaction<'_>,
    reg: &Registered,
    idem: &Idempotent,
    key: &str,
    claim: &Claim,
    input: Value,
) -> std::result::Result<Ran, Failed> {
    let ctx = CallContext {
        key: Some(key.to_string()),
        upstream_key: Some(claim.upstream_key),
        attempt: claim.attempt,
        fence: Some(claim.fence),
        recovered: claim.recovered,
        ..CallContext::default()
    };
    Ok(match resolve::plan(idem, claim) {
        Plan::Run => run_tool(tx, reg, input, ctx).await?,
        Plan::Refuse(why) => Ran::Refused(why),
        Plan::Reconcile(read) => {
            let call = Reconcile {
                input: input.clone(),
                key: key.to_string(),
                upstream_key: claim.upstream_key,
                attempt: claim.attempt,
            };
            match read(call).await {
                Ok(Reconciled::Found(v)) => Ran::Found(v),
                Ok(Reconciled::NotFound) => run_tool(tx, reg, input, ctx).await?,
                Ok(Reconciled::Unknown) => Ran::Refused(
                    "an earlier attempt may have performed the effect, and the reconcile read could not tell".into(),
                ),
                Err(e) => Ran::Refused(format!(
                    "an earlier attempt may have performed the effect, and the reconcile read failed: {}",
                    e.message
                )),
            }
        }
    })
}

/// Runs the tool inside the TOOL savepoint, undone if the tool fails. A panic unwinds
/// through the caller, whose transaction rolls back when it is dropped.
async fn run_tool(
    tx: &Transaction<'_>,
    reg: &Registered,
    input: Value,
    ctx: CallContext,
) -> std::result::Result<Ran, Failed> {
    TOOL.open(tx).await.map_err(Failed::Undone)?;
    match reg.spec.tool.call(tx, input, ctx).await {
        Ok(v) => Ok(Ran::Ok(v)),
        Err(e) => {
            TOOL.undo(tx).await.map_err(Failed::Undone)?;
            Ok(Ran::Failed(e))
        }
    }
}

/// Completes the claim in the transaction with what the tool did.
async fn record(
    store: &PgStore<&Transaction<'_>>,
    reg: &Registered,
    idem: &Idempotent,
    key: &str,
    claim: &Claim,
    ran: Ran,
) -> std::result::Result<Dispatched, Failed> {
    let name = reg.spec.name.as_str();
    if let Ran::Failed(e) = &ran {
        // A serialization failure or deadlock is the transaction's, not the call's: never
        // remembered; the caller retries its transaction.
        if e.kind == ErrorKind::Contention {
            return Err(Failed::Undone(tool_failed(e.clone())));
        }
    }
    let (response, succeeded) = ran.response();
    let completed = store
        .complete(
            name,
            key,
            claim.fence,
            response.as_ref(),
            succeeded,
            idem.cache_failures,
        )
        .await;
    match (ran, completed) {
        // A failure that cannot be recorded is as one not cached: nothing is left.
        (Ran::Failed(e), Err(_)) => Err(Failed::Undone(tool_failed(e))),
        (_, Err(e)) => Err(Failed::Undone(e.with_detail(
            "Nothing of the call is kept: its claim and the tool's writes were rolled back to before the call.",
        ))),
        (Ran::Ok(v), Ok(_)) => Ok(Dispatched::Ran(v)),
        (Ran::Found(v), Ok(_)) => Ok(Dispatched::Replayed(v)),
        (Ran::Failed(e), Ok(_)) => Err(Failed::Kept(tool_failed(e))),
        (Ran::Refused(why), Ok(_)) => Err(Failed::Kept(outcome_unknown(name, why))),
        (Ran::Panicked(_), Ok(_)) => unreachable_ran(name),
    }
}

/// A tool here never panics into a result (a panic unwinds through the caller), so no
/// `Ran::Panicked` is made; answered as an error rather than trusted.
fn unreachable_ran<T>(name: &str) -> std::result::Result<T, Failed> {
    Err(Failed::Undone(Error::new(
        ErrorKind::ToolFailed,
        format!("tool {name} ended in a state a transactional call never makes"),
    )))
}

fn timed_out(name: &str, limit: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("tool {name} timed out after {limit:?}"),
    )
    .with_detail("The transaction may hold the call's claim and part of the tool's writes.")
    .with_hint("Roll the transaction back. Committed as it is, the claim stays in progress until its lease lapses, and a retry then takes the call over as recovered (Idempotent::on_unknown_outcome decides).")
}
