"""@idempotent(exactly_once="conn") on the caller's connection or session, per kind (psycopg
blocking and asyncio, asyncpg, SQLAlchemy Session, Connection and AsyncSession): the claim,
the function's own write and the completion are one transaction."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import psycopg
import pytest
from drivers_kinds import KINDS, TOUCH, WRITES, Kind, exactly_once
from drivers_support import DEADLINE, app_name, backends, until, writes

from pg_idempotency import Contention, OutcomeUnknown, Store, StoreUnavailable, ToolFailed

pytestmark = pytest.mark.usefixtures("writes_table")
THROUGH_POOLER = bool(os.environ.get("PGIDEM_THROUGH_POOLER"))


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> Kind:
    return KINDS[request.param]


async def test_commit_keeps_the_write_and_the_record_and_a_retry_replays(
        kind: Kind, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    fn, runs, seen = exactly_once(kind, scope)
    async with kind.connect(app_name("a")) as h:
        assert await kind.call(fn, h, "a") == {"wrote": "a"}
        assert writes(sql, scope) == ["a"]
        record = store.lookup(scope, "a")
        assert record is not None and record.state == "succeeded"
        assert record.response == {"wrote": "a"}
        assert await kind.call(fn, h, "a") == {"wrote": "a"}
    assert runs == ["a"]
    assert seen == ["in_progress"]  # the claim, as the function's transaction saw it
    assert writes(sql, scope) == ["a"]


async def test_a_failure_leaves_neither_the_write_nor_the_claim(
        kind: Kind, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    fn, runs, _ = exactly_once(kind, scope, cache_failures=False)
    async with kind.connect(app_name("a")) as h:
        with pytest.raises(RuntimeError, match="fail-1 failed"):
            await kind.call(fn, h, "fail-1")
        assert writes(sql, scope) == []
        assert store.lookup(scope, "fail-1") is None
        with pytest.raises(RuntimeError, match="fail-1 failed"):
            await kind.call(fn, h, "fail-1")
    assert runs == ["fail-1", "fail-1"]


async def test_a_cached_failure_is_remembered_and_its_write_undone(
        kind: Kind, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    fn, runs, _ = exactly_once(kind, scope, cache_failures=True)
    async with kind.connect(app_name("a")) as h:
        with pytest.raises(RuntimeError, match="fail-1 failed"):
            await kind.call(fn, h, "fail-1")
        assert writes(sql, scope) == []
        record = store.lookup(scope, "fail-1")
        assert record is not None and record.state == "failed"
        with pytest.raises(ToolFailed, match="fail-1 failed"):
            await kind.call(fn, h, "fail-1")
    assert runs == ["fail-1"]


async def test_the_callers_rollback_leaves_nothing(
        kind: Kind, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    fn, runs, _ = exactly_once(kind, scope)
    async with kind.connect(app_name("a")) as h:
        await kind.start(h, scope)
        assert await kind.call(fn, h, "a") == {"wrote": "a"}
        assert writes(sql, scope) == []  # not committed yet
        await kind.rollback(h)
        assert writes(sql, scope) == []
        assert store.lookup(scope, "a") is None
        # Nothing is left: the retry runs, in a transaction of its own.
        assert await kind.call(fn, h, "a") == {"wrote": "a"}
    assert runs == ["a", "a"]
    assert writes(sql, scope) == ["a"]


async def test_the_callers_commit_keeps_its_write_the_calls_and_the_record(
        kind: Kind, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    fn, runs, _ = exactly_once(kind, scope)
    async with kind.connect(app_name("a")) as h:
        await kind.start(h, scope)
        assert await kind.call(fn, h, "a") == {"wrote": "a"}
        assert store.lookup(scope, "a") is None  # the claim is the caller's transaction's
        await kind.commit(h)
    assert writes(sql, scope) == ["outer", "a"]
    record = store.lookup(scope, "a")
    assert record is not None and record.state == "succeeded"
    assert runs == ["a"]


class Held:
    """A function held after its write until released: its transaction stays open."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, h: Any, item: str) -> None:
        self.entered.set()
        assert self.release.wait(DEADLINE), "never released"

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, DEADLINE), "never entered"


async def test_a_duplicate_under_read_committed_waits_then_replays(
        kind: Kind, scope: str, sql: psycopg.Connection[Any]) -> None:
    held = Held()
    fn, runs, _ = exactly_once(kind, scope, hook=held)
    app_a, app_b = app_name("a"), app_name("b")
    async with kind.connect(app_a) as a, kind.connect(app_b) as b:
        first = asyncio.create_task(kind.call(fn, a, "a"))
        try:
            await held.wait_entered()
            second = asyncio.create_task(kind.call(fn, b, "a"))
            await until(lambda: backends(sql, app_b, waiting=True),
                        "the duplicate waiting on the call's row")
        finally:
            held.release.set()
        assert await first == {"wrote": "a"}
        assert await second == {"wrote": "a"}
    assert runs == ["a"]
    assert writes(sql, scope) == ["a"]


async def test_a_duplicate_under_repeatable_read_gets_contention(
        kind: Kind, scope: str, sql: psycopg.Connection[Any]) -> None:
    held = Held()
    fn, runs, _ = exactly_once(kind, scope, hook=held)
    app_a, app_b = app_name("a"), app_name("b")
    async with kind.connect(app_a) as a, kind.connect(app_b) as b:
        first = asyncio.create_task(kind.call(fn, a, "a"))
        try:
            await held.wait_entered()
            # B's snapshot is taken by its own write, before A commits.
            await kind.start(b, scope, "repeatable read")
            second = asyncio.create_task(kind.call(fn, b, "a"))
            await until(lambda: backends(sql, app_b, waiting=True),
                        "the duplicate waiting on the call's row")
        finally:
            held.release.set()
        assert await first == {"wrote": "a"}
        with pytest.raises(Contention) as refused:
            await second
        assert refused.value.sqlstate == "40001"
        await kind.rollback(b)
        # Its transaction retried replays the call.
        assert await kind.call(fn, b, "a") == {"wrote": "a"}
    assert runs == ["a"]
    assert writes(sql, scope) == ["a"]


async def test_a_backend_terminated_while_the_function_runs_leaves_nothing(
        kind: Kind, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    app = app_name("a")
    terminated: list[bool] = []

    def terminate(h: Any, item: str) -> None:
        if not terminated:
            pid = backends(sql, app)[0]
            row = sql.execute("SELECT pg_terminate_backend(%s, %s)",
                              (pid, int(DEADLINE * 1000))).fetchone()
            terminated.append(bool(row and row[0]))

    fn, runs, seen = exactly_once(kind, scope, hook=terminate)
    async with kind.connect(app) as h:
        with pytest.raises(StoreUnavailable):
            await kind.call(fn, h, "a")
    assert terminated == [True]
    assert seen == ["in_progress"]  # it had claimed and written when its backend ended
    assert writes(sql, scope) == []
    assert store.lookup(scope, "a") is None
    async with kind.connect(app_name("retry")) as h:
        assert await kind.call(fn, h, "a") == {"wrote": "a"}
        assert await kind.call(fn, h, "a") == {"wrote": "a"}
    assert runs == ["a", "a"]  # the first attempt, then the retry once
    assert writes(sql, scope) == ["a"]


def sqlstate_of(e: BaseException | None) -> str | None:
    """The SQLSTATE of a driver's error, through SQLAlchemy's wrapping."""
    while e is not None and getattr(e, "sqlstate", None) is None:
        e = getattr(e, "orig", None) or e.__cause__
    return None if e is None else e.sqlstate  # type: ignore[attr-defined]


@pytest.mark.skipif(THROUGH_POOLER, reason="through PgBouncer in transaction mode: the "
                    "caller's default isolation level is a startup option, which PgBouncer "
                    "does not pass on")
async def test_a_serialization_failure_in_the_function_is_never_remembered(
        kind: Kind, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    sql.execute(f"INSERT INTO {WRITES} (scope, value) VALUES (%s, 'row')", (scope,))

    def another_session_updates_the_row(h: Any, item: str) -> None:
        sql.execute(TOUCH.format("%s"), (scope,))  # after the call's snapshot, committed

    fn, runs, _ = exactly_once(kind, scope, hook=another_session_updates_the_row,
                               cache_failures=True)
    async with kind.connect(app_name("a"), isolation="repeatable read") as h:
        with pytest.raises(Exception) as failed:
            await kind.call(fn, h, "conflict")
        assert sqlstate_of(failed.value) == "40001"
        # Not a remembered failure: the transaction's retry runs the call again.
        with pytest.raises(Exception) as again:
            await kind.call(fn, h, "conflict")
        assert sqlstate_of(again.value) == "40001"
    assert runs == ["conflict", "conflict"]
    assert store.lookup(scope, "conflict") is None
    assert writes(sql, scope) == ["row"]


async def lapsed_claim(store: Store, sql: psycopg.Connection[Any], scope: str,
                       item: str) -> None:
    """A claim committed without its completion, whose lease has lapsed."""
    store.begin(scope, item, ttl=600, lease=0.05)
    await until(lambda: sql.execute(
        "SELECT lease_until < pg_catalog.clock_timestamp() FROM idem_lookup(%s, %s)",
        (scope, item)).fetchone() == (True,), "the claim's lease lapsed")


async def test_a_lapsed_claim_is_taken_over_and_run_again(
        kind: Kind, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    await lapsed_claim(store, sql, scope, "a")
    fn, runs, _ = exactly_once(kind, scope)
    async with kind.connect(app_name("a")) as h:
        assert await kind.call(fn, h, "a") == {"wrote": "a"}
    record = store.lookup(scope, "a")
    assert record is not None and (record.state, record.attempt) == ("succeeded", 2)
    assert runs == ["a"] and writes(sql, scope) == ["a"]


async def test_a_refused_takeover_is_kept_and_replayed(
        kind: Kind, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    await lapsed_claim(store, sql, scope, "a")
    fn, runs, _ = exactly_once(kind, scope, on_unknown_outcome="refuse")
    async with kind.connect(app_name("a")) as h:
        with pytest.raises(OutcomeUnknown):
            await kind.call(fn, h, "a")
        marked = store.lookup(scope, "a")
        assert marked is not None and marked.attempt == 2
        assert "outcome_unknown" in marked.response["pg_idempotency"]
        with pytest.raises(OutcomeUnknown):
            await kind.call(fn, h, "a")  # replayed: no further takeover
    record = store.lookup(scope, "a")
    assert record is not None and record.attempt == 2
    assert runs == [] and writes(sql, scope) == []
