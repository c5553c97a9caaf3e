"""A process that dies inside an exactly-once call (os._exit after its claim and its write,
no rollback): the server ends its transaction, and neither the write nor the claim is left;
the retry runs the function once. Per kind of caller's connection."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from drivers_kinds import KINDS, exactly_once
from drivers_support import DEADLINE, app_name, backends, holds_write, until, writes

from pg_idempotency import Store

CHILD = Path(__file__).with_name("drivers_crash_child.py")

pytestmark = pytest.mark.usefixtures("writes_table")


@pytest.mark.parametrize("kind_name", list(KINDS))
async def test_a_process_dying_inside_the_call_leaves_neither_write_nor_claim(
        kind_name: str, scope: str, sql: psycopg.Connection[Any], store: Store) -> None:
    kind = KINDS[kind_name]
    app = app_name("child")
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), kind_name, scope, app,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdin is not None
        line = await asyncio.wait_for(child.stdout.readline(), DEADLINE)
        assert json.loads(line or b"null") == {"written": "a", "claim": "in_progress"}, (
            (await child.stderr.read()).decode() if child.stderr else "")
        # Its transaction is open and holds its write; nothing is committed.
        assert await until(lambda: holds_write(sql, app), "the child's write, uncommitted")
        assert writes(sql, scope) == []
        child.stdin.write(b"die\n")
        await child.stdin.drain()
        assert await asyncio.wait_for(child.wait(), DEADLINE) == 3
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    # The server saw the connection go and ended the transaction with it.
    await until(lambda: not backends(sql, app), "the child's backend gone")
    assert writes(sql, scope) == []
    assert store.lookup(scope, "a") is None

    fn, runs, _ = exactly_once(kind, scope)
    async with kind.connect(app_name("retry")) as h:
        assert await kind.call(fn, h, "a") == {"wrote": "a"}
        assert await kind.call(fn, h, "a") == {"wrote": "a"}
    assert runs == ["a"]
    assert writes(sql, scope) == ["a"]
