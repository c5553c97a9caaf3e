"""What the sync and async paths of a decorated call share: the settings resolved for the
call, its key and request, and the answers that need no running (replays, refusals)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from . import _sql
from .answers import Begin
from .context import CallContext, Lease
from .errors import InProgress, OutcomeUnknown, ToolFailed, Unrecorded
from .keys import explicit_key, request_of
from .marks import mark_of
from .settings import Idempotent, KeyStrategy, OnCacheHit, UnknownOutcome
from .store import _Calls

DEFAULT_LEASE = 60.0  # the server's pg_idempotency.default_lease, for the heartbeat's pace


class Plan:
    """One call's settings, key and request. A plain class with slots: made on every call,
    a replay's included (a dataclass's init was a measurable part of a replay's cost)."""

    __slots__ = ("input", "key", "request_json", "scope", "sent", "settings", "strategy")

    def __init__(self, settings: Idempotent, strategy: KeyStrategy, scope: str,
                 key: str | None, request_json: str | None, input: dict[str, Any],
                 sent: tuple[Any, ...] = ()) -> None:
        self.settings, self.strategy, self.scope = settings, strategy, scope
        self.key, self.request_json, self.input = key, request_json, input
        self.sent = sent
        """What the call sends of its settings (Store._claim), made once per function."""

    @staticmethod
    def sent_of(settings: Idempotent) -> tuple[Any, ...]:
        """Only what is set, so that the scope's policy governs the rest."""
        s = settings
        return _Calls.sent(s.ttl, s.lease, s.on_cache_hit, s.on_mismatch, s.wait,
                           s.unresolved_ttl)

    @staticmethod
    def of(settings: Idempotent, scope: str, input: dict[str, Any], receiver: Any,
           sent: tuple[Any, ...] | None = None) -> Plan:
        strategy = settings.strategy or KeyStrategy.HASH_INPUT
        key = None
        if strategy is KeyStrategy.EXPLICIT:
            key = explicit_key(settings, input, receiver, scope)
        elif strategy is KeyStrategy.UUID:
            key = str(uuid.uuid4())
        request_json = None
        if strategy is KeyStrategy.HASH_INPUT or strategy is KeyStrategy.EXPLICIT:
            request = request_of(settings, strategy, input)
            if request is not None:
                request_json = _sql.dumps(request)
        return Plan(settings, strategy, scope, key, request_json, input,
                    Plan.sent_of(settings) if sent is None else sent)

    def begin_kwargs(self) -> dict[str, Any]:
        """What the call sends: only what is set, so that the scope's policy governs the rest."""
        s = self.settings
        return dict(ttl=s.ttl, lease=s.lease, on_cache_hit=s.on_cache_hit,
                    on_mismatch=s.on_mismatch, wait=s.wait, unresolved_ttl=s.unresolved_ttl)

    def lease_seconds(self, claim: Begin) -> float:
        if claim.lease_left is not None and claim.lease_left > 0:
            return claim.lease_left
        return self.settings.lease or DEFAULT_LEASE

    def context(self, claim: Begin) -> CallContext:
        return CallContext(scope=self.scope, key=claim.key, fence=claim.fence,
                           attempt=claim.attempt, recovered=claim.recovered,
                           upstream_key=claim.upstream_key or claim.key, lease=Lease(),
                           input=self.input)

    def uuid_context(self) -> CallContext:
        assert self.key is not None
        return CallContext(scope=self.scope, key=self.key, fence=None, attempt=1,
                           recovered=False, upstream_key=self.key, input=self.input)

    def unknown_outcome(self) -> UnknownOutcome | Callable[..., Any]:
        return self.settings.on_unknown_outcome or UnknownOutcome.RERUN


NOT_A_REPLAY = object()


def replayed(row: tuple[Any, ...], decode: Callable[[Any], Any]) -> Any:
    """The value of a success replayed (most repeats), read from idem_begin's row without
    building a Begin (a tenth of a replay's cost); NOT_A_REPLAY for any other answer."""
    # Begin.from_row's order: outcome, fence, attempt, recovered, upstream_key, succeeded,
    # response, ...
    if row[0] != "replay" or row[5] is not True:
        return NOT_A_REPLAY
    value = _sql.loads(row[6])
    if mark_of(value) is not None:
        return NOT_A_REPLAY
    return decode(value)


def answer(claim: Begin, decode: Callable[[Any], Any]) -> Any:
    """A replay's value, or the error a replay or an in-progress answer is."""
    if claim.outcome == "in_progress":
        raise InProgress(
            "the call is running elsewhere",
            detail=f"Its lease ends in {claim.retry_after} at most."
            if claim.retry_after is not None else None,
            hint="retry after retry_after, or give the decorator wait= so that a duplicate "
            "waits for the first call's result",
            retry_after=claim.retry_after,
        )
    mark = mark_of(claim.response)
    if mark is not None:
        kind, why = mark
        if kind == "unrecorded":
            raise Unrecorded(
                "the call ran, but its result could not be recorded",
                detail=why, replayed=True,
                hint="the effect happened; an operator's idem_forget lets the call run again",
            )
        raise OutcomeUnknown(
            "an earlier attempt of this call may have acted, and the call is refused",
            detail=why,
            hint="an operator resolves it: SELECT * FROM idem_unresolved(), then idem_resolve",
        )
    if claim.succeeded is False:
        resp = claim.response
        message = resp.get("error") if isinstance(resp, dict) else None
        raise ToolFailed(
            f"the call failed before, and its failure is remembered: {message or resp!r}",
            response=resp,
            hint="cache_failures=True keeps a failure for its ttl; "
            "on_cache_hit=RETURN_CACHED_IF_SUCCESS runs a failed call again",
        )
    return decode(claim.response)


def failure_response(e: BaseException) -> Any:
    # An error may say what to remember of it (a web action's {"status", "body"}).
    own = getattr(e, "recorded_response", None)
    if own is not None:
        return own
    # U+0000 cannot be stored: a message holding it is kept with U+FFFD in its place.
    message = (str(e) or type(e).__name__).replace("\x00", "\ufffd")
    return {"error": message, "type": type(e).__qualname__}


def leaves_claim(e: BaseException) -> bool:
    """A failure that may have had its effect (a request sent and never answered, a 409 to
    the record's key while the provider still runs it) is neither remembered nor released:
    the claim lapses, and the attempt that takes it over keeps the upstream key and decides
    by on_unknown_outcome (the Rust client's FailureRecord::Abandon)."""
    return getattr(e, "leaves_claim", False) is True


def caches_failures(settings: Idempotent) -> bool | None:
    return settings.cache_failures


def fail_fast(settings: Idempotent) -> bool:
    return settings.on_cache_hit is OnCacheHit.FAIL_FAST
