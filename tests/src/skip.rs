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
