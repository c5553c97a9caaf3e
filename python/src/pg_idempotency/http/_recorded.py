"""What is recorded of an answer, and how a record is given back: `{"status": 201, "body":
...}` (the body's JSON, else its text, then marked `"text": true`); never its headers,
which may carry a session. A status other than 2xx is a `StatusError`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

EXTENSION = "pg_idempotency"


@dataclass(frozen=True)
class CallInfo:
    """What a deduplicated call's response says of its record (`call_info(response)`).

    - `scope`, `key`: the record's name (under UUID, the call's fresh key)
    - `upstream_key`: the Idempotency-Key this attempt sent (None: a replay, or a read)
    - `replayed`: the response is the record's, and nothing was sent
    """

    scope: str
    key: str
    upstream_key: str | None
    replayed: bool


def call_info(response: httpx.Response) -> CallInfo | None:
    """The record a response of `Actions` or `AsyncActions` belongs to (None: a call that
    was not deduplicated)."""
    info = response.extensions.get(EXTENSION)
    return info if isinstance(info, CallInfo) else None


def _no_constants(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity cannot be stored: the body is kept as text


def record_of(response: httpx.Response) -> dict[str, Any]:
    """The answer as it is recorded (a success) or remembered (a failure, cache_failures)."""
    text = response.text
    try:
        return {"status": response.status_code,
                "body": json.loads(text, parse_constant=_no_constants)}
    except ValueError:
        return {"status": response.status_code, "body": text, "text": True}


def response_of(record: Any, request: httpx.Request, info: CallInfo) -> httpx.Response:
    """A response rebuilt from a record; a record that is not `{"status", "body"}` (another
    client's, or a reconcile read's finding) is a 200 with that JSON."""
    if isinstance(record, dict) and isinstance(record.get("status"), int) and "body" in record:
        status, body = record["status"], record["body"]
        text = record.get("text") is True and isinstance(body, str)
    else:
        status, body, text = 200, record, False
    if text:
        response = httpx.Response(status, text=body, request=request)
    else:
        response = httpx.Response(status, json=body, request=request)
    response.extensions[EXTENSION] = info
    return response


class StatusError(httpx.HTTPStatusError):
    """The provider answered with a status other than 2xx (as `raise_for_status()` would
    say). `response` is the answer (rebuilt from the record when `replayed`).

    - `retryable`: another attempt may get another answer: a 5xx, a 429, or a 409 to a
      request that carried Idempotency-Key (the provider still runs that key)
    - `retry_after`: the provider's Retry-After (seconds or an HTTP date) on a retryable
      answer, else None
    - `replayed`: a remembered failure (cache_failures); the provider was not called
    """

    def __init__(self, response: httpx.Response, *, keyed: bool = False,
                 replayed: bool = False) -> None:
        request = response.request
        status = response.status_code
        self.retryable = not replayed and (
            status >= 500 or status == 429 or (keyed and status == 409))
        self.retry_after = retry_after(response) if self.retryable else None
        self.replayed = replayed
        said = f"{request.method} {request.url} answered {status} {response.reason_phrase}"
        if replayed:
            said += " (remembered: the provider was not called again)"
        elif self.retryable:
            said += " (worth retrying" + (
                f" after {self.retry_after.total_seconds():g} s)" if self.retry_after else ")")
        super().__init__(said, request=request, response=response)
        # What the core remembers of it under cache_failures: the same as the Rust client.
        self.recorded_response = record_of(response)
        self.leaves_claim = False


def retry_after(response: httpx.Response) -> timedelta | None:
    """Retry-After (RFC 9110, 10.2.3): seconds, or an HTTP date (a past one is no wait);
    anything else is no advice."""
    value = response.headers.get("retry-after", "").strip()
    if value.isascii() and value.isdigit():
        return timedelta(seconds=min(int(value), 10**9))
    try:
        at = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return max(at - datetime.now(timezone.utc), timedelta(0))
