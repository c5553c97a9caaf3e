//! The layer's own answers: problems, replays, and the problems the parts do not name.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{Either, Full};

use crate::body::ResponseBody;
use crate::problem::Problem;
use crate::stored::StoredResponse;

pub fn problem<B>(p: Problem) -> Response<ResponseBody<B>> {
    held(p.into_stored().into_response())
}

pub fn replay<B>(stored: &StoredResponse) -> Response<ResponseBody<B>> {
    held(stored.replay())
}

pub fn held<B>(r: Response<Bytes>) -> Response<ResponseBody<B>> {
    r.map(|b| Either::Right(Full::new(b)))
}

/// A request body that could not be read (the connection broke, a malformed chunk).
pub fn unreadable_body(detail: String) -> Problem {
    Problem {
        status: StatusCode::BAD_REQUEST,
        title: "The request body could not be read".into(),
        detail,
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
pub fn answer_broke(detail: String) -> Problem {
    Problem {
        status: StatusCode::BAD_GATEWAY,
        title: "The answer could not be read".into(),
        detail,
        hint: Some("Send the request again with the same Idempotency-Key.".into()),
        retry_after: None,
        kind: "answer-broke",
    }
}

/// A remembered answer the layer cannot read back (written by something else).
pub fn unreadable_record(detail: String) -> Problem {
    Problem {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        title: "The remembered answer cannot be replayed".into(),
        detail,
        hint: Some(
            "An operator can remove the record (idem_forget) so that the request runs again."
                .into(),
        ),
        retry_after: None,
        kind: "unreadable-record",
    }
}
