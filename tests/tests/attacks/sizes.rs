//! Oversized scope, key and response: refused before anything is written (the storage,
//! the fence sequence included, is unchanged), accepted at the limit, refused one byte
//! above it, with multibyte characters counted in bytes. Requests have no size limit:
//! only their 32-byte fingerprint is stored.

use pg_idempotency_tests::attack::{storage_picture, Db};
use pg_idempotency_tests::*;

/// The documented defaults (docs/settings.md); a fresh database leaves them in force.
const MAX_SCOPE_BYTES: usize = 128;
const MAX_KEY_BYTES: usize = 512;
const MAX_RESPONSE_BYTES: usize = 1_048_576;

/// Texts of exactly `bytes` bytes made of 1-, 2- and 4-byte characters (when `bytes`
/// allows), and the same plus one byte: (fits, one byte over).
fn at_and_over(bytes: usize) -> Vec<(String, String)> {
    let mut out = vec![("s".repeat(bytes), "s".repeat(bytes + 1))];
    if bytes.is_multiple_of(2) {
        let e = "\u{e9}".repeat(bytes / 2); // é: 2 bytes
        out.push((e.clone(), format!("{e}a")));
    }
    if bytes.is_multiple_of(4) {
        // 😀: 4 bytes, so 129 of them are only 129 characters but 516 bytes.
        let f = "\u{1f600}".repeat(bytes / 4);
        out.push((f.clone(), format!("{f}\u{1f600}")));
        out.push((f.clone(), format!("{f}a")));
    }
    for (fits, over) in &out {
        assert_eq!(fits.len(), bytes);
        assert!(over.len() > bytes);
    }
    out
}

/// Runs `call`, which must fail with `state`, and checks that it changed nothing.
fn refused_unchanged(
    c: &mut Client,
    state: &str,
    what: &str,
    call: impl FnOnce(&mut Client) -> Result<(), postgres::Error>,
) {
    let before = storage_picture(c);
    let e = call(c).expect_err(what);
    assert_eq!(sqlstate(&e), state, "{what}: {e}");
    assert_eq!(storage_picture(c), before, "{what} wrote something");
}

#[test]
fn scopes_count_bytes_and_are_refused_before_any_write() {
    let db = Db::fresh("sizes_scope");
    let mut c = db.connect();
    begin(&mut c, "other", "k"); // something for the picture to keep
    for (i, (fits, over)) in at_and_over(MAX_SCOPE_BYTES).into_iter().enumerate() {
        // A key per round: two rounds may share a scope that fits.
        let k = format!("k{i}");
        let k = k.as_str();
        let what = format!(
            "scope of {} bytes, {} chars",
            over.len(),
            over.chars().count()
        );
        refused_unchanged(&mut c, "22023", &what, |c| {
            try_begin(c, &over, k, None, None, None).map(|_| ())
        });
        let b = begin(&mut c, &fits, k);
        assert_eq!(b.outcome, "claimed", "scope of {} bytes", fits.len());
        let fence = b.fence.unwrap();
        // The other calls check the scope too, before they look for a record.
        refused_unchanged(&mut c, "22023", &format!("complete, {what}"), |c| {
            complete(c, &over, k, fence, "{}").map(|_| ())
        });
        refused_unchanged(&mut c, "22023", &format!("extend, {what}"), |c| {
            c.query_one(
                "SELECT * FROM idem_extend($1, $2, $3)",
                &[&over, &k, &fence],
            )
            .map(|_| ())
        });
        refused_unchanged(&mut c, "22023", &format!("release, {what}"), |c| {
            c.execute("SELECT idem_release($1, $2, $3)", &[&over, &k, &fence])
                .map(|_| ())
        });
        refused_unchanged(&mut c, "22023", &format!("forget, {what}"), |c| {
            c.query_one("SELECT idem_forget($1, 'k')", &[&over])
                .map(|_| ())
        });
        refused_unchanged(&mut c, "22023", &format!("lookup, {what}"), |c| {
            c.query("SELECT * FROM idem_lookup($1, 'k')", &[&over])
                .map(|_| ())
        });
        complete(&mut c, &fits, k, fence, "{}").unwrap();
    }
    drop(c);
}

#[test]
fn keys_count_bytes_and_are_refused_before_any_write() {
    let db = Db::fresh("sizes_key");
    let mut c = db.connect();
    begin(&mut c, "keys", "held");
    for (fits, over) in at_and_over(MAX_KEY_BYTES) {
        // A scope per round: two rounds may share a key that fits.
        let sc = scope("keys");
        let what = format!(
            "key of {} bytes, {} chars",
            over.len(),
            over.chars().count()
        );
        refused_unchanged(&mut c, "22023", &what, |c| {
            try_begin(c, &sc, &over, None, None, None).map(|_| ())
        });
        let b = begin(&mut c, &sc, &fits);
        assert_eq!(b.outcome, "claimed", "key of {} bytes", fits.len());
        let fence = b.fence.unwrap();
        refused_unchanged(&mut c, "22023", &format!("complete, {what}"), |c| {
            complete(c, &sc, &over, fence, "{}").map(|_| ())
        });
        refused_unchanged(&mut c, "22023", &format!("extend, {what}"), |c| {
            c.query_one(
                "SELECT * FROM idem_extend($1, $2, $3)",
                &[&sc, &over, &fence],
            )
            .map(|_| ())
        });
        refused_unchanged(&mut c, "22023", &format!("release, {what}"), |c| {
            c.execute("SELECT idem_release($1, $2, $3)", &[&sc, &over, &fence])
                .map(|_| ())
        });
        refused_unchanged(&mut c, "22023", &format!("forget, {what}"), |c| {
            c.query_one("SELECT idem_forget($1, $2)", &[&sc, &over])
                .map(|_| ())
        });
        complete(&mut c, &sc, &fits, fence, "{}").unwrap();
        let stored: String = c
            .query_one("SELECT key FROM idem_lookup($1, $2)", &[&sc, &fits])
            .unwrap()
            .get(0);
        assert_eq!(stored, fits);
    }
    drop(c);
}

/// A response of `n` string bytes under key "s": `{"s": "<n bytes>"}`, with `last` as its
/// final character (so one 2-byte character makes it one byte longer, not one longer in
/// characters).
fn response_text(n: usize, last: &str) -> String {
    format!(r#"{{"s":"{}{last}"}}"#, "x".repeat(n))
}

/// What the response takes as jsonb, as the limit counts it (without the varlena header).
fn jsonb_bytes(c: &mut Client, text: &str) -> usize {
    let n: i32 = c
        .query_one("SELECT pg_column_size($1::text::jsonb) - 4", &[&text])
        .unwrap()
        .get(0);
    n as usize
}

#[test]
fn responses_are_refused_one_byte_over_the_limit_before_any_write() {
    let db = Db::fresh("sizes_response");
    let mut c = db.connect();
    let sc = scope("responses");
    // The jsonb overhead of {"s": ""}, so that the string makes up the rest exactly.
    let overhead = jsonb_bytes(&mut c, &response_text(0, ""));
    let fill = MAX_RESPONSE_BYTES - overhead;
    let at_limit = response_text(fill - 1, "x");
    let over_by_one = response_text(fill - 1, "\u{e9}"); // as many characters, one byte more
    assert_eq!(jsonb_bytes(&mut c, &at_limit), MAX_RESPONSE_BYTES);
    assert_eq!(jsonb_bytes(&mut c, &over_by_one), MAX_RESPONSE_BYTES + 1);
    let big = format!(r#"{{"s":"{}"}}"#, "y".repeat(8 * MAX_RESPONSE_BYTES));

    let held = begin(&mut c, &sc, "k");
    let fence = held.fence.unwrap();
    for (what, response) in [("one byte over", &over_by_one), ("eight times over", &big)] {
        refused_unchanged(&mut c, "IK004", what, |c| {
            complete(c, &sc, "k", fence, response).map(|_| ())
        });
        // A failure to cache is checked the same way.
        refused_unchanged(&mut c, "IK004", what, |c| {
            c.query_one(
                "SELECT * FROM idem_complete($1, 'k', $2, $3::text::jsonb, false, true)",
                &[&sc, &fence, response],
            )
            .map(|_| ())
        });
    }
    // The claim is intact: the same fence stores a response at the limit.
    assert_eq!(
        complete(&mut c, &sc, "k", fence, &at_limit).unwrap(),
        "succeeded"
    );
    let replay = begin(&mut c, &sc, "k");
    assert_eq!(replay.outcome, "replay");
    assert_eq!(
        jsonb_bytes(&mut c, replay.response.as_deref().unwrap()),
        MAX_RESPONSE_BYTES
    );
    drop(c);
}

/// A request is hashed, not stored: one of 16 MB claims, stores 32 bytes, and replays.
#[test]
fn large_requests_store_only_their_fingerprint() {
    let db = Db::fresh("sizes_request");
    let mut c = db.connect();
    let sc = scope("requests");
    let request = format!(r#"{{"blob":"{}"}}"#, "r".repeat(16 << 20));
    let b = try_begin(&mut c, &sc, "k", Some(&request), None, None).unwrap();
    assert_eq!(b.outcome, "claimed");
    let row = c
        .query_one(
            "SELECT length(fingerprint), fingerprint = idem_hash($2::text::jsonb), \
                    pg_column_size(r.*) < 1024 \
             FROM idempotency.records r WHERE scope = $1",
            &[&sc, &request],
        )
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 32);
    assert!(
        row.get::<_, bool>(1),
        "fingerprint is not the request's hash"
    );
    assert!(
        row.get::<_, bool>(2),
        "the record holds more than its fingerprint"
    );
    complete(&mut c, &sc, "k", b.fence.unwrap(), "{}").unwrap();
    let replay = try_begin(&mut c, &sc, "k", Some(&request), None, None).unwrap();
    assert_eq!(replay.outcome, "replay");
    drop(c);
}
