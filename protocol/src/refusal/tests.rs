//! The refusals' exact words, on both sides of the API.

use super::*;

/// The refusal has exactly these words.
fn assert_words(r: &Refusal, code: ErrorCode, message: &str, detail: &str, hint: &str) {
    assert_eq!((r.code, r.message), (code, message));
    assert_eq!(r.detail, detail);
    assert_eq!(r.hint, hint);
}

#[test]
fn a_mismatch_shows_both_fingerprints() {
    assert_words(
        &mismatch(&[0x00, 0x1f, 0xab], &[0xff; 2]),
        ErrorCode::Mismatch,
        "idempotency key reused with a different request",
        "The key was first used with a request of fingerprint \\x001fab; this request's fingerprint is \\xffff.",
        "Use a new key for a different request, or on_mismatch => 'ignore' when only part of the request names the call.",
    );
}

#[test]
fn a_refused_repeat_names_the_lookup_of_its_api() {
    let message = "repeat of a completed call refused";
    assert_words(
        &repeat_refused(State::Succeeded, 3, Api::Sql),
        ErrorCode::RepeatRefused,
        message,
        "The call succeeded at attempt 3; on_cache_hit is 'fail_fast'.",
        "Look at the stored result with idem_lookup, or use a new key to run the call again.",
    );
    assert_words(
        &repeat_refused(State::Failed, 1, Api::Client),
        ErrorCode::RepeatRefused,
        message,
        "The call failed at attempt 1; on_cache_hit is 'fail_fast'.",
        "Look at the stored result with lookup, or use a new key to run the call again.",
    );
}

#[test]
fn each_lost_lease_has_its_detail() {
    let rows = [
        (
            Lost::Absent,
            Api::Sql,
            "The key has no live record: it was released, forgotten, never claimed, or it expired.",
        ),
        (
            Lost::LaterFence,
            Api::Sql,
            "The record is held under a later fence: the call was taken over or claimed again.",
        ),
        (
            Lost::OtherFence,
            Api::Client,
            "The record is held under a different fence.",
        ),
        (
            Lost::ReleaseCompleted,
            Api::Sql,
            "The call was already completed; idem_forget removes a stored result.",
        ),
        (
            Lost::ReleaseCompleted,
            Api::Client,
            "The call was already completed; forget removes a stored result.",
        ),
        (
            Lost::ExtendCompleted,
            Api::Client,
            "The call was already completed; there is no lease to extend.",
        ),
    ];
    for (why, api, detail) in rows {
        let r = lease_lost(why, api);
        assert_eq!(r.code, ErrorCode::LeaseLost);
        assert_eq!(r.message, "lease lost: this fence does not hold the record");
        assert_eq!(r.detail, detail, "{why:?} {api:?}");
    }
    assert_eq!(
        lease_lost(Lost::Absent, Api::Sql).hint,
        "Another attempt took the call over, or it was completed, released or expired; do not apply this attempt's result. Call idem_begin again to learn the call's state."
    );
    assert_eq!(
        lease_lost(Lost::Absent, Api::Client).hint,
        "Another attempt took the call over, or it was completed, released or expired; do not apply this attempt's result. Call begin again to learn the call's state."
    );
}

#[test]
fn contention_counts_the_races() {
    assert_words(
        &contention(),
        ErrorCode::Contention,
        "could not settle the record: it kept changing",
        "1000 concurrent changes to this key overtook this call.",
        "Retry the call.",
    );
}
