"""What the running function can see of its call: `current_call()` inside a decorated
function (a contextvar, so threads and asyncio tasks each see their own call)."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

from .errors import LeaseLost


class Lease:
    """The claim's lease as the heartbeat knows it. `lost`: the store refused the heartbeat
    (another attempt took the call over, or an operator forgot it); `unconfirmed`: the
    heartbeat could not reach the store until the lease ended (another attempt may take the
    call over now). A heartbeat that fails while the lease still runs is neither."""

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state = "held"

    @property
    def state(self) -> str:
        """`held`, `lost` or `unconfirmed`."""
        return self._state

    @property
    def is_lost(self) -> bool:
        return self._state != "held"

    def _set(self, state: str) -> None:
        if self._state == "held":
            self._state = state

    def _held_again(self) -> None:
        if self._state == "unconfirmed":
            self._state = "held"

    def ensure(self) -> None:
        """Raise LeaseLost unless the lease is held: call it before an irreversible step.
        The call is released, never remembered as failed: it did not run its effect."""
        if self._state == "lost":
            raise LeaseLost(
                "the lease is lost: another attempt holds the call",
                detail="The store refused the heartbeat: the call was taken over or forgotten.",
                hint="stop before the effect; the attempt that holds the call records it",
            )
        if self._state == "unconfirmed":
            raise LeaseLost(
                "the lease is unconfirmed: the store could not be reached until it ended",
                detail="Another attempt may take the call over now.",
                hint="stop before the effect; a retry takes the call over under its choice "
                "for an unknown outcome",
            )


@dataclass(frozen=True)
class CallContext:
    """The call a decorated function is running for.

    - `scope`, `key`: the record's name (the key as the server derived it, under HASH_INPUT)
    - `fence`: the claim's token (None for UUID calls, which claim nothing)
    - `attempt`: 1, then one more per takeover
    - `recovered`: an earlier attempt's lease lapsed before it recorded anything: it may
      have acted (the function runs because `on_unknown_outcome` said rerun or a reconcile
      read found nothing)
    - `upstream_key`: the same on every attempt, a takeover included: send it upstream as
      `Idempotency-Key` (the UUID strategy's fresh key)
    - `lease`: held, lost or unconfirmed (`current_call().lease.ensure()`)
    - `input`: the arguments the key was derived from, by name
    """

    scope: str
    key: str
    fence: int | None
    attempt: int
    recovered: bool
    upstream_key: str
    lease: Lease = field(default_factory=Lease)
    input: dict[str, Any] = field(default_factory=dict)


_CURRENT: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "pg_idempotency_call", default=None
)


def current_call() -> CallContext:
    """The call being run. Raises LookupError outside a decorated function."""
    ctx = _CURRENT.get()
    if ctx is None:
        raise LookupError("no idempotent call is running here: current_call() is available "
                          "inside a function decorated with @idempotent")
    return ctx


def maybe_current_call() -> CallContext | None:
    """The call being run, or None outside a decorated function."""
    return _CURRENT.get()
