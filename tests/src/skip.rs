//! A test that cannot run here says so, and the test command counts it as skipped.
//!
//! libtest has no way to skip a test once it runs, so a skipping test records itself in the
//! file named by `PGIDEM_SKIPS` (one line: status, test binary, test name, reason) and
//! returns; `scripts/results.py` turns its "ok" into a skip with that reason.

use std::io::Write;

/// Why a test does not run here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// It does not apply to what is under test (an extension-only feature on the portable
    /// variant, pg_cron on a server that has no pg_cron build).
    NotApplicable,
    /// Something the project's setup installs is missing (it needs root). Under CI the test
    /// command counts such a skip as a failure.
    Missing,
}

/// Records that the calling test is skipped, and why. The test then returns.
pub fn skip(why: Skip, reason: &str) {
    eprintln!("skipped: {reason}");
    let status = match why {
        Skip::NotApplicable => "skip",
        Skip::Missing => "skip-missing",
    };
    // libtest runs each test on a thread named after it.
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "?".into());
    let Ok(path) = std::env::var("PGIDEM_SKIPS") else {
        return;
    };
    let line = format!(
        "{status}\t{binary}\t{test}\t{}\n",
        reason.replace(['\t', '\n'], " ")
    );
    // One write of one line in append mode: tests running in parallel do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        panic!("cannot record the skip in {path}: {e}");
    }
}

/// Whether the suite runs through PgBouncer in transaction mode (`PGIDEM_THROUGH_POOLER=1`,
/// set by the test command's step that runs it so, scripts/pgbouncer.sh). A test that needs
/// a session of its own (a `SET ROLE` kept between statements, a startup option, a server
/// of its own) records its skip with `what` and returns: a pooler in transaction mode lends
/// a server connection per transaction, and a session setting made on one is left there
/// for whoever gets it next.
pub fn skip_through_pooler(what: &str) -> bool {
    let pooled = std::env::var("PGIDEM_THROUGH_POOLER").as_deref() == Ok("1");
    if pooled {
        skip(
            Skip::NotApplicable,
            &format!(
                "through PgBouncer in transaction mode there is no session of one's own: {what}"
            ),
        );
    }
    pooled
}

/// Whether the suite runs through a PL/Proxy proxy (`PGIDEM_THROUGH_PROXY=1`, set by the
/// test command's step that runs it so, scripts/sharded.sh). A test of what only one
/// server can do, the caller's own transaction holding the claim with its write
/// (docs/scaling.md), records its skip with `what` and returns.
pub fn skip_through_proxy(what: &str) -> bool {
    let proxied = std::env::var("PGIDEM_THROUGH_PROXY").as_deref() == Ok("1");
    if proxied {
        skip(
            Skip::NotApplicable,
            &format!(
                "through a PL/Proxy proxy each call commits on its partition by itself: {what}"
            ),
        );
    }
    proxied
}
