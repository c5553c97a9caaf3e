"""asyncpg: a Pool (each call on a connection of its own, its own transaction; the store
keeps the connection it used while calls follow one another: KEEP_IDLE_S) or a Connection
(a call inside the caller's transaction stays in it; asyncpg has no implicit transactions,
so a call on an idle connection is committed by itself). The statements are sent as
written: asyncpg's placeholders are $1..$n too."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from asyncpg.pool import PoolConnectionProxy  # type: ignore[import-untyped]

from .._sql import Statement
from ..errors import IdempotencyError, InvalidArgument, StoreUnavailable, from_sqlstate

# What a lost or unusable connection raises besides a server error: asyncpg's own
# ("connection is closed"), its protocol's, the socket's, a timeout (pool or command).
LOST = (asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError, OSError,
        asyncio.TimeoutError)


def translate(e: BaseException) -> IdempotencyError:
    """A server error by its SQLSTATE (with its detail and hint); anything else
    (a lost connection) is StoreUnavailable. The asyncpg exception is the cause."""
    if isinstance(e, asyncpg.PostgresError):
        message = getattr(e, "message", None) or str(e).strip()
        err = from_sqlstate(e.sqlstate, message, getattr(e, "detail", None),
                            getattr(e, "hint", None))
    else:
        why = str(e).strip() or type(e).__name__
        err = StoreUnavailable(f"the database could not be reached: {why}",
                               hint="check that PostgreSQL is up and the pool or connection "
                               "is open; the call can be retried")
    err.__cause__ = e
    return err


# How long a pool's connection stays with the store after its last statement. asyncpg
# resets a connection on release (UNLISTEN *, RESET ALL, ...: a round trip and server work,
# which doubled a replay's cost); the store's statements leave no session state, so a
# connection it keeps between calls that follow one another needs none. Kept only while the
# pool has connections to spare, and given back this long after the last use, so that the
# caller's own acquire, or Pool.close() (which waits for every connection), waits at most
# this long.
KEEP_IDLE_S = 0.1


class AsyncpgExecutor:
    def __init__(self, source: Any) -> None:
        if not isinstance(source, (asyncpg.Pool, asyncpg.Connection, PoolConnectionProxy)):
            raise InvalidArgument(
                f"AsyncStore cannot use an asyncpg {type(source).__name__}",
                hint="give an asyncpg Pool (asyncpg.create_pool) or Connection",
            )
        self._source = source
        self._pooled = isinstance(source, asyncpg.Pool)
        self.identity: object = source
        # One statement at a time on a connection (the heartbeat's and the completion's
        # would otherwise meet asyncpg's "another operation is in progress").
        self._lock = asyncio.Lock()
        self._kept: list[Any] = []  # the pool's connections this store holds, idle
        self._last_use = 0.0
        self._timer: asyncio.TimerHandle | None = None
        # Releases under way: referenced until done (asyncio keeps weak references only).
        self._releasing: set[asyncio.Task[None]] = set()

    async def fetch(self, stmt: Statement, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            if self._pooled:
                conn = await self._take()
                try:
                    rows = await conn.fetch(stmt.text, *params)
                except BaseException:
                    # Whatever the connection's state now, the pool's reset (or its closing
                    # of a broken connection) deals with it; the statement's error is the
                    # one to see.
                    try:
                        await self._source.release(conn)
                    except (asyncpg.PostgresError, *LOST):
                        pass
                    raise
                self._keep(conn)
            else:
                async with self._lock:
                    rows = await self._source.fetch(stmt.text, *params)
        except (asyncpg.PostgresError, *LOST) as e:
            raise translate(e) from e
        return [tuple(r) for r in rows]

    async def _take(self) -> Any:
        while self._kept:
            conn = self._kept.pop()
            if not conn.is_closed():
                return conn
            self._release_later(conn)
        return await self._source.acquire()

    def _keep(self, conn: Any) -> None:
        # One connection is kept unasked (calls one after another need no more) unless the
        # pool has no other; more only while the pool has idle ones left for others.
        if (self._source.get_max_size() < 2 if not self._kept
                else self._source.get_idle_size() == 0):
            self._release_later(conn)
            return
        self._kept.append(conn)
        loop = asyncio.get_running_loop()
        self._last_use = loop.time()
        if self._timer is None:
            self._timer = loop.call_at(self._last_use + KEEP_IDLE_S, self._idle_check)

    def _idle_check(self) -> None:
        self._timer = None
        if not self._kept:
            return
        loop = asyncio.get_running_loop()
        due = self._last_use + KEEP_IDLE_S
        if loop.time() < due:
            self._timer = loop.call_at(due, self._idle_check)
            return
        while self._kept:
            self._release_later(self._kept.pop())

    def _release_later(self, conn: Any) -> None:
        task = asyncio.get_running_loop().create_task(self._source.release(conn))
        self._releasing.add(task)
        task.add_done_callback(self._released)

    def _released(self, task: asyncio.Task[None]) -> None:
        self._releasing.discard(task)
        # A reset that failed terminated the connection (the pool opens another): no caller
        # to tell, its statement had its answer.
        if not task.cancelled():
            task.exception()

    def transaction(self) -> Block:
        if self._pooled:
            raise InvalidArgument(
                "a transaction needs one connection, not a pool",
                hint="give exactly_once= the connection your writes use "
                "(async with pool.acquire() as conn: ...)",
            )
        return Block(self._source)

    async def close(self) -> None:
        # The pool or connection is the caller's: the store gives back what it holds.
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._kept:
            self._release_later(self._kept.pop())
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)


_SAVEPOINTS = itertools.count(1)


class Block:
    """asyncpg's own transaction: BEGIN on an idle connection, a savepoint inside one that
    Connection.transaction() started (so that the function's own conn.transaction() nests
    in ours). Inside a transaction begun with a plain BEGIN, which asyncpg refuses to nest
    in, a savepoint of ours."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._tx: Any = None
        self._savepoint: str | None = None

    async def __aenter__(self) -> Block:
        tx = self._conn.transaction()
        try:
            await tx.start()
            self._tx = tx
        except asyncpg.InterfaceError:
            if not self._conn.is_in_transaction():
                raise
            self._savepoint = f"pg_idempotency_{next(_SAVEPOINTS)}"
            await self._conn.execute(f"SAVEPOINT {self._savepoint}")
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        if et is None:
            if self._tx is not None:
                await self._tx.commit()
            else:
                await self._conn.execute(f"RELEASE SAVEPOINT {self._savepoint}")
            return
        # The block raised: undo it. A connection lost meanwhile cannot be rolled back (the
        # server ended the transaction); the block's own error is the one to see.
        try:
            if self._tx is not None:
                await self._tx.rollback()
            else:
                await self._conn.execute(f"ROLLBACK TO SAVEPOINT {self._savepoint}; "
                                         f"RELEASE SAVEPOINT {self._savepoint}")
        except (asyncpg.PostgresError, *LOST):
            pass
