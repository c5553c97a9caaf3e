"""A decorated `async def`'s call: the twin of _sync_call.py on asyncio (the heartbeat and
a completion handed to the background are tasks)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from . import _sql
from ._live import LIVE, Holding
from ._plan import NOT_A_REPLAY, Plan, answer, failure_response, leaves_claim, replayed
from ._sync_call import TRANSIENT
from .answers import Begin
from .context import _CURRENT, CallContext, Lease
from .errors import (
    IdempotencyError,
    InProgress,
    InvalidArgument,
    LeaseLost,
    OutcomeUnknown,
    ResponseTooLarge,
    Unrecorded,
)
from .keys import local_name
from .marks import outcome_unknown, unrecorded
from .settings import NOT_FOUND, UNKNOWN, Reconcile, UnknownOutcome
from .store import AsyncStore

# Completions handed to the background: referenced until they end (asyncio keeps only
# weak references to tasks).
_BACKGROUND: set[asyncio.Task[Any]] = set()


class Heartbeat:
    """The sync Heartbeat's twin: a timer until the first extension is due, then a task
    (a call that ends sooner, most, costs no task)."""

    def __init__(self, store: AsyncStore, claim: Begin, scope: str, lease_s: float,
                 lease: Lease, extend_by: float | None) -> None:
        self.store, self.claim, self.scope = store, claim, scope
        self.lease_s, self.lease, self.extend_by = lease_s, lease, extend_by
        self.every = max(lease_s / 3, 0.01)
        self.lease_end = time.monotonic() + lease_s
        self.task: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(self.every, self._begin)

    def _begin(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            try:
                assert self.claim.fence is not None
                await self.store.extend(self.scope, self.claim.key, self.claim.fence,
                                        self.extend_by)
                self.lease_end = time.monotonic() + self.lease_s
                self.lease._held_again()
            except LeaseLost:
                self.lease._set("lost")
                return
            except IdempotencyError:
                if time.monotonic() >= self.lease_end:
                    self.lease._set("unconfirmed")
            await asyncio.sleep(self.every)

    def stop(self) -> None:
        self._timer.cancel()
        if self.task is not None:
            self.task.cancel()


async def run(store: AsyncStore, plan: Plan, fn: Callable[..., Awaitable[Any]],
              args: tuple[Any, ...], kwargs: dict[str, Any],
              decode: Callable[[Any], Any]) -> Any:
    if LIVE.any_in(store.identity, plan.scope):
        held = LIVE.get(store.identity, plan.scope,
                        local_name(plan.scope, plan.key, plan.request_json))
        if held is not None:
            await _join(held, plan)
    row = await store._claim(plan.scope, plan.key, plan.request_json, plan.sent)
    value = replayed(row, decode)
    if value is not NOT_A_REPLAY:
        return value
    claim = Begin.from_row(row)
    if claim.outcome != "claimed":
        return answer(claim, decode)
    return await _hold(store, plan, claim, fn, args, kwargs)


async def _join(held: Holding, plan: Plan) -> None:
    loop = asyncio.get_running_loop()
    if not held.ran.is_set() and not await loop.run_in_executor(
            None, held.ran.wait, plan.settings.wait or 0):
        raise InProgress("the call is running in this process",
                         hint="give the decorator wait= so that a duplicate waits for it")
    await loop.run_in_executor(None, held.done.wait, plan.settings.lease or 60.0)
    if not held.recorded and held.has_result and not held.failed:
        raise Unrecorded("the call ran in this process, but its result is not recorded yet",
                         response=held.result, replayed=True,
                         hint="the store could not be reached; the holder keeps trying")


async def _hold(store: AsyncStore, plan: Plan, claim: Begin, fn: Callable[..., Awaitable[Any]],
                args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    assert claim.fence is not None
    ctx = plan.context(claim)
    names = [local_name(plan.scope, claim.key, None)]
    if plan.key is None and plan.request_json is not None:
        names.append(local_name(plan.scope, None, plan.request_json))
    holding = LIVE.add(store.identity, plan.scope, names)
    beat = Heartbeat(store, claim, plan.scope, plan.lease_seconds(claim), ctx.lease,
                     plan.settings.lease)
    try:
        if claim.recovered:
            found = await _unknown_outcome(store, plan, claim)
            if found is not NOT_FOUND:
                holding.result, holding.recorded = found, True
                return found
        token = _CURRENT.set(ctx)
        try:
            result = await fn(*args, **kwargs)
        except Exception as e:
            holding.failed = True
            await _record_failure(store, plan, claim, e, beat)
            raise
        finally:
            _CURRENT.reset(token)
        holding.result = result
        holding.set_ran()
        return await _record(store, plan, claim, ctx, result, beat, holding, names)
    finally:
        holding.set_ran()
        if not holding.background:
            beat.stop()
            holding.set_done()
            LIVE.remove(store.identity, plan.scope, names, holding)


async def _unknown_outcome(store: AsyncStore, plan: Plan, claim: Begin) -> Any:
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
            if asyncio.iscoroutine(found):
                found = await found
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
            await store.complete(plan.scope, claim.key, claim.fence, found)
            return found
    await store.complete(plan.scope, claim.key, claim.fence, outcome_unknown(why))
    raise OutcomeUnknown("an earlier attempt of this call may have acted, and the call is "
                         "refused", detail=why,
                         hint="an operator resolves it: SELECT * FROM idem_unresolved(), "
                         "then idem_resolve")


async def _record_failure(store: AsyncStore, plan: Plan, claim: Begin, e: Exception,
                          beat: Heartbeat) -> None:
    assert claim.fence is not None
    if leaves_claim(e):
        return
    delay = 0.02
    while True:
        try:
            if isinstance(e, LeaseLost):
                await store.release(plan.scope, claim.key, claim.fence)
            else:
                try:
                    response = failure_response(e)
                    _sql.dumps(response)
                except InvalidArgument:
                    response = {"error": type(e).__qualname__, "type": type(e).__qualname__}
                await store.complete(plan.scope, claim.key, claim.fence, response,
                                     succeeded=False, cache_failure=plan.settings.cache_failures)
            return
        except TRANSIENT:
            if time.monotonic() + delay >= beat.lease_end:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        except IdempotencyError:
            return


async def _record(store: AsyncStore, plan: Plan, claim: Begin, ctx: CallContext, result: Any,
                  beat: Heartbeat, holding: Holding, names: list[str]) -> Any:
    assert claim.fence is not None
    if ctx.lease.state == "lost":
        raise LeaseLost("the lease was lost while the call ran: its result is not recorded",
                        detail="Another attempt took the call over, or it was forgotten.",
                        response=result)
    try:
        response = _sql.dumps(result)
    except InvalidArgument as e:
        await _complete_mark(store, plan, claim, str(e.detail or e.message))
        holding.recorded = True
        raise Unrecorded("the call ran, but its result cannot be stored", detail=e.detail,
                         response=result, hint=e.hint) from e
    if await _complete(store, plan, claim, response, beat.lease_end, result):
        holding.recorded = True
        return result

    async def keep_trying() -> None:
        try:
            until = time.monotonic() + (plan.settings.ttl or 3600.0)
            holding.recorded = await _complete(store, plan, claim, response, until, result)
        finally:
            beat.stop()
            holding.set_done()
            LIVE.remove(store.identity, plan.scope, names, holding)

    holding.background = True
    task = asyncio.get_running_loop().create_task(keep_trying())
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)
    state = ("kept by the heartbeat" if ctx.lease.state == "held"
             else "not renewed: once it lapses, another process may take the call over")
    raise Unrecorded("the call ran, but the store could not record its result in time",
                     detail=f"The store could not be reached. The lease is {state}.",
                     hint="the effect happened; this process keeps trying to record it, and "
                     "a retry here waits for that",
                     response=result)


async def _complete(store: AsyncStore, plan: Plan, claim: Begin, response: str, until: float,
                    result: Any) -> bool:
    assert claim.fence is not None
    delay = 0.02
    while True:
        try:
            await store._complete_json(plan.scope, claim.key, claim.fence, response)
            return True
        except LeaseLost as e:
            raise LeaseLost("the lease was lost while the call ran: its result is not "
                            "recorded", detail=e.detail, hint=e.hint, response=result) from e
        except ResponseTooLarge as e:
            await _complete_mark(store, plan, claim, e.message)
            raise Unrecorded("the call ran, but its result is too large to store",
                             detail=e.detail, hint=e.hint, response=result) from e
        except TRANSIENT:
            if time.monotonic() + delay >= until:
                return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


async def _complete_mark(store: AsyncStore, plan: Plan, claim: Begin, why: str) -> None:
    assert claim.fence is not None
    try:
        await store.complete(plan.scope, claim.key, claim.fence, unrecorded(why))
    except IdempotencyError:
        pass
