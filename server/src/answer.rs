//! The layer's own answers: problems, replays, and the problems the parts do not name.
//!
//! What a problem says is for the caller: what happened and what to do, in the layer's own
//! fixed words. What went wrong inside (a connection's error, a stored record's damage, a
//! handler's body error) is the operator's, in the log where the problem is made.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{Either, Full};

use crate::body::ResponseBody;
use crate::headers::ReplayHeaders;
use crate::problem::Problem;
use crate::stored::StoredResponse;

pub fn problem<B>(p: Problem) -> Response<ResponseBody<B>> {
    held(p.into_stored().into_response())
}

pub fn replay<B>(stored: &StoredResponse, kept: &ReplayHeaders) -> Response<ResponseBody<B>> {
    held(stored.replay(kept))
}

pub fn held<B>(r: Response<Bytes>) -> Response<ResponseBody<B>> {
    r.map(|b| Either::Right(Full::new(b)))
}

/// A request body that could not be read (the connection broke, a malformed chunk).
pub fn unreadable_body() -> Problem {
    Problem {
        status: StatusCode::BAD_REQUEST,
        title: "The request body could not be read".into(),
        detail: "The request body ended early or was malformed; nothing was run.".into(),
        hint: Some("Send the request again with the same Idempotency-Key.".into()),
        retry_after: None,
        kind: "unreadable-body",
    }
}

/// The handler panicked: nothing is remembered, a retry runs it again.
pub fn handler_panicked() -> Problem {
    Problem {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        title: "The request failed".into(),
        detail: "The handler stopped before answering; nothing was remembered under this key."
            .into(),
        hint: Some("Send the request again with the same Idempotency-Key.".into()),
        retry_after: None,
        kind: "handler-failed",
    }
}

/// The handler's answer broke off while the layer read it.
pub fn answer_broke() -> Problem {
    Problem {
        status: StatusCode::BAD_GATEWAY,
        title: "The answer could not be read".into(),
        detail: "The service's answer broke off before it was complete; nothing was remembered under this key.".into(),
        hint: Some("Send the request again with the same Idempotency-Key.".into()),
        retry_after: None,
        kind: "answer-broke",
    }
}

/// A remembered answer the layer cannot read back (written by something else).
pub fn unreadable_record() -> Problem {
    Problem {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        title: "The remembered answer cannot be replayed".into(),
        detail: "The request with this Idempotency-Key was run before, and its answer cannot be read back.".into(),
        hint: Some(
            "Ask the service's operator to remove the remembered answer of this key, so that the request runs again."
                .into(),
        ),
        retry_after: None,
        kind: "unreadable-record",
    }
}
