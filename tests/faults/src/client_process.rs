//! Client processes seen from the test: a `fault_client` started with its settings, its
//! stdout read line by line on a thread of its own (so a line is seen as soon as it is
//! printed), and the signals a scenario sends it (SIGKILL, SIGSTOP, SIGCONT).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Sender;

/// What a `fault_client` is told on its command line.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    pub server: String,
    pub ledger: String,
    pub scope: String,
    pub keys: usize,
    pub lease: String,
    pub ttl: String,
    pub calls: usize,
    pub seed: u64,
    /// The process id the events are recorded under (a replacement keeps it).
    pub process: usize,
    /// The run's clock: every line's time is microseconds since this wall-clock instant.
    pub start_epoch_micros: i64,
    /// `claim` or `effect`: print `paused` there and wait for a line on stdin (`go`, or
    /// `go complete` to complete even when the ledger refused the effect).
    pub pause_after: Option<String>,
    /// Microseconds the client waits between calls (a service's pace; 0: none).
    pub pace_micros: u64,
    /// `sql` (plain SQL, as run.rs) or `rust` (the Rust client's PgStore) for the begins
    /// and completions.
    pub api: String,
}

impl ClientSettings {
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            ("--server", self.server.clone()),
            ("--ledger", self.ledger.clone()),
            ("--scope", self.scope.clone()),
            ("--keys", self.keys.to_string()),
            ("--lease", self.lease.clone()),
            ("--ttl", self.ttl.clone()),
            ("--calls", self.calls.to_string()),
            ("--seed", self.seed.to_string()),
            ("--process", self.process.to_string()),
            ("--start-epoch-micros", self.start_epoch_micros.to_string()),
            ("--pace-micros", self.pace_micros.to_string()),
            ("--api", self.api.clone()),
        ];
        if let Some(point) = &self.pause_after {
            args.push(("--pause-after", point.clone()));
        }
        args.into_iter()
            .flat_map(|(name, value)| [name.to_string(), value])
            .collect()
    }
}

/// A line a client process printed (`None`: its stdout closed, it has ended), tagged with
/// its process id and which of the processes under that id printed it.
#[derive(Debug)]
pub struct Message {
    pub process: usize,
    pub generation: usize,
    pub line: Option<String>,
}

/// A running `fault_client`.
pub struct ClientProcess {
    pub process: usize,
    pub generation: usize,
    child: Child,
    stdin: Option<ChildStdin>,
}

impl ClientProcess {
    /// Starts `exe` (the `fault_client` binary) with `settings`; its lines go to `lines`.
    pub fn spawn(
        exe: &Path,
        settings: &ClientSettings,
        generation: usize,
        lines: Sender<Message>,
    ) -> ClientProcess {
        let mut child = Command::new(exe)
            .args(settings.args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        let stdout = child.stdout.take().expect("stdout is piped");
        let process = settings.process;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let message = Message {
                    process,
                    generation,
                    line: Some(line),
                };
                if lines.send(message).is_err() {
                    return;
                }
            }
            let _ = lines.send(Message {
                process,
                generation,
                line: None,
            });
        });
        ClientProcess {
            process,
            generation,
            stdin: child.stdin.take(),
            child,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL (what `Child::kill` sends on Unix), then reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends a signal by name (`STOP`, `CONT`) with kill(1).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap_or_else(|e| panic!("kill -{name}: {e}"));
        assert!(status.success(), "kill -{name} {} failed", self.pid());
    }

    /// Whether the process is stopped (state `T` in /proc/<pid>/stat).
    pub fn is_stopped(&self) -> bool {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            == Some("T")
    }

    /// Writes one line to its stdin.
    pub fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is piped");
        writeln!(stdin, "{line}").unwrap_or_else(|e| panic!("cannot tell the client: {e}"));
        stdin
            .flush()
            .unwrap_or_else(|e| panic!("cannot tell the client: {e}"));
    }

    /// Waits for it to exit; whether it exited 0.
    pub fn wait(&mut self) -> bool {
        self.stdin = None;
        self.child
            .wait()
            .map(|s| s.success())
            .unwrap_or_else(|e| panic!("wait: {e}"))
    }
}

impl Drop for ClientProcess {
    /// A test that fails midway leaves no client behind (a stopped one is continued so
    /// that SIGKILL is delivered at once).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-CONT", &self.pid().to_string()])
                .status();
            self.kill();
        }
    }
}
