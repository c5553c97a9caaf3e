//! Deep and wide JSON through every function that reads it: refused with the documented
//! SQLSTATE (IK005 past 128 levels for what is canonicalised, docs/canonical-json.md;
//! PostgreSQL's own 54001 where its jsonb parser runs out of stack before our code sees
//! the value) or accepted, and never a crashed backend: a crash restarts every session of
//! the cluster, so the postmaster's start time and the server log are checked too.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use pg_idempotency_tests::attack::{storage_picture, Db};
use pg_idempotency_tests::*;

/// Watches the server for a crash between `start` and `assert_no_crash`: the postmaster
/// restarts its children after a backend dies of a signal, but keeps its start time, so
/// the log's "terminated by signal" is the witness; a new start time means a full restart.
struct CrashWatch {
    started: String,
    log: Option<(PathBuf, u64)>,
}

impl CrashWatch {
    fn start(c: &mut Client) -> CrashWatch {
        let started: String = c
            .query_one("SELECT pg_postmaster_start_time()::text", &[])
            .unwrap()
            .get(0);
        let log = server_log(c).map(|path| {
            let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            (path, len)
        });
        if log.is_none() {
            eprintln!("no readable server log: only the postmaster start time is checked");
        }
        CrashWatch { started, log }
    }

    /// Lines the log gained since `start`.
    fn new_log_lines(&self) -> String {
        let Some((path, offset)) = &self.log else {
            return String::new();
        };
        let mut f = std::fs::File::open(path).unwrap();
        f.seek(SeekFrom::Start(*offset)).unwrap();
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).unwrap();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn assert_no_crash(&self) {
        // A fresh session: the one that ran the calls may be the one that died.
        let mut c = connect();
        let now: String = c
            .query_one("SELECT pg_postmaster_start_time()::text", &[])
            .unwrap()
            .get(0);
        assert_eq!(now, self.started, "the server restarted");
        let lines = self.new_log_lines();
        for bad in [
            "terminated by signal",
            "was terminated by exception",
            "all server processes terminated",
            "PANIC:",
        ] {
            assert!(
                !lines.contains(bad),
                "the server log says {bad:?}:\n{lines}"
            );
        }
    }
}

/// The server's log file: `pg_current_logfile()` under the logging collector, else the
/// private clusters' `server.log` beside the data folder (scripts/cluster.sh starts them
/// with `pg_ctl -l <cluster>/server.log`). None when it cannot be read from here.
fn server_log(c: &mut Client) -> Option<PathBuf> {
    let row = c
        .query_one(
            "SELECT current_setting('data_directory'), pg_current_logfile()",
            &[],
        )
        .ok()?;
    let data = PathBuf::from(row.get::<_, String>(0));
    let path = match row.get::<_, Option<String>>(1) {
        Some(f) if f.starts_with('/') => PathBuf::from(f),
        Some(f) => data.join(f),
        None => data.parent()?.join("server.log"),
    };
    std::fs::File::open(&path).ok().map(|_| path)
}

fn arrays(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn objects(depth: usize) -> String {
    format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

/// What PostgreSQL's own jsonb input does with `text`: None when it parses, else its
/// SQLSTATE (deep enough nesting exhausts its stack: 54001).
fn jsonb_input(c: &mut Client, text: &str) -> Option<String> {
    c.query_one("SELECT $1::text::jsonb IS NOT NULL", &[&text])
        .err()
        .map(|e| sqlstate(&e))
}

/// The SQLSTATE a function that canonicalises `text` must raise: PostgreSQL's own when its
/// parser refuses the text first, else ours for more than 128 levels.
fn expected_for_request(c: &mut Client, text: &str, depth: usize) -> Option<String> {
    jsonb_input(c, text).or_else(|| (depth > 128).then(|| "IK005".to_string()))
}

fn error_of<T>(r: Result<T, postgres::Error>) -> Option<String> {
    r.err().map(|e| sqlstate(&e))
}

#[test]
fn deep_requests_are_refused_without_a_crash() {
    let db = Db::fresh("nesting_requests");
    let mut c = db.connect();
    let watch = CrashWatch::start(&mut c);
    let sc = scope("deep");
    for depth in [128, 129, 1000, 10_000, 100_000] {
        for (shape, text) in [("arrays", arrays(depth)), ("objects", objects(depth))] {
            let what = format!("{shape} nested {depth} deep");
            let expected = expected_for_request(&mut c, &text, depth);
            if depth == 100_000 {
                assert_eq!(expected.as_deref(), Some("54001"), "jsonb input of {what}");
            }
            let got = error_of(c.query_one("SELECT idem_hash($1::text::jsonb)", &[&text]));
            assert_eq!(got, expected, "idem_hash of {what}");
            let got = error_of(c.query_one("SELECT idem_canonical($1::text::jsonb)", &[&text]));
            assert_eq!(got, expected, "idem_canonical of {what}");
            let before = storage_picture(&mut c);
            let key = format!("{shape}-{depth}");
            let got = error_of(try_begin(&mut c, &sc, &key, Some(&text), None, None));
            assert_eq!(got, expected, "idem_begin with {what}");
            // HASH_INPUT: no key, the request names the call.
            let got = error_of(c.query_one(
                "SELECT outcome FROM idem_begin($1, NULL, $2::text::jsonb)",
                &[&sc, &text],
            ));
            assert_eq!(got, expected, "idem_begin, HASH_INPUT, with {what}");
            if expected.is_some() {
                assert_eq!(storage_picture(&mut c), before, "{what} wrote something");
            }
        }
    }
    drop(c);
    watch.assert_no_crash();
}

/// Responses are stored as given, not canonicalised: as deep as PostgreSQL parses them,
/// they are stored and replayed unchanged; deeper, its parser refuses them (54001) and the
/// claim is untouched.
#[test]
fn deep_responses_are_stored_or_refused_without_a_crash() {
    let db = Db::fresh("nesting_responses");
    let mut c = db.connect();
    let watch = CrashWatch::start(&mut c);
    let sc = scope("deep");
    for depth in [129, 1000, 10_000, 100_000] {
        for (shape, text) in [("arrays", arrays(depth)), ("objects", objects(depth))] {
            let what = format!("response of {shape} nested {depth} deep");
            let key = format!("{shape}-{depth}");
            let fence = begin(&mut c, &sc, &key).fence.unwrap();
            match jsonb_input(&mut c, &text) {
                Some(state) => {
                    assert_eq!(state, "54001", "{what}");
                    let before = storage_picture(&mut c);
                    let e = complete(&mut c, &sc, &key, fence, &text).unwrap_err();
                    assert_eq!(sqlstate(&e), state, "{what}");
                    assert_eq!(storage_picture(&mut c), before, "{what} wrote something");
                }
                None => {
                    assert_eq!(
                        complete(&mut c, &sc, &key, fence, &text).unwrap(),
                        "succeeded"
                    );
                    let replay = begin(&mut c, &sc, &key);
                    assert_eq!(replay.outcome, "replay", "{what}");
                    let same: bool = c
                        .query_one(
                            "SELECT $1::text::jsonb = $2::text::jsonb",
                            &[&replay.response, &text],
                        )
                        .unwrap()
                        .get(0);
                    assert!(same, "{what} replayed differently");
                }
            }
        }
    }
    drop(c);
    watch.assert_no_crash();
}

/// Wide is not deep: 100,000 keys, long strings and long arrays are hashed (the same
/// canonical form as the canon crate's), claimed and replayed.
#[test]
fn wide_json_is_accepted_without_a_crash() {
    let db = Db::fresh("nesting_wide");
    let mut c = db.connect();
    let watch = CrashWatch::start(&mut c);
    let sc = scope("wide");
    let many_keys = {
        let members: Vec<String> = (0..100_000).map(|i| format!(r#""k{i}":{i}"#)).collect();
        format!("{{{}}}", members.join(","))
    };
    let long_string = format!(r#"{{"s":"{}"}}"#, "\u{1f600}".repeat(1 << 20));
    let long_array = format!("[{}]", vec!["0"; 200_000].join(","));
    for (what, text) in [
        ("100,000 keys", &many_keys),
        ("a 4 MB string", &long_string),
        ("200,000 elements", &long_array),
    ] {
        // The canonical form is the sorted, compact text: the same as jsonb keeps for
        // these (integers, no whitespace), sorted by UTF-16 code units (ASCII here).
        let canonical: String = c
            .query_one("SELECT idem_canonical($1::text::jsonb)", &[text])
            .unwrap_or_else(|e| panic!("idem_canonical of {what}: {e}"))
            .get(0);
        let expected = pg_idempotency_canon::canonical_text(text).unwrap();
        assert!(canonical == expected, "canonical form of {what} differs");
        let b = try_begin(&mut c, &sc, what, Some(text), None, None).unwrap();
        assert_eq!(b.outcome, "claimed", "{what}");
        // (Large responses are sizes.rs's: these are above max_response_bytes.)
        complete(&mut c, &sc, what, b.fence.unwrap(), "{}").unwrap();
        let replay = try_begin(&mut c, &sc, what, Some(text), None, None).unwrap();
        assert_eq!(replay.outcome, "replay", "{what}");
    }
    drop(c);
    watch.assert_no_crash();
}
