"""What is psycopg's own: an idle connection outside autocommit after a refused call, a
pool where exactly-once needs one connection, and blocking and asyncio objects."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from drivers_kinds import DSN, psycopg_args
from psycopg_pool import ConnectionPool

from pg_idempotency import AsyncStore, InvalidArgument, Store, idempotent


def test_a_refused_call_leaves_an_idle_connection_idle(conn: psycopg.Connection[Any],
                                                        scope: str) -> None:
    s = Store(conn)
    with pytest.raises(InvalidArgument, match="key must not be blank"):
        s.begin(scope, "")
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert s.begin(scope, "k").outcome == "claimed"  # not "current transaction is aborted"


def test_exactly_once_needs_a_connection_not_a_pool(dsn: str, scope: str) -> None:
    @idempotent(scope=scope, exactly_once="conn")
    def call(conn: Any, item: str) -> str:
        return item

    with ConnectionPool(DSN, kwargs=psycopg_args(), min_size=1) as pool:
        with pytest.raises(InvalidArgument, match="not a pool") as refused:
            call(pool, "a")
    assert refused.value.hint and "pool.connection()" in refused.value.hint


async def test_blocking_and_asyncio_connections_go_to_their_own_store(
        conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(InvalidArgument, match="AsyncStore cannot use a psycopg Connection"):
        AsyncStore(conn)
    async with await psycopg.AsyncConnection.connect(DSN, **psycopg_args()) as aconn:
        with pytest.raises(InvalidArgument, match="Store cannot use a psycopg AsyncConnection"):
            Store(aconn)
