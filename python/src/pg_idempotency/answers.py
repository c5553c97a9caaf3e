"""What the store's calls answer: plain dataclasses, the same for every driver."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from ._sql import loads
from .errors import IdempotencyError

Outcome = Literal["claimed", "replay", "in_progress"]


@dataclass(frozen=True)
class Begin:
    """idem_begin's answer. `fence` is set only when claimed (a duplicate never learns the
    holder's token); `response`/`succeeded` only on a replay; `retry_after` only while in
    progress. `key` is the call's key (derived by the server under HASH_INPUT)."""

    outcome: Outcome
    key: str
    fence: int | None
    attempt: int
    recovered: bool
    upstream_key: str | None
    succeeded: bool | None
    response: Any
    lease_until: datetime | None
    expires_at: datetime | None
    retry_after: timedelta | None
    lease_left: float | None = None
    """Seconds of the lease left when the server answered (claimed calls)."""

    @staticmethod
    def from_row(row: tuple[Any, ...]) -> Begin:
        (outcome, fence, attempt, recovered, upstream_key, succeeded, response, lease_until,
         expires_at, retry_after, key, lease_left) = row
        return Begin(
            outcome=outcome,
            key=key,
            fence=fence,
            attempt=attempt,
            recovered=bool(recovered),
            upstream_key=upstream_key,
            succeeded=succeeded,
            response=loads(response),
            lease_until=lease_until,
            expires_at=expires_at,
            retry_after=None if retry_after is None else timedelta(seconds=retry_after),
            lease_left=lease_left,
        )


@dataclass(frozen=True)
class Record:
    """idem_lookup's row: the record of a call until it expires."""

    state: str
    fence: int
    attempt: int
    upstream_key: str
    response: Any
    created_at: datetime
    completed_at: datetime | None
    lease_until: datetime | None
    expires_at: datetime


@dataclass(frozen=True)
class BatchItem:
    """One item of a batch claim: its key (None: derived from `request`, HASH_INPUT), its
    request (fingerprinted), and its claim token (repeat a batch whose answer was lost)."""

    key: str | None = None
    request: Any = None
    claim_token: str | None = None


@dataclass(frozen=True)
class BatchCompletion:
    """One item of a batch completion: the claim's key and fence, and what to record."""

    key: str
    fence: int
    response: Any
    succeeded: bool = True
    cache_failure: bool | None = None


BatchBegin = Begin | IdempotencyError
"""An item's answer: its Begin, or its refusal (Mismatch, RepeatRefused) as a value."""
