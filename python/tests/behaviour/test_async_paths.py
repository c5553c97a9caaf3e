"""The async path's own machinery (a heartbeat task, a recording handed to a task, joins
across tasks), the same cases as the blocking path's tests."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import pg_idempotency as pi
from pg_idempotency import AsyncStore, Store, current_call, idempotent

from .forwarder import Forwarder
from .helpers import Effects, record_of, until_server_passes


async def until(condition, what: str, limit: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not happen within {limit} s")
        await asyncio.sleep(0.02)


async def test_a_store_out_of_reach_after_the_run_records_once_back(dsn: str, scope: str,
                                                                    sql) -> None:
    link = Forwarder(dsn)
    cut_store = AsyncStore(link.dsn, pool_options={"timeout": 1})
    sent = Effects()

    @idempotent(store=cut_store, scope=scope, key=lambda i: i["id"], lease=1)
    async def send(id: str) -> dict:
        n = sent(id)
        link.cut()
        return {"email_id": n}

    try:
        with pytest.raises(pi.Unrecorded) as e:
            await send("h-1")
        assert e.value.response == {"email_id": 1} and not e.value.replayed
        with pytest.raises(pi.Unrecorded) as again:
            await send("h-1")
        assert again.value.replayed
        link.restore()
        await until(lambda: (record_of(sql, scope, "h-1") or {}).get("state") == "succeeded",
                    "the recording")
        assert await send("h-1") == {"email_id": 1}
        rec = record_of(sql, scope, "h-1")
        assert rec is not None and rec["attempt"] == 1 and sent.count == 1
    finally:
        link.restore()
        await cut_store.close()
        link.close()


async def test_the_heartbeat_task_keeps_the_lease(astore: AsyncStore, store: Store,
                                                  scope: str, sql) -> None:
    # A lease of 3 s, renewed every second: a beat late by up to 2 s still keeps it.
    @idempotent(store=astore, scope=scope, key=lambda i: i["id"], lease=3)
    async def slow(id: str) -> str:
        rec = record_of(sql, scope, id)
        assert rec is not None
        await asyncio.to_thread(until_server_passes, sql, rec["lease_until"]
                                + timedelta(seconds=1), "two leases")
        assert store.begin(scope, id).outcome == "in_progress"
        assert current_call().lease.state == "held"
        return "done"

    assert await slow("s-1") == "done"


async def test_a_lost_lease_reaches_the_coroutine(astore: AsyncStore, scope: str,
                                                  sql) -> None:
    effects = Effects()

    @idempotent(store=astore, scope=scope, key=lambda i: i["id"], lease=1)
    async def charge(id: str) -> dict:
        lease = current_call().lease
        sql.execute("SELECT idem_forget(%s, %s)", (scope, id))
        await until(lambda: lease.is_lost, "the lost lease")
        lease.ensure()
        return {"charged": effects(id)}

    with pytest.raises(pi.LeaseLost):
        await charge("c-1")
    assert effects.count == 0 and record_of(sql, scope, "c-1") is None


async def test_concurrent_tasks_run_once(astore: AsyncStore, scope: str) -> None:
    sent = Effects()
    entered, release = asyncio.Event(), asyncio.Event()

    @idempotent(store=astore, scope=scope, wait=30)
    async def send(to: str) -> dict:
        entered.set()
        await release.wait()
        return {"email_id": sent(to)}

    tasks = [asyncio.create_task(send("ann")) for _ in range(5)]
    await entered.wait()  # one holds the call; the others join it or wait in the database
    release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results == [{"email_id": 1}] * 5 and sent.count == 1


LOOPS_SCRIPT = """
import asyncio, sys, uuid
import pg_idempotency
from pg_idempotency import idempotent

pg_idempotency.configure(sys.argv[1])
scope = "py-loops-" + uuid.uuid4().hex

@idempotent(scope=scope)
async def g(x: int) -> int:
    return x

# A loop per call, as asyncio.run in a script or a test's own loop: each gets connections
# of its own, and each ends without the store being closed.
for i in range(10):
    assert asyncio.run(g(i % 3)) == i % 3
print("ok")
"""


def test_configure_serves_one_event_loop_after_another(dsn: str, tmp_path) -> None:
    import subprocess
    import sys

    script = tmp_path / "loops.py"
    script.write_text(LOOPS_SCRIPT)
    done = subprocess.run([sys.executable, str(script), dsn], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
