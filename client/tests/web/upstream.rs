//! tests/upstream-node/server.js as a child process of the test, stopped when dropped, and
//! its counters (GET /executions) and gate (POST /release).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pg_idempotency_tests::{skip, Skip};
use serde_json::Value;

/// How long a test waits for something it is sure will happen before calling it a failure.
pub const BOUND: Duration = Duration::from_secs(30);

pub struct Upstream {
    child: Child,
    pub base: String,
    http: reqwest::Client,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .join("tests/upstream-node")
}

impl Upstream {
    /// Starts the server on a free port; None (the test recorded as skipped, with the
    /// reason) without node or without the server's node_modules.
    pub fn start() -> Option<Upstream> {
        let dir = folder();
        if !dir.join("node_modules/express-idempotency").is_dir() {
            skip(
                Skip::Missing,
                "tests/upstream-node/node_modules is missing: run scripts/upstream-node.sh (npm ci)",
            );
            return None;
        }
        let spawned = Command::new("node")
            .arg(dir.join("server.js"))
            .arg("0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                skip(
                    Skip::Missing,
                    "node is not installed (scripts/setup.sh installs it)",
                );
                return None;
            }
            Err(e) => panic!("cannot start node: {e}"),
        };
        // The server prints its port once it listens; read it on a thread of its own so
        // that a server that never prints fails the test within the bound.
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut upstream = Upstream {
            child,
            base: String::new(),
            http: reqwest::Client::new(),
        };
        let line = rx
            .recv_timeout(BOUND)
            .expect("server.js never printed its port");
        let port: u16 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("server.js printed {line:?}, not a port"));
        upstream.base = format!("http://127.0.0.1:{port}");
        Some(upstream)
    }

    /// The server's counters: started, executions, replays, conflicts, remembered, held.
    pub async fn counts(&self) -> Value {
        self.http
            .get(format!("{}/executions", self.base))
            .send()
            .await
            .expect("GET /executions")
            .json()
            .await
            .expect("the counters")
    }

    /// Polls the counters until `done` holds, within the bound.
    pub async fn until(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + BOUND;
        loop {
            let counts = self.counts().await;
            if done(&counts) {
                return counts;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never happened: {what} (last counts {counts})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lets the held requests go on.
    pub async fn release(&self) {
        self.http
            .post(format!("{}/release", self.base))
            .send()
            .await
            .expect("POST /release");
    }
}
