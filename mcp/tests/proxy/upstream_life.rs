//! A stdio upstream server never outlives the proxy: the proxy SIGKILLed with its upstream
//! child alive, held by the counting server BEFORE its effect (a gate: the file `open` the
//! test creates) or AFTER it (the hold), and the call retried through a second proxy on the
//! same database under each `on_unknown_outcome`. Effects are counted per key in the
//! server's log. Killed before the effect, the child dies with the proxy, so every choice
//! ends with one effect (an orphan would act once the gate opens, and the takeover again).
//! Killed after it, `refuse` and `reconcile` keep one, and `rerun` runs the call again:
//! two, as docs/mcp.md says. Also: the child's process group (what it started) is killed
//! when the proxy ends, and a child lives on after the thread that asked for it ended.

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use rmcp::model::{CallToolResult, ErrorData};
use serde_json::{json, Value};

/// A short lease (the takeover comes soon after the kill), a long wait (the retry waits for
/// it), and `choice` when the outcome is unknown.
fn policy(choice: &str) -> String {
    format!("\n[tools.send_email]\nlease = \"2s\"\nwait = \"60s\"\non_unknown_outcome = {choice}\n")
}

const RERUN: &str = "\"rerun\"";
const REFUSE: &str = "\"refuse\"";
const RECONCILE: &str =
    "{ reconcile = { tool = \"find_email\", arguments = { message_id = \"/message_id\" } } }";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kill {
    /// At the gate: the call reached the server, which has not acted.
    BeforeTheEffect,
    /// At the hold: the effect is logged, the answer not sent.
    AfterTheEffect,
}

/// Whether the process runs (not gone, not a zombie awaiting its reaper).
fn alive(pid: i64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z"),
        Err(_) => false,
    }
}

/// Whether any thread of the process has not finished exiting. After SIGKILL the main
/// thread can show as a zombie while the others still exit (the group leader waits for
/// them), and the parent-death signal reaches a child only when the thread that forked it
/// has exited: a process is done when every task left is a zombie, or none is left.
fn any_thread_alive(pid: i64) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X")
        })
    })
}

/// The pid in a marker the counting server wrote.
fn pid_in(marker: &Path) -> i64 {
    let text = std::fs::read_to_string(marker).expect("the server's marker");
    let v: Value = serde_json::from_str(&text).expect("the marker's JSON");
    v["pid"]
        .as_i64()
        .expect("the marker names the server's pid")
}

fn effects_of(c: &Counting, id: &str) -> usize {
    c.effects()
        .iter()
        .filter(|e| e["kind"] == "send_email" && e["message_id"] == id)
        .count()
}

/// What a trial leaves: the server's log, the call's key (its message_id too), the retry's
/// answer, the replica that answered it, and the effects an orphan made after the kill.
struct Trial {
    c: Counting,
    id: String,
    retry: Result<CallToolResult, ErrorData>,
    /// The replica the retry went through: over HTTP, a proxy of its own; over stdio, none
    /// (the caller starts another proxy for each retry, as an MCP host would).
    b: Option<HttpProxy>,
    orphan_effects: usize,
}

/// How the caller reaches the proxy that is killed: its Streamable HTTP front, or its stdio
/// front (the caller started it, as an MCP host does).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Front {
    Http,
    Stdio,
}

/// The killed proxy, reached over one front.
enum Killed {
    Http(HttpProxy),
    Stdio(Option<u32>),
}

impl Killed {
    async fn start(front: Front, config: &Path, env: &[(String, String)]) -> (Killed, Client) {
        match front {
            Front::Http => {
                let p = HttpProxy::start(config, env).await;
                let client = p.client().await;
                (Killed::Http(p), client)
            }
            Front::Stdio => {
                let mut cmd = tokio::process::Command::new(proxy_bin());
                cmd.arg("--config").arg(config).envs(env.iter().cloned());
                let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
                let pid = transport.id();
                let client = rmcp::ServiceExt::serve((), transport)
                    .await
                    .expect("the proxy initializes over stdio");
                (Killed::Stdio(pid), client)
            }
        }
    }

    /// SIGKILL.
    async fn kill(&mut self) {
        match self {
            Killed::Http(p) => p.kill().await,
            Killed::Stdio(pid) => {
                let pid = pid.expect("the stdio proxy's pid");
                let killed = std::process::Command::new("kill")
                    .arg("-9")
                    .arg(pid.to_string())
                    .status()
                    .unwrap();
                assert!(killed.success());
                // `kill` returns before the process has gone: its threads exit after, and
                // the parent-death signal reaches its child only then. The main thread's
                // zombie is not enough (seen under load: the forking thread still exiting,
                // the orphan acted once the gate opened): every thread must be done.
                until(
                    "every thread of the SIGKILLed proxy to be gone",
                    PATIENCE,
                    || !any_thread_alive(i64::from(pid)),
                )
                .await;
            }
        }
    }
}

/// One trial: the call held at `kill`, the proxy SIGKILLed, the retry through another
/// replica. The effects are counted by the caller.
async fn trial(name: &str, choice: &str, kill: Kill) -> Trial {
    trial_on(Front::Http, name, choice, kill).await
}

async fn trial_on(front: Front, name: &str, choice: &str, kill: Kill) -> Trial {
    let (parts, python) = Parts::python_or_skip().expect("checked by the caller");
    let c = Counting::new(&parts, &python, &format!("life-{name}"));
    let server = pg_idempotency_tests::scope("mail");
    let rest = format!("{}{}", c.upstream_stdio(&server), policy(choice));
    let config = write_config(&c.dir, &rest);
    let (mut a, to_a) = Killed::start(front, &config, &c.env()).await;
    // The retry's replica, reached over the same front: a principal is the front's (over
    // stdio the operator's, over HTTP the caller's), and each has its own key space.
    let b = match front {
        Front::Http => Some(HttpProxy::start(&config, &c.env()).await),
        Front::Stdio => None,
    };
    let id = format!("life-{name}");
    let args = match kill {
        Kill::BeforeTheEffect => {
            json!({"to": "a@x", "subject": "s", "message_id": id, "gate": true})
        }
        Kill::AfterTheEffect => {
            json!({"to": "a@x", "subject": "s", "message_id": id, "hold": true})
        }
    };
    let first = tokio::spawn({
        let (args, id) = (args.clone(), id.clone());
        async move {
            let _ = to_a
                .peer()
                .call_tool(params("send_email", args, key_meta(&id)))
                .await;
        }
    });
    let marker = match kill {
        Kill::BeforeTheEffect => c.hold.join(format!("gated-{id}")),
        Kill::AfterTheEffect => c.hold.join(format!("held-{id}")),
    };
    until(
        &format!("the call {id} to reach its {kill:?} point"),
        PATIENCE,
        || marker.exists(),
    )
    .await;
    let child = pid_in(&marker);
    assert!(
        alive(child),
        "the upstream child runs when the proxy is killed"
    );
    let effects_at_kill = effects_of(&c, &id);
    assert_eq!(
        effects_at_kill,
        usize::from(kill == Kill::AfterTheEffect),
        "{:#?}",
        c.effects()
    );
    // SIGKILL, and the proxy reaped: it is gone, with every thread.
    a.kill().await;
    first.abort();
    // Let an orphan go on as it would: the gate opens, the hold is released.
    std::fs::write(c.hold.join("open"), b"go").unwrap();
    c.release();
    // The child died with the proxy, or (were it an orphan) acts: the log shows which.
    until(
        "the upstream child to die with the proxy, or act",
        PATIENCE,
        || !alive(child) || effects_of(&c, &id) > effects_at_kill,
    )
    .await;
    let orphan_effects = effects_of(&c, &id) - effects_at_kill;
    let to_b = match &b {
        Some(b) => b.client().await,
        None => stdio_client(&config, &c.env()).await,
    };
    // The holder stopped beating: the retry is told when its lease lapses, and retries then.
    let retry = call_as_told(&to_b, "send_email", args, key_meta(&id)).await;
    to_b.cancel().await.unwrap();
    Trial {
        c,
        id,
        retry,
        b,
        orphan_effects,
    }
}

/// No effect came from the killed proxy's child: it died with the proxy.
fn assert_no_orphan_effect(t: &Trial) {
    assert_eq!(
        t.orphan_effects,
        0,
        "the upstream child outlived the SIGKILLed proxy and acted: {:#?}",
        t.c.effects()
    );
}

/// The operator's way out of a refused call: forget the record (docs/mcp.md, `refuse`).
async fn forget(refused: &ErrorData, id: &str) {
    let data = refused.data.as_ref().expect("the refusal's data");
    let scope = data["scope"].as_str().expect("the refusal names the scope");
    let (db, connection) =
        tokio_postgres::connect(&pg_idempotency_tests::dsn(), tokio_postgres::NoTls)
            .await
            .expect("the database under test");
    tokio::spawn(connection);
    // Unnamed (query_typed): the suite runs through a pooler in transaction mode too.
    let text = tokio_postgres::types::Type::TEXT;
    let forgot: bool = db
        .query_typed(
            "SELECT idem_forget($1, $2)",
            &[(&scope, text.clone()), (&id, text)],
        )
        .await
        .expect("idem_forget")
        .first()
        .map(|r| r.get(0))
        .unwrap_or(false);
    assert!(forgot, "the refused record is forgotten");
}

fn assert_refused(r: &Result<CallToolResult, ErrorData>) -> ErrorData {
    let e = r.clone().expect_err("a takeover under refuse is refused");
    assert_eq!(
        e.code.0,
        pg_idempotency_mcp::answer::code::OUTCOME_UNKNOWN,
        "{e:?}"
    );
    e
}

#[tokio::test]
async fn killed_before_the_effect_rerun_gives_one_effect() {
    if Parts::python_or_skip().is_none() {
        return;
    }
    let t = trial("before-rerun", RERUN, Kill::BeforeTheEffect).await;
    let r = t.retry.clone().expect("the takeover runs the call");
    assert_eq!(mark(&r)["replayed"], false, "{r:?}");
    assert_eq!(effects_of(&t.c, &t.id), 1, "{:#?}", t.c.effects());
    assert_no_orphan_effect(&t);
}

/// Refused, with no effect at all; the operator forgets the record, and the call runs once.
#[tokio::test]
async fn killed_before_the_effect_refuse_gives_one_effect() {
    if Parts::python_or_skip().is_none() {
        return;
    }
    let t = trial("before-refuse", REFUSE, Kill::BeforeTheEffect).await;
    let refused = assert_refused(&t.retry);
    let at_refusal = effects_of(&t.c, &t.id);
    forget(&refused, &t.id).await;
    let to_b = t.b.as_ref().expect("an HTTP trial").client().await;
    let args = json!({"to": "a@x", "subject": "s", "message_id": t.id, "gate": true});
    call(&to_b, "send_email", args, key_meta(&t.id))
        .await
        .expect("the forgotten call runs");
    to_b.cancel().await.unwrap();
    assert_eq!(effects_of(&t.c, &t.id), 1, "{:#?}", t.c.effects());
    assert_eq!(at_refusal, 0, "the refused call had acted");
    assert_no_orphan_effect(&t);
}

/// The read finds nothing (the server never acted), so the call runs: the send's own answer.
#[tokio::test]
async fn killed_before_the_effect_reconcile_gives_one_effect() {
    if Parts::python_or_skip().is_none() {
        return;
    }
    let t = trial("before-reconcile", RECONCILE, Kill::BeforeTheEffect).await;
    let r = t.retry.clone().expect("the takeover runs the call");
    assert_eq!(effects_of(&t.c, &t.id), 1, "{:#?}", t.c.effects());
    assert!(
        structured(&r).contains_key("sent") && !structured(&r).contains_key("found"),
        "the send's answer, not a found read's: {r:?}"
    );
    assert_no_orphan_effect(&t);
}

/// The same two trials with the killed proxy reached over its stdio front (the caller
/// started it): its upstream child dies with it all the same.
#[tokio::test]
async fn over_stdio_killed_before_the_effect_rerun_gives_one_effect() {
    if Parts::python_or_skip().is_none() {
        return;
    }
    let t = trial_on(
        Front::Stdio,
        "stdio-before-rerun",
        RERUN,
        Kill::BeforeTheEffect,
    )
    .await;
    let r = t.retry.clone().expect("the takeover runs the call");
    assert_eq!(mark(&r)["replayed"], false, "{r:?}");
    assert_eq!(effects_of(&t.c, &t.id), 1, "{:#?}", t.c.effects());
    assert_no_orphan_effect(&t);
}

#[tokio::test]
async fn over_stdio_killed_before_the_effect_refuse_acts_never() {
    if Parts::python_or_skip().is_none() {
        return;
    }
    let t = trial_on(
        Front::Stdio,
        "stdio-before-refuse",
        REFUSE,
        Kill::BeforeTheEffect,
    )
    .await;
    assert_refused(&t.retry);
    assert_eq!(effects_of(&t.c, &t.id), 0, "{:#?}", t.c.effects());
    assert_no_orphan_effect(&t);
}

/// `rerun` runs the call again after a kill past the effect: two effects, as documented.
#[tokio::test]
async fn killed_after_the_effect_rerun_gives_two_effects() {
    if Parts::python_or_skip().is_none() {
        return;
    }
    let t = trial("after-rerun", RERUN, Kill::AfterTheEffect).await;
    t.retry.clone().expect("the takeover runs the call again");
    assert_eq!(effects_of(&t.c, &t.id), 2, "{:#?}", t.c.effects());
}

#[tokio::test]
async fn killed_after_the_effect_refuse_gives_one_effect() {
    if Parts::python_or_skip().is_none() {
        return;
    }
    let t = trial("after-refuse", REFUSE, Kill::AfterTheEffect).await;
    assert_refused(&t.retry);
    assert_eq!(effects_of(&t.c, &t.id), 1, "{:#?}", t.c.effects());
}

#[tokio::test]
async fn killed_after_the_effect_reconcile_gives_one_effect() {
    if Parts::python_or_skip().is_none() {
        return;
    }
    let t = trial("after-reconcile", RECONCILE, Kill::AfterTheEffect).await;
    let r = t
        .retry
        .clone()
        .expect("the takeover answers the read's result");
    assert_eq!(mark(&r)["replayed"], true, "{r:?}");
    assert_eq!(structured(&r)["found"], true, "{r:?}");
    assert_eq!(effects_of(&t.c, &t.id), 1, "{:#?}", t.c.effects());
}

/// An upstream that starts a child of its own (a grandchild of the proxy, in the server's
/// process group) before it runs the counting server: the `[upstream]` table, and the file
/// the grandchild's pid goes to.
fn upstream_with_a_child(c: &Counting, python: &Path) -> (String, std::path::PathBuf) {
    let pid_file = c.dir.join("grandchild.pid");
    let script = format!(
        "sleep 100000 </dev/null >/dev/null 2>&1 & echo $! > {}; exec {} {}",
        pid_file.display(),
        python.display(),
        c.script.display()
    );
    let server = pg_idempotency_tests::scope("mail");
    let rest = format!(
        "[upstream]\nname = {}\ncommand = \"sh\"\nargs = [\"-c\", {}]\n",
        toml_str(&server),
        toml_str(&script)
    );
    (rest, pid_file)
}

/// The grandchild's pid, once the server answered (it was written before the server ran).
fn running_grandchild(pid_file: &Path) -> i64 {
    let pid: i64 = std::fs::read_to_string(pid_file)
        .expect("the server's child wrote its pid")
        .trim()
        .parse()
        .expect("a pid");
    assert!(alive(pid), "the server's child runs");
    pid
}

/// What the server started ends with the proxy too, though the server itself would only
/// have seen its stdin close: the host closes the proxy's stdin.
#[tokio::test]
async fn the_servers_own_children_end_with_the_proxy() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "life-grandchild");
    let (rest, pid_file) = upstream_with_a_child(&c, &python);
    let config = write_config(&c.dir, &rest);
    let client = stdio_client(&config, &c.env()).await;
    call(&client, "count_emails", json!({}), None)
        .await
        .expect("the server answers");
    let grandchild = running_grandchild(&pid_file);
    client.cancel().await.unwrap();
    until("the server's child to end with the proxy", PATIENCE, || {
        !alive(grandchild)
    })
    .await;
}

/// SIGTERM (a service manager's stop) ends the HTTP proxy normally: its upstream servers'
/// groups are killed on the way out, what they started included.
#[tokio::test]
async fn sigterm_ends_the_proxy_and_the_servers_children() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "life-sigterm");
    let (rest, pid_file) = upstream_with_a_child(&c, &python);
    let config = write_config(&c.dir, &rest);
    let mut proxy = HttpProxy::start(&config, &c.env()).await;
    let client = proxy.client().await;
    call(&client, "count_emails", json!({}), None)
        .await
        .expect("the server answers");
    let grandchild = running_grandchild(&pid_file);
    let pid = proxy.child.id().expect("the proxy runs");
    // SAFETY: kill(2) of the proxy this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let ended = tokio::time::timeout(PATIENCE, proxy.child.wait())
        .await
        .expect("the proxy ends on SIGTERM")
        .unwrap();
    assert!(ended.success(), "a normal end: {ended:?}");
    until("the server's child to end with the proxy", PATIENCE, || {
        !alive(grandchild)
    })
    .await;
}

/// The kernel's parent-death signal follows the thread that forked, not the process: a
/// child forked by a blocking-pool thread would be killed once that thread idled out. A
/// child asked for from such a thread (its keep-alive shortened to 100 ms) still answers
/// after the thread is gone: `cat` echoes a ping.
#[cfg(target_os = "linux")]
#[test]
fn a_child_outlives_the_thread_that_asked_for_it() {
    use rmcp::model::{ClientJsonRpcMessage, ClientRequest, NumberOrString, PingRequest};
    use rmcp::transport::Transport;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_keep_alive(Duration::from_millis(100))
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (thread, started) = tokio::task::spawn_blocking(|| {
            // SAFETY: gettid(2) reads the calling thread's id; nothing else.
            let thread = unsafe { libc::gettid() };
            let cat = tokio::process::Command::new("cat");
            let started = tokio::runtime::Handle::current()
                .block_on(pg_idempotency_mcp::upstream_child::spawn(cat));
            (thread, started)
        })
        .await
        .unwrap();
        let (mut child, _group) = started.expect("cat starts");
        let task = format!("/proc/self/task/{thread}");
        until(
            "the blocking thread that asked for the child to end",
            PATIENCE,
            || !Path::new(&task).exists(),
        )
        .await;
        let ping = ClientJsonRpcMessage::request(
            ClientRequest::PingRequest(PingRequest::default()),
            NumberOrString::Number(7),
        );
        // A dead child's stdin is a broken pipe, or its stdout ends.
        let sent = child.send(ping).await;
        let echoed = match &sent {
            Ok(()) => Some(tokio::time::timeout(PATIENCE, child.receive()).await),
            Err(_) => None,
        };
        assert!(
            matches!(echoed, Some(Ok(Some(_)))),
            "the child died when the thread that asked for it ended: sent {sent:?}, echoed {echoed:?}"
        );
    });
}

/// An HTTP upstream is told the call's upstream key in the `Idempotency-Key` header of the
/// POST that carries it, the same as `_meta`'s `upstreamKey`: a server that deduplicates on
/// that header makes `rerun` safe.
#[tokio::test]
async fn an_http_upstream_gets_the_upstream_key_as_idempotency_key() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "life-http-key");
    let port = free_port();
    let mut server = tokio::process::Command::new(&c.python)
        .arg(&c.script)
        .arg("--http")
        .arg(port.to_string())
        .envs(c.env())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    until("the counting server to listen", PATIENCE, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    let name = pg_idempotency_tests::scope("mail");
    let rest = format!(
        "[upstream]\nname = {}\nurl = \"http://127.0.0.1:{port}/mcp\"\n",
        toml_str(&name)
    );
    let config = write_config(&c.dir, &rest);
    let client = stdio_client(&config, &[]).await;
    call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "keyed"}),
        key_meta("http-key-1"),
    )
    .await
    .expect("the call runs");
    client.cancel().await.unwrap();
    let effects = c.effects();
    let sent = &effects[0];
    let upstream_key = &sent["meta"]["pg-idempotency/upstream"]["upstreamKey"];
    assert!(upstream_key.is_string(), "{sent:#?}");
    assert_eq!(
        &sent["headers"]["idempotency-key"], upstream_key,
        "the POST of the call carries its upstream key: {sent:#?}"
    );
    server.kill().await.unwrap();
}
