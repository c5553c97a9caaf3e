"""The connections an AsyncStore opens for a conninfo: a small pool per event loop, with no
task of its own. psycopg_pool's AsyncConnectionPool runs tasks in the loop that opened it:
when that loop ended without the pool being closed (asyncio.run returning, a test's own
loop), asyncio.run hung at its end, cancelling a connection attempt that the pool then
retried; and the next loop found the pool bound to the dead one. Here a loop that ends
leaves nothing running, and each loop gets connections of its own."""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import pq

from ..errors import StoreUnavailable


@dataclass
class _Slots:
    free: asyncio.Semaphore
    idle: list[psycopg.AsyncConnection[Any]] = field(default_factory=list)


class LoopPool:
    def __init__(self, conninfo: str, kwargs: dict[str, Any], max_size: int,
                 timeout: float) -> None:
        self.conninfo, self.kwargs = conninfo, kwargs
        self.max_size, self.timeout = max_size, timeout
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Slots] = (
            weakref.WeakKeyDictionary())

    def _slots(self) -> _Slots:
        loop = asyncio.get_running_loop()
        slots = self._loops.get(loop)
        if slots is None:
            slots = self._loops[loop] = _Slots(asyncio.Semaphore(self.max_size))
        return slots

    async def getconn(self) -> psycopg.AsyncConnection[Any]:
        slots = self._slots()
        try:
            await asyncio.wait_for(slots.free.acquire(), self.timeout)
        except asyncio.TimeoutError:
            raise StoreUnavailable(
                f"no connection of the store's {self.max_size} was free within "
                f"{self.timeout:g} s",
                hint="raise pool_options max_size or timeout, or let fewer duplicates wait",
            ) from None
        try:
            while slots.idle:
                conn = slots.idle.pop()
                if not conn.closed and not conn.broken:
                    return conn
            return await psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs)
        except BaseException:
            slots.free.release()
            raise

    async def putconn(self, conn: psycopg.AsyncConnection[Any]) -> None:
        slots = self._slots()
        try:
            if conn.closed or conn.broken or (
                    conn.pgconn.transaction_status != pq.TransactionStatus.IDLE):
                await conn.close()
            else:
                slots.idle.append(conn)
        finally:
            slots.free.release()

    async def close(self) -> None:
        """Close the idle connections: the running loop's awaited, other loops' at once."""
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, slots in list(self._loops.items()):
            idle, slots.idle = slots.idle, []
            for conn in idle:
                if loop is current:
                    await conn.close()
                else:
                    conn.pgconn.finish()
