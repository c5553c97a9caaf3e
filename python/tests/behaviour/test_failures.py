"""A function that raises: remembered or not (cache_failures), and the repeats' choices
(on_cache_hit)."""

from __future__ import annotations

import pytest

import pg_idempotency as pi
from pg_idempotency import Store, idempotent

from .helpers import Effects, record_of


class Declined(Exception):
    pass


def failing(store: Store, scope: str, runs: Effects, **members):
    @idempotent(store=store, scope=scope, strategy="explicit", key=lambda i: i["order"],
                **members)
    def place_order(order: str) -> dict:
        if runs(order) == 1:
            raise Declined("card declined")
        return {"placed": order}

    return place_order


def test_an_uncached_failure_leaves_nothing_and_the_retry_runs(store: Store, scope: str,
                                                               sql) -> None:
    runs = Effects()
    place = failing(store, scope, runs)
    with pytest.raises(Declined):
        place("o-1")
    assert record_of(sql, scope, "o-1") is None
    assert place("o-1") == {"placed": "o-1"} and runs.count == 2


def test_a_cached_failure_is_replayed_without_running(store: Store, scope: str, sql) -> None:
    runs = Effects()
    place = failing(store, scope, runs, cache_failures=True)
    with pytest.raises(Declined):
        place("o-1")
    for _ in range(2):
        with pytest.raises(pi.ToolFailed) as e:
            place("o-1")
        assert e.value.response == {"error": "card declined", "type": "Declined"}
        assert "card declined" in str(e.value)
    assert runs.count == 1
    rec = record_of(sql, scope, "o-1")
    assert rec is not None and rec["state"] == "failed"


def test_return_cached_if_success_runs_a_failure_again(store: Store, scope: str) -> None:
    runs = Effects()
    place = failing(store, scope, runs, cache_failures=True,
                    on_cache_hit=pi.OnCacheHit.RETURN_CACHED_IF_SUCCESS)
    with pytest.raises(Declined):
        place("o-1")
    assert place("o-1") == {"placed": "o-1"}
    assert place("o-1") == {"placed": "o-1"} and runs.count == 2


def test_fail_fast_refuses_a_completed_call(store: Store, scope: str) -> None:
    runs = Effects()
    place = failing(store, scope, runs, cache_failures=True, on_cache_hit="FAIL_FAST")
    with pytest.raises(Declined):
        place("o-1")
    with pytest.raises(pi.RepeatRefused) as e:
        place("o-1")
    assert e.value.sqlstate == "IK002" and e.value.detail and e.value.hint
    assert runs.count == 1


def test_a_policy_in_the_database_governs_what_the_decorator_leaves_unset(
        store: Store, scope: str, sql) -> None:
    sql.execute("SELECT idem_set_policy(%s, cache_failures => true)", (scope,))
    runs = Effects()
    place = failing(store, scope, runs)
    with pytest.raises(Declined):
        place("o-1")
    with pytest.raises(pi.ToolFailed):
        place("o-1")
    # The decorator's own setting beats the policy: that failure is not remembered.
    runs_uncached = Effects()
    place_uncached = failing(store, scope, runs_uncached, cache_failures=False)
    with pytest.raises(Declined):
        place_uncached("o-2")
    assert place_uncached("o-2") == {"placed": "o-2"} and runs_uncached.count == 2


async def test_async_failures_are_remembered_alike(astore, scope: str) -> None:
    runs = Effects()

    @idempotent(store=astore, scope=scope, cache_failures=True)
    async def f(x: int) -> int:
        runs(x)
        raise Declined("no")

    with pytest.raises(Declined):
        await f(1)
    with pytest.raises(pi.ToolFailed):
        await f(1)
    assert runs.count == 1
