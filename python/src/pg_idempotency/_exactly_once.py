"""Exactly-once calls (`@idempotent(exactly_once="conn")`): the claim, the function's own
writes and the completion in one transaction on the caller's connection or session, as the
Rust client's ExactlyOnce (docs/client.md, "Exactly-once tools"). A crash or rollback
before the commit leaves nothing; a duplicate in another transaction waits on the call's row
(READ COMMITTED) and then replays, or fails with 40001 (REPEATABLE READ: retry it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from . import _sql
from ._plan import Plan, answer, failure_response
from .context import _CURRENT
from .errors import OutcomeUnknown
from .settings import NOT_FOUND
from .store import AsyncStore, Store

# A serialization failure or a deadlock, raised by the function's own statements.
_TRANSACTIONS = ("40001", "40P01")


def _the_transactions(e: BaseException) -> bool:
    """Whether the function failed because its transaction did (a serialization failure or
    a deadlock): never remembered, whatever cache_failures says; the caller retries the
    transaction, which runs the call again. The driver's error may be wrapped (SQLAlchemy's
    .orig, a chained __cause__)."""
    cur: BaseException | None = e
    for _ in range(4):
        if cur is None:
            return False
        if getattr(cur, "sqlstate", None) in _TRANSACTIONS:
            return True
        cur = getattr(cur, "orig", None) or cur.__cause__
    return False


def run(store: Store, plan: Plan, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any], decode: Callable[[Any], Any]) -> Any:
    from ._sync_call import _unknown_outcome

    x = store._x
    failure: Exception | None = None
    refused: OutcomeUnknown | None = None
    result: Any = None
    # Our block: a transaction of its own on an idle connection, a savepoint inside the
    # caller's. A refusal raised in it (mismatch, a result too large) undoes all of it.
    with x.transaction():
        claim = store._begin_json(plan.scope, plan.key, plan.request_json, **plan.begin_kwargs())
        if claim.outcome != "claimed":
            return answer(claim, decode)
        assert claim.fence is not None
        ctx = plan.context(claim)
        found: Any = NOT_FOUND
        if claim.recovered:
            # A claim committed without its completion (its transaction committed after
            # the function failed to finish): the earlier attempt may have acted.
            try:
                found = _unknown_outcome(store, plan, claim, ctx)
            except OutcomeUnknown as e:
                refused = e  # its mark is kept: it commits with the transaction
        if found is not NOT_FOUND:
            return found
        if refused is None:
            token = _CURRENT.set(ctx)
            try:
                # The function's writes in a savepoint: a failure undoes them and keeps the
                # claim, so that the failure can be remembered (cache_failures).
                with x.transaction():
                    result = fn(*args, **kwargs)
            except Exception as e:
                failure = e
            finally:
                _CURRENT.reset(token)
            if failure is None:
                store._complete_json(plan.scope, claim.key, claim.fence, _sql.dumps(result))
            elif _the_transactions(failure):
                raise failure  # nothing of the call is kept
            else:
                # Kept (cache_failures) or released by the server, in this transaction.
                store.complete(plan.scope, claim.key, claim.fence, failure_response(failure),
                               succeeded=False, cache_failure=plan.settings.cache_failures)
    if refused is not None:
        raise refused
    if failure is not None:
        raise failure
    return result


async def run_async(store: AsyncStore, plan: Plan, fn: Callable[..., Awaitable[Any]],
                    args: tuple[Any, ...], kwargs: dict[str, Any],
                    decode: Callable[[Any], Any]) -> Any:
    from ._async_call import _unknown_outcome

    x = store._x
    failure: Exception | None = None
    refused: OutcomeUnknown | None = None
    result: Any = None
    async with x.transaction():
        claim = await store._begin_json(plan.scope, plan.key, plan.request_json,
                                        **plan.begin_kwargs())
        if claim.outcome != "claimed":
            return answer(claim, decode)
        assert claim.fence is not None
        ctx = plan.context(claim)
        found: Any = NOT_FOUND
        if claim.recovered:
            try:
                found = await _unknown_outcome(store, plan, claim)
            except OutcomeUnknown as e:
                refused = e
        if found is not NOT_FOUND:
            return found
        if refused is None:
            token = _CURRENT.set(ctx)
            try:
                async with x.transaction():
                    result = await fn(*args, **kwargs)
            except Exception as e:
                failure = e
            finally:
                _CURRENT.reset(token)
            if failure is None:
                await store._complete_json(plan.scope, claim.key, claim.fence,
                                           _sql.dumps(result))
            elif _the_transactions(failure):
                raise failure
            else:
                await store.complete(plan.scope, claim.key, claim.fence,
                                     failure_response(failure), succeeded=False,
                                     cache_failure=plan.settings.cache_failures)
    if refused is not None:
        raise refused
    if failure is not None:
        raise failure
    return result
