"""A decorated `def`'s call: claim, run while a heartbeat thread keeps the lease, record
under the fence (retried while the store is out of reach), or replay. The async twin is
_async_call.py; what they share is _plan.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from . import _sql
from ._beats import FIRST_BEATS
from ._live import LIVE, Holding
from ._plan import NOT_A_REPLAY, Plan, answer, failure_response, leaves_claim, replayed
from .answers import Begin
from .context import _CURRENT, CallContext, Lease
from .errors import (
    Contention,
    IdempotencyError,
    InProgress,
    InvalidArgument,
    LeaseLost,
    OutcomeUnknown,
    ResponseTooLarge,
    StoreUnavailable,
    Unrecorded,
)
from .keys import local_name
from .marks import outcome_unknown, unrecorded
from .settings import NOT_FOUND, UNKNOWN, Reconcile, UnknownOutcome
from .store import Store

# Errors after which the same statement may succeed: the store was out of reach, or busy.
TRANSIENT = (StoreUnavailable, Contention)


class Heartbeat:
    """Extends the lease every third of it until stopped; tells the Lease when the store
    refuses (lost) or cannot be reached until the lease ends (unconfirmed). Its thread
    waits for the first extension, a third of the lease after the claim."""

    def __init__(self, store: Store, claim: Begin, scope: str, lease_s: float,
                 lease: Lease, extend_by: float | None) -> None:
        self.store, self.claim, self.scope = store, claim, scope
        self.lease_s, self.lease, self.extend_by = lease_s, lease, extend_by
        self.every = max(lease_s / 3, 0.01)
        self.lease_end = time.monotonic() + lease_s
        self._stopped = False
        self._wake: threading.Event | None = None  # made with the thread

    def start(self) -> None:
        FIRST_BEATS.add(self, self.every)

    def begin(self) -> None:
        # The Event first, then the flag: stop() reads them the other way round, so one of
        # the two sees the other (and a stopped call starts no thread).
        self._wake = threading.Event()
        if self._stopped:
            return
        threading.Thread(target=self._run, name=f"pg_idempotency heartbeat {self.scope}",
                         daemon=True).start()

    def _run(self) -> None:
        assert self._wake is not None
        while not self._stopped:
            try:
                assert self.claim.fence is not None
                self.store.extend(self.scope, self.claim.key, self.claim.fence, self.extend_by)
                self.lease_end = time.monotonic() + self.lease_s
                self.lease._held_again()
            except LeaseLost:
                self.lease._set("lost")
                return
            except IdempotencyError:
                if time.monotonic() >= self.lease_end:
                    self.lease._set("unconfirmed")
            if self._wake.wait(self.every):
                return

    def stop(self) -> None:
        self._stopped = True
        if self._wake is not None:
            self._wake.set()


def run(store: Store, plan: Plan, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any], decode: Callable[[Any], Any]) -> Any:
    if plan.key is not None or plan.request_json is not None:
        if LIVE.any_in(store.identity, plan.scope):
            held = LIVE.get(store.identity, plan.scope,
                            local_name(plan.scope, plan.key, plan.request_json))
            if held is not None:
                _join(held, plan)
    row = store._claim(plan.scope, plan.key, plan.request_json, plan.sent)
    value = replayed(row, decode)
    if value is not NOT_A_REPLAY:
        return value
    claim = Begin.from_row(row)
    if claim.outcome != "claimed":
        return answer(claim, decode)
    return _hold(store, plan, claim, fn, args, kwargs)


def _join(held: Holding, plan: Plan) -> None:
    """A retry of a call this process holds waits for the holder's recording (up to the
    lease, or `wait` while the function still runs), then asks the store, which replays."""
    if not held.ran.is_set() and not held.ran.wait(plan.settings.wait or 0):
        raise InProgress("the call is running in this process",
                         hint="give the decorator wait= so that a duplicate waits for it")
    held.done.wait(plan.settings.lease or 60.0)
    if not held.recorded and held.has_result and not held.failed:
        raise Unrecorded("the call ran in this process, but its result is not recorded yet",
                         response=held.result, replayed=True,
                         hint="the store could not be reached; the holder keeps trying")


def _hold(store: Store, plan: Plan, claim: Begin, fn: Callable[..., Any],
          args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    assert claim.fence is not None
    ctx = plan.context(claim)
    names = [local_name(plan.scope, claim.key, None)]
    if plan.key is None and plan.request_json is not None:
        names.append(local_name(plan.scope, None, plan.request_json))
    holding = LIVE.add(store.identity, plan.scope, names)
    lease_s = plan.lease_seconds(claim)
    beat = Heartbeat(store, claim, plan.scope, lease_s, ctx.lease, plan.settings.lease)
    beat.start()
    try:
        if claim.recovered:
            found = _unknown_outcome(store, plan, claim, ctx)
            if found is not NOT_FOUND:
                holding.result, holding.recorded = found, True
                return found
        token = _CURRENT.set(ctx)
        try:
            result = fn(*args, **kwargs)
        except Exception as e:
            holding.failed = True
            _record_failure(store, plan, claim, e, beat)
            raise
        finally:
            _CURRENT.reset(token)
        holding.result = result
        holding.set_ran()
        return _record(store, plan, claim, ctx, result, beat, holding, names)
    finally:
        holding.set_ran()
        if not holding.background:
            beat.stop()
            holding.set_done()
            LIVE.remove(store.identity, plan.scope, names, holding)


def _unknown_outcome(store: Store, plan: Plan, claim: Begin, ctx: CallContext) -> Any:
    """A takeover: the earlier attempt may have acted. NOT_FOUND: run the function; else
    the reconcile read's finding, recorded; or the call refused (OutcomeUnknown)."""
    assert claim.fence is not None
    choice = plan.unknown_outcome()
    if choice is UnknownOutcome.RERUN:
        return NOT_FOUND
    why = (f"attempt {claim.attempt} took the call over from one whose lease lapsed before "
           "it recorded an outcome, and the tool refuses to run again")
    if callable(choice):
        try:
            found = choice(Reconcile(plan.input, plan.scope, claim.key,
                                     claim.upstream_key or claim.key, claim.attempt))
        except Exception as e:
            found = UNKNOWN
            why = ("an earlier attempt may have performed the effect, and the reconcile read "
                   f"failed: {e}")
        else:
            if found is UNKNOWN:
                why = ("an earlier attempt may have performed the effect, and the reconcile "
                       "read could not tell")
        if found is NOT_FOUND:
            return NOT_FOUND
        if found is not UNKNOWN:
            store.complete(plan.scope, claim.key, claim.fence, found)
            return found
    store.complete(plan.scope, claim.key, claim.fence, outcome_unknown(why))
    raise OutcomeUnknown("an earlier attempt of this call may have acted, and the call is "
                         "refused", detail=why,
                         hint="an operator resolves it: SELECT * FROM idem_unresolved(), "
                         "then idem_resolve")


def _record_failure(store: Store, plan: Plan, claim: Begin, e: Exception,
                    beat: Heartbeat) -> None:
    """The function raised: released when it says the lease was not held (it stopped before
    its effect); otherwise completed as a failure, which the server keeps or releases under
    cache_failures (the decorator's, else the scope's policy). Tried until the lease ends;
    a failure that cannot be recorded leaves the call to run again, as an uncached one."""
    assert claim.fence is not None
    if leaves_claim(e):
        return
    deadline = beat.lease_end
    delay = 0.02
    while True:
        try:
            if isinstance(e, LeaseLost):
                store.release(plan.scope, claim.key, claim.fence)
            else:
                try:
                    response = failure_response(e)
                    _sql.dumps(response)
                except InvalidArgument:
                    response = {"error": type(e).__qualname__, "type": type(e).__qualname__}
                store.complete(plan.scope, claim.key, claim.fence, response, succeeded=False,
                               cache_failure=plan.settings.cache_failures)
            return
        except TRANSIENT:
            if time.monotonic() + delay >= deadline:
                return
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        except IdempotencyError:
            return  # lease lost meanwhile: the attempt that holds the call decides


def _record(store: Store, plan: Plan, claim: Begin, ctx: CallContext, result: Any,
            beat: Heartbeat, holding: Holding, names: list[str]) -> Any:
    """Record the result under the fence (else hand the recording to a thread, and say so)."""
    assert claim.fence is not None
    if ctx.lease.state == "lost":
        raise LeaseLost("the lease was lost while the call ran: its result is not recorded",
                        detail="Another attempt took the call over, or it was forgotten.",
                        response=result)
    try:
        response = _sql.dumps(result)
    except InvalidArgument as e:
        _complete_mark(store, plan, claim, beat, str(e.detail or e.message))
        holding.recorded = True
        raise Unrecorded("the call ran, but its result cannot be stored", detail=e.detail,
                         response=result, hint=e.hint) from e
    done = _complete(store, plan, claim, response, beat.lease_end, result)
    if done:
        holding.recorded = True
        return result

    # Not recorded within the lease: the caller is told, a thread keeps trying (with the
    # heartbeat) until the record expires.
    def keep_trying() -> None:
        try:
            until = time.monotonic() + (plan.settings.ttl or 3600.0)
            holding.recorded = _complete(store, plan, claim, response, until, result)
        finally:
            beat.stop()
            holding.set_done()
            LIVE.remove(store.identity, plan.scope, names, holding)

    holding.background = True
    threading.Thread(target=keep_trying, name="pg_idempotency completion", daemon=True).start()
    state = ("kept by the heartbeat" if ctx.lease.state == "held"
             else "not renewed: once it lapses, another process may take the call over")
    raise Unrecorded("the call ran, but the store could not record its result in time",
                     detail=f"The store could not be reached. The lease is {state}.",
                     hint="the effect happened; this process keeps trying to record it, and "
                     "a retry here waits for that",
                     response=result)


def _complete(store: Store, plan: Plan, claim: Begin, response: str, until: float,
              result: Any) -> bool:
    """Complete under the fence until `until` (monotonic); True once recorded."""
    assert claim.fence is not None
    delay = 0.02
    while True:
        try:
            store._complete_json(plan.scope, claim.key, claim.fence, response)
            return True
        except LeaseLost as e:
            raise LeaseLost("the lease was lost while the call ran: its result is not "
                            "recorded", detail=e.detail, hint=e.hint, response=result) from e
        except ResponseTooLarge as e:
            _complete_mark(store, plan, claim, None, e.message)
            raise Unrecorded("the call ran, but its result is too large to store",
                             detail=e.detail, hint=e.hint, response=result) from e
        except TRANSIENT:
            if time.monotonic() + delay >= until:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def _complete_mark(store: Store, plan: Plan, claim: Begin, beat: Heartbeat | None,
                   why: str) -> None:
    assert claim.fence is not None
    try:
        store.complete(plan.scope, claim.key, claim.fence, unrecorded(why))
    except IdempotencyError:
        pass  # the claim lapses into a takeover, whose unknown-outcome choice decides
