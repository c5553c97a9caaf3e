"""psycopg 3 (the default driver): a pool, a connection, or a conninfo string for which a
pool of autocommit connections is opened (and closed by Store.close)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq

from .._sql import Statement
from ..errors import IdempotencyError, from_sqlstate


def translate(e: psycopg.Error) -> IdempotencyError:
    diag = e.diag
    err = from_sqlstate(e.sqlstate, diag.message_primary or str(e).strip(),
                        diag.message_detail, diag.message_hint)
    err.__cause__ = e
    return err


def _pool_kwargs(prepare: bool) -> dict[str, Any]:
    # Autocommit: each call is its own transaction, with no BEGIN/COMMIT round trips.
    # prepare=False behind a pooler in transaction mode (PgBouncer): psycopg would prepare a
    # statement server-side after 5 uses, which the pooler's next server does not have.
    kw: dict[str, Any] = {"autocommit": True}
    if not prepare:
        kw["prepare_threshold"] = None
    return kw


# A pool opened for a conninfo: one connection at first, more on demand (a heartbeat, a
# duplicate that waits inside idem_begin and the calls of other threads each hold one).
POOL_DEFAULTS: dict[str, Any] = {"min_size": 1, "max_size": 20}


class PsycopgExecutor:
    def __init__(self, source: Any, *, prepare: bool = True,
                 pool_options: dict[str, Any] | None = None) -> None:
        self._owned = isinstance(source, str)
        if self._owned:
            from psycopg_pool import ConnectionPool

            source = ConnectionPool(source, kwargs=_pool_kwargs(prepare), open=True,
                                    **{**POOL_DEFAULTS, **(pool_options or {})})
        self._source = source
        self._pooled = not isinstance(source, psycopg.Connection)
        self.identity: object = source
        self._texts: dict[str, str] = {}

    def _text(self, stmt: Statement) -> str:
        text = self._texts.get(stmt.name)
        if text is None:
            text = self._texts[stmt.name] = stmt.with_percent_s()
        return text

    def fetch(self, stmt: Statement, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        text = self._text(stmt)
        try:
            rows: list[tuple[Any, ...]]
            if self._pooled:
                with self._source.connection() as conn:
                    rows = conn.execute(text, params).fetchall()
                return rows
            conn = self._source
            idle = conn.info.transaction_status == pq.TransactionStatus.IDLE
            rows = conn.execute(text, params).fetchall()
            # An idle connection outside autocommit opened a transaction for the statement:
            # commit it, or the claim stays invisible (and its row locked) until the caller
            # commits. A connection inside the caller's transaction stays in it.
            if idle and not conn.autocommit:
                conn.commit()
            return rows
        except psycopg.Error as e:
            raise translate(e) from e

    def transaction(self) -> Any:
        if self._pooled:
            raise TypeError("a transaction needs one connection, not a pool")
        return self._source.transaction()

    def close(self) -> None:
        if self._owned:
            self._source.close()


class AsyncPsycopgExecutor:
    def __init__(self, source: Any, *, prepare: bool = True,
                 pool_options: dict[str, Any] | None = None) -> None:
        self._owned = isinstance(source, str)
        if self._owned:
            from psycopg_pool import AsyncConnectionPool

            # Opened at the first call: a pool opens inside a running event loop.
            source = AsyncConnectionPool(source, kwargs=_pool_kwargs(prepare), open=False,
                                         **{**POOL_DEFAULTS, **(pool_options or {})})
        self._opened = not self._owned
        self._source = source
        self._pooled = not isinstance(source, psycopg.AsyncConnection)
        self.identity: object = source
        self._texts: dict[str, str] = {}

    async def fetch(self, stmt: Statement, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        text = self._texts.get(stmt.name)
        if text is None:
            text = self._texts[stmt.name] = stmt.with_percent_s()
        try:
            if not self._opened:
                await self._source.open()
                self._opened = True
            rows: list[tuple[Any, ...]]
            if self._pooled:
                async with self._source.connection() as conn:
                    cur = await conn.execute(text, params)
                    rows = await cur.fetchall()
                return rows
            conn = self._source
            idle = conn.info.transaction_status == pq.TransactionStatus.IDLE
            cur = await conn.execute(text, params)
            rows = await cur.fetchall()
            if idle and not conn.autocommit:
                await conn.commit()
            return rows
        except psycopg.Error as e:
            raise translate(e) from e

    def transaction(self) -> Any:
        if self._pooled:
            raise TypeError("a transaction needs one connection, not a pool")
        return self._source.transaction()

    async def close(self) -> None:
        if self._owned and self._opened:
            await self._source.close()
