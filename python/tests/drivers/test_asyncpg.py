"""What is asyncpg's own: its types, one statement at a time on a connection, transactions
it refuses to nest in, a lost connection, and a pool where one connection is needed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import psycopg
import pytest
from drivers_kinds import WRITES, asyncpg_args
from drivers_support import writes

from pg_idempotency import (
    AsyncStore,
    BatchItem,
    InvalidArgument,
    Store,
    StoreUnavailable,
    idempotent,
)
from pg_idempotency._sql import Statement
from pg_idempotency.drivers.asyncpg import AsyncpgExecutor

pytestmark = pytest.mark.usefixtures("writes_table")


@pytest.fixture
async def conn(dsn: str) -> AsyncIterator[Any]:
    c = await asyncpg.connect(**asyncpg_args())
    yield c
    await c.close()


async def test_parameters_cross_as_the_sql_casts_them(conn: Any) -> None:
    x = AsyncpgExecutor(conn)
    stmt = Statement("t", "SELECT $1::pg_catalog.float8, $2::pg_catalog.text[], "
                          "$3::pg_catalog.text[]::pg_catalog.jsonb[], $4::pg_catalog.bool[], "
                          "pg_catalog.now()")
    [(secs, texts, docs, flags, now)] = await x.fetch(stmt, (5, ["a", None], [None, '{"a":1}'],
                                                            [None, True]))
    assert secs == 5.0 and isinstance(secs, float)  # an int where float8 is cast
    assert texts == ["a", None] and docs == [None, '{"a": 1}'] and flags == [None, True]
    assert now.tzinfo is not None


async def test_a_batch_with_null_requests_and_tokens(conn: Any, scope: str) -> None:
    s = AsyncStore(conn)
    got = await s.begin_batch(scope, [BatchItem(key="a"), BatchItem(request={"r": 1}),
                                      BatchItem(key="c", claim_token="8a6e0804-2bd3-4b23-"
                                                "9a9b-0123456789ab")], ttl=60)
    assert [getattr(b, "outcome", None) for b in got] == ["claimed"] * 3


async def test_calls_on_one_connection_wait_for_each_other(conn: Any, scope: str) -> None:
    # A heartbeat and a completion on one connection: asyncpg refuses a second statement
    # while one runs ("another operation is in progress"); the store sends them in turn.
    s = AsyncStore(conn)
    claim = await s.begin(scope, "k", ttl=60)
    assert claim.fence is not None
    got = await asyncio.gather(*(s.extend(scope, "k", claim.fence, 30) for _ in range(5)),
                               s.lookup(scope, "k"))
    assert all(g is not None for g in got)


async def test_the_functions_own_transaction_block_nests_in_the_calls(
        conn: Any, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    @idempotent(scope=scope, exactly_once="conn", key_fields=["item"])
    async def call(conn: Any, item: str) -> str:
        async with conn.transaction():  # a savepoint in the call's asyncpg transaction
            await conn.execute(f"INSERT INTO {WRITES} (scope, value) VALUES ($1, $2)",
                               scope, item)
        return item

    assert await call(conn, "a") == "a"
    assert not conn.is_in_transaction()
    assert writes(sql, scope) == ["a"]
    record = store.lookup(scope, "a")
    assert record is not None and record.state == "succeeded"


async def test_a_caller_transaction_begun_with_plain_begin_gets_a_savepoint(
        conn: Any, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    @idempotent(scope=scope, exactly_once="conn", key_fields=["item"])
    async def call(conn: Any, item: str) -> str:
        await conn.execute(f"INSERT INTO {WRITES} (scope, value) VALUES ($1, $2)",
                           scope, item)
        if item == "fail":
            raise RuntimeError("failed")
        return item

    await conn.execute("BEGIN")  # asyncpg's conn.transaction() refuses to nest in this one
    assert await call(conn, "a") == "a"
    await conn.execute("ROLLBACK")
    assert writes(sql, scope) == [] and store.lookup(scope, "a") is None
    await conn.execute("BEGIN")
    assert await call(conn, "a") == "a"
    with pytest.raises(RuntimeError):
        await call(conn, "fail")  # undone to its savepoint: the transaction goes on
    await conn.execute("COMMIT")
    assert writes(sql, scope) == ["a"]
    record = store.lookup(scope, "a")
    assert record is not None and record.state == "succeeded"
    assert store.lookup(scope, "fail") is None


async def test_a_closed_connection_is_store_unavailable(scope: str) -> None:
    c = await asyncpg.connect(**asyncpg_args())
    await c.close()
    with pytest.raises(StoreUnavailable) as lost:
        await AsyncStore(c).begin(scope, "k")
    assert "closed" in str(lost.value) and isinstance(lost.value.__cause__,
                                                      asyncpg.InterfaceError)


async def test_exactly_once_needs_a_connection_not_a_pool(scope: str) -> None:
    @idempotent(scope=scope, exactly_once="conn")
    async def call(conn: Any, item: str) -> str:
        return item

    async with asyncpg.create_pool(**asyncpg_args(), min_size=1, max_size=1) as pool:
        with pytest.raises(InvalidArgument, match="not a pool") as refused:
            await call(pool, "a")
    assert refused.value.hint and "pool.acquire()" in refused.value.hint


async def test_a_blocking_store_refuses_asyncpg(conn: Any) -> None:
    with pytest.raises(InvalidArgument, match="Store cannot use") as refused:
        Store(conn)
    assert refused.value.hint and "AsyncStore" in refused.value.hint
