"""What the driver tests look at: the rows a function wrote, the backends of a named
connection, and a wait for the state another session reaches (never for a time)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from drivers_kinds import WRITES

DEADLINE = 60.0  # seconds: what a loaded 2-core machine may take, not an expected time


def app_name(who: str) -> str:
    """An application_name no other connection has (at most 63 bytes)."""
    return f"pgidem-{uuid.uuid4().hex[:12]}-{who}"


def writes(sql: psycopg.Connection[Any], scope: str) -> list[str]:
    """The rows written for `scope`: committed ones only (an autocommit connection)."""
    rows = sql.execute(f"SELECT value FROM {WRITES} WHERE scope = %s ORDER BY id",
                       (scope,)).fetchall()
    return [r[0] for r in rows]


def backends(sql: psycopg.Connection[Any], app: str, waiting: bool = False) -> list[int]:
    """The backends of the connection named `app`; with waiting, those waiting on a lock."""
    q = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
    if waiting:
        q += " AND wait_event_type = 'Lock'"
    return [r[0] for r in sql.execute(q, (app,)).fetchall()]


def holds_write(sql: psycopg.Connection[Any], app: str) -> bool:
    """Whether the connection named `app` has written to the table in an open transaction."""
    return sql.execute(
        "SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE a.application_name = %s AND l.relation = %s::regclass "
        "AND l.mode = 'RowExclusiveLock')", (app, WRITES)).fetchone()[0]  # type: ignore[index]


async def until(check: Callable[[], Any], what: str) -> Any:
    """Poll `check` until it answers something true: the state another session reaches."""
    end = time.monotonic() + DEADLINE
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > end:
            raise AssertionError(f"not seen within {DEADLINE:.0f} s: {what}")
        await asyncio.sleep(0.01)
