//! The proxy over stdio driven as raw lines: the test writes its stdin and reads its
//! stdout itself, and decides how the session ends (as an MCP host does).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::*;

pub const VERSION: &str = "2025-06-18";
/// A bound on each wait for the proxy's next line: a guard against a hang, never reached
/// when the proxy answers.
pub const HANG: Duration = Duration::from_secs(120);

pub fn initialize(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "attacker", "version": "1"}}})
}

/// The proxy over stdio in front of the counting server, its stdin and stdout in the
/// test's hands, its log in a file.
pub struct StdioProxy {
    pub child: Child,
    pub stdin: ChildStdin,
    pub stdout: Lines<BufReader<ChildStdout>>,
    pub log: PathBuf,
    pub counting: Counting,
    pub next_id: u64,
}

impl StdioProxy {
    /// Started and initialized (`initialize` answered, `notifications/initialized` sent).
    pub async fn start(case: &str) -> Option<StdioProxy> {
        StdioProxy::start_with(case, "").await
    }

    /// As `start`, with more of the proxy's configuration after its `[upstream]` table.
    pub async fn start_with(case: &str, config: &str) -> Option<StdioProxy> {
        let (parts, python) = Parts::python_or_skip()?;
        let counting = Counting::new(&parts, &python, case);
        let name = pg_idempotency_tests::scope("malformed");
        let config = write_config(
            &counting.dir,
            &format!("{}\n{config}", counting.upstream_stdio(&name)),
        );
        let log = counting.dir.join("proxy.log");
        let mut child = tokio::process::Command::new(proxy_bin())
            .arg("--config")
            .arg(&config)
            .envs(counting.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut proxy = StdioProxy {
            child,
            stdin,
            stdout,
            log,
            counting,
            next_id: 1000,
        };
        proxy.write(initialize(0).to_string().as_bytes()).await;
        let answer = proxy.answer().await;
        assert!(answer["result"].is_object(), "initialize: {answer}");
        proxy
            .write(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        Some(proxy)
    }

    /// Writes `bytes` and a newline.
    pub async fn write(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// The proxy's next line on stdout, as JSON.
    pub async fn answer(&mut self) -> Value {
        let line = tokio::time::timeout(HANG, self.stdout.next_line())
            .await
            .expect("the proxy answers")
            .unwrap()
            .expect("the proxy's stdout is open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Writes each line, then a `ping`: the answers that came before the ping's (the ping
    /// answered shows the session went on).
    pub async fn answers_to(&mut self, lines: &[&[u8]]) -> Vec<Value> {
        for line in lines {
            self.write(line).await;
        }
        self.next_id += 1;
        let ping = json!({"jsonrpc": "2.0", "id": self.next_id, "method": "ping"});
        self.write(ping.to_string().as_bytes()).await;
        let mut before = Vec::new();
        loop {
            let answer = self.answer().await;
            if answer["id"] == self.next_id {
                assert!(answer["result"].is_object(), "ping: {answer}");
                return before;
            }
            before.push(answer);
        }
    }

    /// The one answer to `line`.
    pub async fn answer_to(&mut self, line: &[u8]) -> Value {
        let answers = self.answers_to(&[line]).await;
        assert_eq!(
            answers.len(),
            1,
            "one answer to {:?}: {answers:?}",
            String::from_utf8_lossy(&line[..line.len().min(200)])
        );
        answers.into_iter().next().unwrap()
    }

    /// Writes a request and returns its answer (a tool call is answered when it ends,
    /// after a ping sent behind it may be).
    pub async fn reply(&mut self, id: u64, request: &str) -> Value {
        self.write(request.as_bytes()).await;
        loop {
            let answer = self.answer().await;
            if answer["id"] == id {
                return answer;
            }
        }
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }

    /// Ends the session as a host does: stdin closed, or SIGTERM sent. Answers how the
    /// proxy exited.
    pub async fn end(self, how: End) -> std::process::ExitStatus {
        let StdioProxy {
            mut child, stdin, ..
        } = self;
        match how {
            End::StdinClosed => drop(stdin),
            End::Terminated => {
                let pid = child.id().expect("the proxy runs") as i32;
                // SAFETY: a plain kill(2) of the child this test started.
                assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
            }
        }
        tokio::time::timeout(HANG, child.wait())
            .await
            .expect("the proxy exits")
            .unwrap()
    }
}

/// How a host ends a stdio session.
#[derive(Debug, Clone, Copy)]
pub enum End {
    StdinClosed,
    Terminated,
}

/// A connection to the database under test, for reading records directly.
pub async fn records_db() -> tokio_postgres::Client {
    let (db, conn) = tokio_postgres::connect(&pg_idempotency_tests::dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    db
}

/// The record's state under (scope, key), if there is one.
pub async fn record_state(db: &tokio_postgres::Client, scope: &str, key: &str) -> Option<String> {
    db.query_typed(
        "SELECT state::text FROM idem_lookup($1, $2)",
        &[
            (&scope, tokio_postgres::types::Type::TEXT),
            (&key, tokio_postgres::types::Type::TEXT),
        ],
    )
    .await
    .unwrap()
    .first()
    .map(|r| r.get(0))
}
