"""The records of the web actions' calls, as plain SQL shows them."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg


def record(sql: psycopg.Connection, scope: str, key: str) -> dict[str, Any] | None:
    """The record as idem_lookup shows it, every column, as JSON."""
    row = sql.execute("SELECT to_jsonb(l)::text FROM idem_lookup(%s, %s) l",
                      (scope, key)).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def until_lapsed(sql: psycopg.Connection, scope: str, key: str, within: float = 60.0) -> None:
    """Waits until the record's lease has lapsed, as the server's clock says (its holder
    stopped beating), polling the record."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        row = sql.execute("SELECT lease_until <= clock_timestamp() FROM idem_lookup(%s, %s)",
                          (scope, key)).fetchone()
        assert row is not None, "the record is gone: the claim was released, not left"
        if row[0]:
            return
        time.sleep(0.05)
    raise AssertionError(f"the lease of {scope}/{key} did not lapse within {within} s")


def input_key(sql: psycopg.Connection, method: str, url: str, body: Any) -> str:
    """The key of a call with a JSON body, as the server derives it from what names the
    call: its method, URL and body (never its headers)."""
    named = {"method": method, "url": url, "json": body}
    row = sql.execute("SELECT encode(idem_hash(%s::jsonb), 'hex')",
                      (json.dumps(named),)).fetchone()
    assert row is not None
    return str(row[0])
