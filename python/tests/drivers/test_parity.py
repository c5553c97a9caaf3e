"""The store's calls give the same answers over every driver: one script of calls (claim,
repeat, heartbeat, completion, replay, lookup, refusals, release, batches with per-item
refusals, forget, purge, errors with their SQLSTATE, detail and hint) is run over each, and
its transcript (tokens and timestamps named by what they are) must equal psycopg's."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from drivers_kinds import DSN, asyncpg_args, psycopg_args, sa_asyncpg_connect_args, sa_url
from drivers_support import DEADLINE
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from pg_idempotency import (
    AsyncStore,
    BatchCompletion,
    BatchItem,
    Begin,
    IdempotencyError,
    Record,
    Store,
)

Call = Callable[..., Awaitable[Any]]

pytestmark = pytest.mark.usefixtures("dsn")

VARIANTS = [
    "psycopg_pool", "psycopg_connection", "psycopg_async_pool", "psycopg_async_connection",
    "asyncpg_pool", "asyncpg_connection", "sa_engine", "sa_connection", "sa_session",
    "sa_async_engine_asyncpg", "sa_async_engine_psycopg", "sa_async_connection",
    "sa_async_session",
]


@asynccontextmanager
async def opened(variant: str) -> AsyncIterator[Callable[[str], Call]]:
    """The variant's connection; yields a maker of `call(method, *args)` per schema."""
    import asyncpg
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    def calls(make: Callable[[str], Any]) -> Callable[[str], Call]:
        def per_schema(schema: str) -> Call:
            s = make(schema)

            async def call(method: str, *args: Any, **kw: Any) -> Any:
                out = getattr(s, method)(*args, **kw)
                return await out if isinstance(s, AsyncStore) else out

            return call

        return per_schema

    if variant == "psycopg_pool":
        with ConnectionPool(DSN, kwargs=psycopg_args(), min_size=1) as pool:
            yield calls(lambda sc: Store(pool, schema=sc))
    elif variant == "psycopg_connection":
        with psycopg.connect(DSN, **psycopg_args()) as conn:
            yield calls(lambda sc: Store(conn, schema=sc))
    elif variant == "psycopg_async_pool":
        async with AsyncConnectionPool(DSN, kwargs=psycopg_args(), min_size=1) as apool:
            yield calls(lambda sc: AsyncStore(apool, schema=sc))
    elif variant == "psycopg_async_connection":
        async with await psycopg.AsyncConnection.connect(DSN, **psycopg_args()) as aconn:
            yield calls(lambda sc: AsyncStore(aconn, schema=sc))
    elif variant == "asyncpg_pool":
        async with asyncpg.create_pool(**asyncpg_args(), min_size=1, max_size=2) as pgpool:
            yield calls(lambda sc: AsyncStore(pgpool, schema=sc))
    elif variant == "asyncpg_connection":
        pgconn = await asyncpg.connect(**asyncpg_args())
        try:
            yield calls(lambda sc: AsyncStore(pgconn, schema=sc))
        finally:
            await pgconn.close()
    elif variant.startswith("sa_async"):
        driver = "psycopg" if variant.endswith("psycopg") else "asyncpg"
        args = sa_asyncpg_connect_args() if driver == "asyncpg" else psycopg_args()
        engine = create_async_engine(sa_url(driver), connect_args=args)
        try:
            if variant == "sa_async_connection":
                async with engine.connect() as c:
                    yield calls(lambda sc: AsyncStore(c, schema=sc))
            elif variant == "sa_async_session":
                async with AsyncSession(engine) as session:
                    yield calls(lambda sc: AsyncStore(session, schema=sc))
            else:
                yield calls(lambda sc: AsyncStore(engine, schema=sc))
        finally:
            await engine.dispose()
    else:
        sync_engine = create_engine(sa_url("psycopg"), connect_args=psycopg_args())
        try:
            if variant == "sa_connection":
                with sync_engine.connect() as sc_conn:
                    yield calls(lambda sc: Store(sc_conn, schema=sc))
            elif variant == "sa_session":
                with Session(sync_engine) as sync_session:
                    yield calls(lambda sc: Store(sync_session, schema=sc))
            else:
                yield calls(lambda sc: Store(sync_engine, schema=sc))
        finally:
            sync_engine.dispose()


class Transcript:
    """Answers written down comparably: fences and uuids by the order they appear in,
    timestamps by their kind (aware datetimes), the scope by a placeholder."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.names: dict[tuple[str, Any], str] = {}
        self.lines: list[tuple[str, Any]] = []

    def name(self, kind: str, value: Any) -> str:
        count = sum(1 for k in self.names if k[0] == kind)
        return self.names.setdefault((kind, value), f"{kind}{count + 1}")

    def value(self, v: Any, field: str = "") -> Any:
        if isinstance(v, (Begin, Record)):
            return {type(v).__name__: {f.name: self.value(getattr(v, f.name), f.name)
                                       for f in dataclasses.fields(v)}}
        if isinstance(v, IdempotencyError):
            return {"error": type(v).__name__, "sqlstate": v.sqlstate,
                    "message": self.value(v.message), "detail": self.value(v.detail),
                    "hint": self.value(v.hint)}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, datetime):
            return "aware datetime" if v.tzinfo is not None else "NAIVE datetime"
        if isinstance(v, timedelta):
            return "positive timedelta" if v > timedelta(0) else repr(v)
        if field == "fence" and v is not None:
            return self.name("fence", v)
        if field == "upstream_key" and v is not None:
            return self.name("uuid", v)
        if field == "lease_left" and v is not None:
            return "positive float" if isinstance(v, float) and v > 0 else repr(v)
        if isinstance(v, str):
            return v.replace(self.scope, "<scope>")
        return v

    async def note(self, label: str, answer: Awaitable[Any]) -> Any:
        try:
            got = await answer
        except IdempotencyError as e:
            got = e
        self.lines.append((label, self.value(got)))
        return got


async def script(open_store: Callable[[str], Call], scope: str) -> list[tuple[str, Any]]:
    t = Transcript(scope)
    call = open_store("public")
    email = {"to": "ann@example.com", "n": 1}
    claim = await t.note("claim", call("begin", scope, None, email, ttl=600, lease=300))
    same_input = {"n": 1, "to": "ann@example.com"}  # the same canonical JSON, reordered
    await t.note("repeat while running", call("begin", scope, None, same_input))
    await t.note("heartbeat", call("extend", scope, claim.key, claim.fence, 120))
    await t.note("complete", call("complete", scope, claim.key, claim.fence, {"id": 7, "ok": True}))
    await t.note("complete again", call("complete", scope, claim.key, claim.fence, {"id": 7}))
    await t.note("replay", call("begin", scope, None, email))
    await t.note("lookup", call("lookup", scope, claim.key))
    await t.note("stale fence", call("complete", scope, claim.key, claim.fence + 10**9, {}))
    await t.note("heartbeat, stale", call("extend", scope, claim.key, claim.fence + 10**9))

    order = await t.note("explicit claim", call("begin", scope, "order-1", {"qty": 1}))
    await t.note("mismatch", call("begin", scope, "order-1", {"qty": 2}))
    await t.note("mismatch ignored", call("begin", scope, "order-1", {"qty": 2},
                                          on_mismatch="ignore"))
    await t.note("release", call("release", scope, "order-1", order.fence))
    await t.note("after release", call("lookup", scope, "order-1"))
    await t.note("claimed again", call("begin", scope, "order-1", {"qty": 1}))

    done = await t.note("claim ff", call("begin", scope, "ff"))
    await t.note("complete ff", call("complete", scope, "ff", done.fence, ["a", None, 1.5]))
    await t.note("fail fast", call("begin", scope, "ff", on_cache_hit="fail_fast"))
    failing = await t.note("claim failing", call("begin", scope, "failing"))
    await t.note("failure kept", call("complete", scope, "failing", failing.fence,
                                      {"error": "boom"}, succeeded=False, cache_failure=True))
    await t.note("failure replayed", call("begin", scope, "failing"))
    await t.note("failure run again", call("begin", scope, "failing",
                                           on_cache_hit="return_cached_if_success"))

    items = [BatchItem(key="b1", request={"x": 1}), BatchItem(request={"h": [1, None]}),
             BatchItem(key="order-1", request={"qty": 3}), BatchItem(key="b2")]
    batch = await t.note("batch", call("begin_batch", scope, items, ttl=600))
    await t.note("batch, repeats refused", call("begin_batch", scope,
                                                ["ff", "b1", "b3"], on_cache_hit="fail_fast"))
    hashed = batch[1]
    await t.note("batch complete", call("complete_batch", scope, [
        BatchCompletion(key="b1", fence=batch[0].fence, response={"b": 1}),
        BatchCompletion(key=hashed.key, fence=hashed.fence + 10**9, response=None),
        BatchCompletion(key="b2", fence=batch[3].fence, response={"e": 1}, succeeded=False,
                        cache_failure=False)]))
    await t.note("batch completed", call("lookup", scope, "b1"))
    await t.note("batch failure released", call("lookup", scope, "b2"))

    await t.note("blank scope", call("begin", " ", "k"))
    await t.note("blank key", call("begin", scope, ""))
    await t.note("lease over ttl", call("begin", scope, "k", ttl=10, lease=20))
    await t.note("unknown policy word", call("begin", scope, "k", on_cache_hit="sometimes"))
    await t.note("no api in schema", open_store("pgidem_nowhere")("begin", scope, "k"))
    await t.note("not installed", open_store("pgidem_nowhere")("check_installed"))
    await t.note("installed", call("check_installed"))

    await t.note("forget", call("forget", scope, claim.key))
    await t.note("forget again", call("forget", scope, claim.key))
    short = await t.note("short", call("begin", scope, "short", ttl=0.2, lease=0.1))
    await t.note("short done", call("complete", scope, "short", short.fence, 1))
    expired = await until_expired(call, scope)
    t.lines.append(("expired", expired))
    purged = await call("purge_expired")
    # Another purger (the extension's worker) may have taken it first: a count, not a number.
    t.lines.append(("purge", type(purged).__name__ + (" >= 0" if purged >= 0 else " < 0")))
    return t.lines


async def until_expired(call: Call, scope: str) -> bool:
    """Ordered by the record's own state: lookup answers no row once it expired."""
    end = time.monotonic() + DEADLINE
    while await call("lookup", scope, "short") is not None:
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.01)
    return True


REFERENCE: dict[str, list[tuple[str, Any]]] = {}


async def transcript(variant: str, scope: str) -> list[tuple[str, Any]]:
    async with opened(variant) as open_store:
        return await script(open_store, f"{scope}-{variant}")


async def reference(scope: str) -> list[tuple[str, Any]]:
    if "psycopg_pool" not in REFERENCE:
        REFERENCE["psycopg_pool"] = await transcript("psycopg_pool", scope)
    return REFERENCE["psycopg_pool"]


async def test_the_reference_answers_are_the_sql_apis(scope: str) -> None:
    lines = dict(await reference(scope))
    assert lines["claim"]["Begin"]["outcome"] == "claimed"
    assert lines["repeat while running"]["Begin"]["outcome"] == "in_progress"
    assert lines["repeat while running"]["Begin"]["fence"] is None
    assert lines["repeat while running"]["Begin"]["retry_after"] == "positive timedelta"
    assert lines["complete"] == "succeeded"
    assert lines["replay"]["Begin"]["response"] == {"id": 7, "ok": True}
    assert lines["lookup"]["Record"]["fence"] == lines["claim"]["Begin"]["fence"]
    assert lines["stale fence"]["sqlstate"] == "IK003"
    assert lines["mismatch"]["error"] == "Mismatch" and lines["mismatch"]["hint"]
    assert lines["mismatch ignored"]["Begin"]["outcome"] == "in_progress"
    assert lines["after release"] is None
    assert lines["fail fast"]["sqlstate"] == "IK002"
    assert lines["failure replayed"]["Begin"]["succeeded"] is False
    assert lines["failure run again"]["Begin"]["outcome"] == "claimed"
    batch = lines["batch"]
    assert [b["Begin"]["outcome"] for b in (batch[0], batch[1], batch[3])] == ["claimed"] * 3
    assert batch[2]["error"] == "Mismatch" and "order-1" in batch[2]["detail"]
    refused = lines["batch, repeats refused"]
    assert [r.get("error") for r in refused] == ["RepeatRefused", None, None]
    assert refused[1]["Begin"]["outcome"] == "in_progress"
    completed = lines["batch complete"]
    assert completed[0] == "succeeded" and completed[1]["error"] == "LeaseLost"
    assert lines["batch failure released"] is None
    for label in ("blank scope", "blank key", "lease over ttl", "unknown policy word"):
        assert lines[label]["sqlstate"] == "22023" and lines[label]["detail"], label
    assert lines["no api in schema"]["error"] == "NotInstalled"  # 3F000: no such schema
    assert lines["not installed"]["error"] == "NotInstalled"
    assert lines["forget"] is True and lines["forget again"] is False
    assert lines["expired"] is True and lines["purge"] == "int >= 0"


@pytest.mark.parametrize("variant", VARIANTS[1:])
async def test_every_driver_answers_as_psycopg_does(variant: str, scope: str) -> None:
    expected = await reference(scope)
    got = await transcript(variant, scope)
    assert [label for label, _ in got] == [label for label, _ in expected]
    for (label, answer), (_, want) in zip(got, expected, strict=True):
        assert answer == want, label
