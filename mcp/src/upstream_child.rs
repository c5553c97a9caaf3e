//! A stdio upstream server's child process lives no longer than the proxy.
//!
//! A child that outlived a killed proxy would go on with the call it was given, and the
//! takeover by another replica would run it again: two effects for one key. So:
//!
//! - **Its own process group** (Unix): the proxy kills the whole group, grandchildren
//!   included, when the upstream connection is closed or dropped ([`Group`]) and when the
//!   proxy ends normally ([`kill_all`]).
//! - **Death with the proxy** (Linux): `PR_SET_PDEATHSIG(SIGKILL)` in the child before it
//!   runs the server, then a check that its parent is still the proxy (the proxy may have
//!   died before `prctl` ran, and then no signal would ever come). The kernel sends the
//!   signal when the *thread* that forked the child ends, not the process, so every child
//!   is forked by one thread that lives as long as the proxy ([`spawn`]), never by a tokio
//!   blocking-pool thread (they end after idling) or whatever thread a task runs on.
//!
//! Elsewhere there is no parent-death signal: the group is killed on a normal end only.
//! docs/mcp.md ("The upstream server's process") and docs/decisions.md say why.

use std::collections::BTreeSet;
use std::io;
use std::sync::{mpsc, Mutex, OnceLock};

use rmcp::transport::TokioChildProcess;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// A child to start: the command, the runtime its pipes and exit belong to, and where the
/// started process goes.
struct Job {
    command: tokio::process::Command,
    runtime: Handle,
    started: oneshot::Sender<io::Result<TokioChildProcess>>,
}

/// The thread that forks every upstream child: started once, it ends with the process.
fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("upstream-spawner".into())
            .spawn(move || {
                for job in inbox {
                    // The pipes and the child's exit are the caller's runtime's.
                    let _entered = job.runtime.enter();
                    let _ = job.started.send(TokioChildProcess::new(job.command));
                }
            });
        if let Err(e) = started {
            // Every spawn then fails with "the thread that starts upstream servers is gone".
            tracing::error!("cannot start the thread that starts upstream servers: {e}");
        }
        Mutex::new(jobs)
    })
}

/// Starts `command` as a stdio upstream server tied to the proxy's life: in its own process
/// group, killed by the kernel when the proxy dies (Linux). Forked by the one long-lived
/// spawner thread, whatever thread the caller runs on.
pub async fn spawn(mut command: tokio::process::Command) -> io::Result<(TokioChildProcess, Group)> {
    tie_to_proxy(&mut command);
    let (started, child) = oneshot::channel();
    let job = Job {
        command,
        runtime: Handle::current(),
        started,
    };
    let gone = || io::Error::other("the thread that starts upstream servers is gone");
    spawner()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(job)
        .map_err(|_| gone())?;
    let process = child.await.map_err(|_| gone())??;
    let group = Group::of(process.id());
    Ok((process, group))
}

/// The process group, and on Linux the parent-death signal, set in the child between fork
/// and exec.
fn tie_to_proxy(command: &mut tokio::process::Command) {
    #[cfg(unix)]
    command.process_group(0);
    #[cfg(target_os = "linux")]
    {
        let proxy = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe calls (prctl, getppid); its errors allocate nothing.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) == -1
                {
                    return Err(io::Error::last_os_error());
                }
                // The proxy died between fork and prctl: its signal will never come.
                if libc::getppid() != proxy {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(unix))]
    let _ = command;
}

/// The process groups of the upstream children alive, killed by [`kill_all`].
fn live() -> &'static Mutex<BTreeSet<i32>> {
    static LIVE: OnceLock<Mutex<BTreeSet<i32>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

/// A stdio upstream's process group: killed whole (SIGKILL) when dropped, which is when its
/// upstream connection has been closed (the server given its chance to exit) or dropped.
/// What the server left behind in its group (grandchildren) goes with it.
#[derive(Debug)]
pub struct Group {
    pgid: Option<i32>,
}

impl Group {
    fn of(pid: Option<u32>) -> Group {
        let pgid = pid.and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 0);
        if cfg!(unix) {
            if let Some(g) = pgid {
                live().lock().unwrap_or_else(|p| p.into_inner()).insert(g);
            }
        }
        Group { pgid }
    }

    /// The group's id: the child's pid (it leads its own group).
    pub fn id(&self) -> Option<i32> {
        self.pgid
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(g) = self.pgid {
            live().lock().unwrap_or_else(|p| p.into_inner()).remove(&g);
            kill_group(g);
        }
    }
}

/// SIGKILL to every process of the group; an empty group (ESRCH) is fine. The leader is
/// reaped by rmcp's cleanup and tokio; the group's id cannot name another group until every
/// process of this one is gone, and it is killed right then.
fn kill_group(pgid: i32) {
    #[cfg(unix)]
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    #[cfg(not(unix))]
    let _ = pgid;
}

/// Kills every upstream child's group still alive: called when the proxy ends normally,
/// so that no server (nor what it started) outlives it, on systems with no parent-death
/// signal too.
pub fn kill_all() {
    let groups = std::mem::take(&mut *live().lock().unwrap_or_else(|p| p.into_inner()));
    for g in groups {
        kill_group(g);
    }
}
