"""Errors: one small hierarchy, a class per SQLSTATE of the SQL API (docs/errors.md) and per
decision the decorator takes. Every error keeps the server's detail and hint."""

from __future__ import annotations

from datetime import timedelta
from typing import Any


class IdempotencyError(Exception):
    """Base of every error this package raises. `sqlstate`, `detail` and `hint` come from the
    server when it refused the call (None for the decorator's own decisions)."""

    sqlstate: str | None = None

    def __init__(
        self,
        message: str,
        *,
        detail: str | None = None,
        hint: str | None = None,
        sqlstate: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.hint = hint
        if sqlstate is not None:
            self.sqlstate = sqlstate

    def __str__(self) -> str:
        parts = [self.message]
        if self.detail:
            parts.append(f"DETAIL: {self.detail}")
        if self.hint:
            parts.append(f"HINT: {self.hint}")
        return "\n".join(parts)


class InvalidArgument(IdempotencyError, ValueError):
    """22023: a blank or over-long key or scope, a bad duration, an unknown policy word; and
    the decorator's own refusals (a blank EXPLICIT key, settings that cannot work)."""

    sqlstate = "22023"


class Mismatch(IdempotencyError):
    """IK001: the key was used before with a different request."""

    sqlstate = "IK001"


class RepeatRefused(IdempotencyError):
    """IK002: `on_cache_hit=FAIL_FAST` and the call was already made."""

    sqlstate = "IK002"


class LeaseLost(IdempotencyError):
    """IK003: the fence no longer holds the record (another attempt took the call over, or
    an operator forgot it). `response` is the function's result when it had returned one:
    it is not recorded; the record keeps the attempt that holds it."""

    sqlstate = "IK003"

    def __init__(self, message: str, *, response: Any = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.response = response


class ResponseTooLarge(IdempotencyError):
    """IK004: the response is larger than the server's pg_idempotency.max_response_bytes."""

    sqlstate = "IK004"


class Uncanonicalizable(IdempotencyError):
    """IK005: the request has no canonical form (nested deeper than 128 levels, U+0000)."""

    sqlstate = "IK005"


class GrantRoleCaller(IdempotencyError):
    """IK006: the call was made as a grant role (idempotency_user, idempotency_admin), which
    owns no records: connect as the application's own role."""

    sqlstate = "IK006"


class NotPermitted(IdempotencyError):
    """42501: the role may not do this (another role's records, or no idempotency_user)."""

    sqlstate = "42501"


class Contention(IdempotencyError):
    """40001: the record kept changing, or a serialization failure (a duplicate under
    REPEATABLE READ): retry the call, or its transaction."""

    sqlstate = "40001"


class NotInstalled(IdempotencyError):
    """The SQL API is not installed where the store looks (42883; 3F000: no such schema), or
    not ready (55000)."""


class StoreUnavailable(IdempotencyError):
    """The database could not be reached, or answered with an error no other class names.
    The original driver exception is the `__cause__`."""


class InProgress(IdempotencyError):
    """The call is running elsewhere. Ask again after `retry_after`, or give the decorator
    a `wait` so that a duplicate waits for the first call's result."""

    def __init__(self, message: str, *, retry_after: timedelta | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ToolFailed(IdempotencyError):
    """A remembered failure is replayed (`cache_failures=True`): the function is not run
    again. `response` is what was stored for it (`{"error": ..., "type": ...}` from this
    package, or another client's)."""

    def __init__(self, message: str, *, response: Any = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.response = response


class Unrecorded(IdempotencyError):
    """The function ran (its effect happened) but its result is not recorded: the store
    could not keep it (too large, U+0000) or could not be reached in time. `response` is
    the result where this attempt has it; `replayed` is True when this call did not run the
    function (a retry told of an earlier attempt whose result could not be kept)."""

    def __init__(
        self, message: str, *, response: Any = None, replayed: bool = False, **kw: Any
    ) -> None:
        super().__init__(message, **kw)
        self.response = response
        self.replayed = replayed


class OutcomeUnknown(IdempotencyError):
    """A takeover found that an earlier attempt may have performed the effect, and the
    choice (`on_unknown_outcome="refuse"`, or a reconcile read that could not tell) is to
    refuse: every retry gets this until an operator resolves or forgets the record."""


# One class per SQLSTATE the SQL API raises; anything else is StoreUnavailable.
BY_SQLSTATE: dict[str, type[IdempotencyError]] = {
    "22023": InvalidArgument,
    "IK001": Mismatch,
    "IK002": RepeatRefused,
    "IK003": LeaseLost,
    "IK004": ResponseTooLarge,
    "IK005": Uncanonicalizable,
    "IK006": GrantRoleCaller,
    "42501": NotPermitted,
    "40001": Contention,
    "40P01": Contention,
    "42883": NotInstalled,
    "3F000": NotInstalled,
    "55000": NotInstalled,
}


def from_sqlstate(
    sqlstate: str | None, message: str, detail: str | None, hint: str | None
) -> IdempotencyError:
    """The error of the class that names `sqlstate` (StoreUnavailable for any other)."""
    cls = BY_SQLSTATE.get(sqlstate or "", StoreUnavailable)
    if cls is NotInstalled and sqlstate in ("42883", "3F000") and not hint:
        hint = (
            "Install the SQL API in this database: CREATE EXTENSION pg_idempotency (or the "
            "portable SQL, docs/installation.md), or name its schema: Store(..., schema=...)"
        )
    return cls(message, detail=detail, hint=hint, sqlstate=sqlstate)
