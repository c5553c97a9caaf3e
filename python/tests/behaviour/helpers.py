"""What the behaviour tests share: effect counters, and waiting on the server's clock."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import psycopg


class Effects:
    """The side effect under test: every run of a function appends here."""

    def __init__(self) -> None:
        self.runs: list[Any] = []

    def __call__(self, what: Any) -> int:
        self.runs.append(what)
        return len(self.runs)

    @property
    def count(self) -> int:
        return len(self.runs)


def until_server_passes(sql: psycopg.Connection, at: datetime, what: str,
                        limit: float = 30.0) -> None:
    """Wait until the server's clock is past `at` (a lease's or a ttl's end): the order
    comes from the server's own time, the one that decides."""
    deadline = time.monotonic() + limit
    while True:
        row = sql.execute("SELECT clock_timestamp() > %s", (at,)).fetchone()
        if row and row[0]:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the server's clock did not pass {what} ({at}) in {limit} s")
        time.sleep(0.02)


def record_of(sql: psycopg.Connection, scope: str, key: str) -> dict[str, Any] | None:
    row = sql.execute(
        "SELECT state, fence, attempt, upstream_key::text, response, lease_until, expires_at "
        "FROM idem_lookup(%s, %s)", (scope, key)).fetchone()
    if row is None:
        return None
    names = ("state", "fence", "attempt", "upstream_key", "response", "lease_until",
             "expires_at")
    return dict(zip(names, row, strict=True))
