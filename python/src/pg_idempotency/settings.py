"""The decorator's members: the Java framework's `@Idempotent` (strategy, ttl, on_cache_hit,
cache_failures) and the ones the Rust client added (lease, wait, on_mismatch,
on_unknown_outcome, fingerprint, unresolved_ttl). Every member is unset by default: an
unset store setting is not sent, so a scope's policy in the database (idem_set_policy)
governs the call, then the server's settings (docs/client.md, "Which setting governs a
call")."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Any


class KeyStrategy(enum.Enum):
    """How the key is derived from the call."""

    HASH_INPUT = "hash_input"
    """SHA-256 of the canonical JSON of the arguments (computed by the server)."""
    EXPLICIT = "explicit"
    """A key function, named fields, or the class's `idempotency_key_for(input)`."""
    UUID = "uuid"
    """A fresh key per call, sent upstream as Idempotency-Key; nothing deduplicated here."""
    NONE = "none"
    """No protection: the function runs on every call."""


class OnCacheHit(enum.Enum):
    """What a repeat of a remembered call gets."""

    RETURN_CACHED = "return_cached"
    RETURN_CACHED_IF_SUCCESS = "return_cached_if_success"
    FAIL_FAST = "fail_fast"


class OnMismatch(enum.Enum):
    """A repeat whose fingerprint differs from the first call's."""

    REJECT = "reject"
    IGNORE = "ignore"


class UnknownOutcome(enum.Enum):
    """What a takeover of a call whose earlier attempt may have acted does (a reconcile read
    is given as a function instead: see `Idempotent.on_unknown_outcome`)."""

    RERUN = "rerun"
    REFUSE = "refuse"


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"pg_idempotency.{self.name}"


NOT_FOUND: Any = _Sentinel("NOT_FOUND")
"""A reconcile read's answer: the earlier attempt did not act; the function runs."""
UNKNOWN: Any = _Sentinel("UNKNOWN")
"""A reconcile read's answer: it cannot tell; the call is refused as OutcomeUnknown."""


@dataclass(frozen=True)
class Reconcile:
    """What a reconcile read is given: the call's input, key and the dead attempt's
    upstream key (the Idempotency-Key it sent upstream), and this attempt's number."""

    input: dict[str, Any]
    scope: str
    key: str
    upstream_key: str
    attempt: int


Seconds = int | float | timedelta
KeyFunction = Callable[..., str]
ReconcileRead = Callable[[Reconcile], Any]


def as_seconds(value: Seconds | None, name: str) -> float | None:
    """A duration as seconds; a timedelta or a number of seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        from .errors import InvalidArgument

        raise InvalidArgument(
            f"{name} must be a number of seconds or a timedelta",
            detail=f"{name} is {value!r}.",
            hint="ttl=86_400 or ttl=timedelta(days=1)",
        )
    secs = value.total_seconds() if isinstance(value, timedelta) else float(value)
    return secs


@dataclass(frozen=True)
class Idempotent:
    """The settings of one function (or, on a class, of its methods). See the decorator."""

    strategy: KeyStrategy | None = None
    ttl: float | None = None
    on_cache_hit: OnCacheHit | None = None
    cache_failures: bool | None = None
    lease: float | None = None
    wait: float | None = None
    on_mismatch: OnMismatch | None = None
    on_unknown_outcome: UnknownOutcome | ReconcileRead | None = None
    unresolved_ttl: float | None = None
    key: KeyFunction | None = None
    key_fields: tuple[str, ...] = ()
    fingerprint: str | tuple[str, ...] | None = None
    scope: str | None = None
    exclude: tuple[str, ...] = ()
    exactly_once: str | None = None
    _set: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @staticmethod
    def of(**members: Any) -> Idempotent:
        """Settings from the decorator's keywords, checked and normalised."""
        from .errors import InvalidArgument

        names = {f.name for f in fields(Idempotent) if not f.name.startswith("_")}
        unknown = set(members) - names
        if unknown:
            raise InvalidArgument(
                f"@idempotent got unknown member(s): {', '.join(sorted(unknown))}",
                hint=f"the members are: {', '.join(sorted(names))}",
            )
        given = {k: v for k, v in members.items() if v is not None and v != ()}
        for name in ("ttl", "lease", "wait", "unresolved_ttl"):
            if name in given:
                given[name] = as_seconds(given[name], name)
        enums: dict[str, type[enum.Enum]] = {
            "strategy": KeyStrategy,
            "on_cache_hit": OnCacheHit,
            "on_mismatch": OnMismatch,
        }
        for name, kind in enums.items():
            if name in given:
                given[name] = _enum_of(kind, given[name], name)
        if "on_unknown_outcome" in given and not callable(given["on_unknown_outcome"]):
            given["on_unknown_outcome"] = _enum_of(
                UnknownOutcome, given["on_unknown_outcome"], "on_unknown_outcome"
            )
        for name in ("key_fields", "exclude"):
            if name in given:
                given[name] = _names(given[name], name)
        if "fingerprint" in given and given["fingerprint"] != "input":
            given["fingerprint"] = _names(given["fingerprint"], "fingerprint")
        if "key" in given and not callable(given["key"]):
            raise InvalidArgument(
                "key must be a function of the call's arguments that returns the key",
                detail=f"key is {given['key']!r}.",
                hint="key=lambda order_id, **_: order_id, or key_fields=['order_id']",
            )
        # A key function or named fields mean EXPLICIT; they name no other strategy.
        if ("key" in given or "key_fields" in given) and given.setdefault(
            "strategy", KeyStrategy.EXPLICIT
        ) is not KeyStrategy.EXPLICIT:
            raise InvalidArgument(
                "key= and key_fields= name the key of an EXPLICIT strategy",
                detail=f"strategy is {given['strategy'].name}.",
                hint="drop strategy=, or the key function",
            )
        if "key" in given and "key_fields" in given:
            raise InvalidArgument("give key= or key_fields=, not both")
        settings = Idempotent(**given)
        return replace(settings, _set=frozenset(given))

    def is_set(self, name: str) -> bool:
        return name in self._set


def _enum_of(kind: type[enum.Enum], value: Any, name: str) -> Any:
    from .errors import InvalidArgument

    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        for member in kind:
            if value.lower() in (member.value, member.name.lower()):
                return member
    raise InvalidArgument(
        f"{name} must be one of {', '.join(m.name for m in kind)}",
        detail=f"{name} is {value!r}.",
        hint=f"{name}={kind.__name__}.{next(iter(kind)).name}",
    )


def _names(value: Any, name: str) -> tuple[str, ...]:
    from .errors import InvalidArgument

    items: Sequence[Any] = (value,) if isinstance(value, str) else value
    if not items or not all(isinstance(i, str) and i for i in items):
        raise InvalidArgument(
            f"{name} must name fields (dotted paths into the arguments)",
            detail=f"{name} is {value!r}.",
            hint=f"{name}=['order.id', 'customer']",
        )
    return tuple(items)
