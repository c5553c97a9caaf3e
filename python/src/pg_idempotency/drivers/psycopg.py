"""psycopg 3 (the default driver): a pool, a connection, or a conninfo string for which a
pool of autocommit connections is opened (and closed by Store.close)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq

from .._sql import Statement
from ..errors import IdempotencyError, InvalidArgument, from_sqlstate

_IDLE = pq.TransactionStatus.IDLE


def translate(e: psycopg.Error) -> IdempotencyError:
    diag = e.diag
    err = from_sqlstate(e.sqlstate, diag.message_primary or str(e).strip(),
                        diag.message_detail, diag.message_hint)
    err.__cause__ = e
    return err


def _no_pool() -> InvalidArgument:
    return InvalidArgument(
        "a transaction needs one connection, not a pool",
        hint="give exactly_once= the connection your writes use "
        "(with pool.connection() as conn: ...)",
    )


def _rollback(conn: psycopg.Connection[Any]) -> None:
    # The statement's own transaction failed: end it, or the connection stays aborted
    # ("current transaction is aborted") for the caller's next statement. A connection
    # lost meanwhile has nothing to roll back; the statement's error is the one to see.
    try:
        conn.rollback()
    except psycopg.Error:
        pass


async def _arollback(conn: psycopg.AsyncConnection[Any]) -> None:
    try:
        await conn.rollback()
    except psycopg.Error:
        pass


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
        if isinstance(source, psycopg.AsyncConnection) or type(source).__name__ == (
                "AsyncConnectionPool"):
            raise InvalidArgument(f"Store cannot use a psycopg {type(source).__name__}",
                                  hint="give it to AsyncStore, or give Store a Connection "
                                  "or a ConnectionPool")
        self._owned = isinstance(source, str)
        if self._owned:
            from psycopg_pool import ConnectionPool

            source = ConnectionPool(source, kwargs=_pool_kwargs(prepare), open=True,
                                    **{**POOL_DEFAULTS, **(pool_options or {})})
        self._source = source
        self._pooled = not isinstance(source, psycopg.Connection)
        self.identity: object = source
        self._texts: dict[str, str] = {}
        # The heartbeat's thread and the caller's share the connection: a statement and
        # the commit of its own transaction are not to be split by the other's.
        self._lock = threading.Lock()

    def _text(self, stmt: Statement) -> str:
        text = self._texts.get(stmt.name)
        if text is None:
            text = self._texts[stmt.name] = stmt.with_percent_s()
        return text

    def fetch(self, stmt: Statement, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        text = self._text(stmt)
        try:
            if self._pooled:
                # getconn/putconn rather than connection(): the same, less a tenth of a
                # replay's time (its context managers, its usage stats, a no-op commit).
                conn = self._source.getconn()
                try:
                    rows: list[tuple[Any, ...]] = conn.execute(text, params).fetchall()
                    # A pool of connections outside autocommit: commit, or roll a failed
                    # statement back, as connection() does.
                    if conn.pgconn.transaction_status != _IDLE:
                        conn.commit()
                except psycopg.Error:
                    if conn.pgconn.transaction_status != _IDLE:
                        _rollback(conn)
                    raise
                finally:
                    self._source.putconn(conn)
                return rows
            conn = self._source
            with self._lock:
                idle = conn.info.transaction_status == pq.TransactionStatus.IDLE
                own = idle and not conn.autocommit
                try:
                    rows = conn.execute(text, params).fetchall()
                except psycopg.Error:
                    if own:
                        _rollback(conn)
                    raise
                # An idle connection outside autocommit opened a transaction for the
                # statement: commit it, or the claim stays invisible (and its row locked)
                # until the caller commits. A connection inside the caller's transaction
                # stays in it.
                if own:
                    conn.commit()
                return rows
        except psycopg.Error as e:
            raise translate(e) from e

    def transaction(self) -> Any:
        if self._pooled:
            raise _no_pool()
        return self._source.transaction()

    def close(self) -> None:
        if self._owned:
            self._source.close()


class AsyncPsycopgExecutor:
    def __init__(self, source: Any, *, prepare: bool = True,
                 pool_options: dict[str, Any] | None = None) -> None:
        if isinstance(source, psycopg.Connection) or type(source).__name__ == "ConnectionPool":
            raise InvalidArgument(f"AsyncStore cannot use a psycopg {type(source).__name__}",
                                  hint="give it to Store, or give AsyncStore an "
                                  "AsyncConnection or an AsyncConnectionPool")
        self._owned = isinstance(source, str)
        if self._owned:
            from .loop_pool import LoopPool

            options = {**POOL_DEFAULTS, "timeout": 30.0, **(pool_options or {})}
            source = LoopPool(source, _pool_kwargs(prepare), int(options["max_size"]),
                              float(options["timeout"]))
        self._source = source
        self._pooled = not isinstance(source, psycopg.AsyncConnection)
        self.identity: object = source
        self._texts: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def fetch(self, stmt: Statement, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        text = self._texts.get(stmt.name)
        if text is None:
            text = self._texts[stmt.name] = stmt.with_percent_s()
        try:
            if self._pooled:
                conn = await self._source.getconn()
                try:
                    cur = await conn.execute(text, params)
                    rows: list[tuple[Any, ...]] = await cur.fetchall()
                    if conn.pgconn.transaction_status != _IDLE:
                        await conn.commit()
                except psycopg.Error:
                    if conn.pgconn.transaction_status != _IDLE:
                        await _arollback(conn)
                    raise
                finally:
                    await self._source.putconn(conn)
                return rows
            conn = self._source
            async with self._lock:
                idle = conn.info.transaction_status == pq.TransactionStatus.IDLE
                own = idle and not conn.autocommit
                try:
                    cur = await conn.execute(text, params)
                    rows = await cur.fetchall()
                except psycopg.Error:
                    if own:
                        await _arollback(conn)
                    raise
                if own:
                    await conn.commit()
                return rows
        except psycopg.Error as e:
            raise translate(e) from e

    def transaction(self) -> Any:
        if self._pooled:
            raise _no_pool()
        return self._source.transaction()

    async def close(self) -> None:
        if self._owned:
            await self._source.close()
