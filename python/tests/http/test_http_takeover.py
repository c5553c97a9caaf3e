"""A request sent and never answered (the client's timeout) leaves its claim to lapse; the
attempt that takes the call over sends the provider the same Idempotency-Key, so that the
provider can recognise it. The lease is kept by the heartbeat while the request runs."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import psycopg
import pytest
from http_records import input_key, record, until_lapsed
from http_upstream import Reply, Upstream

from pg_idempotency import InProgress, OutcomeUnknown
from pg_idempotency.http import StatusError, call_info


async def test_a_takeover_after_a_lapsed_lease_sends_the_same_upstream_key(
        web, upstream: Upstream, path: str, sql: psycopg.Connection) -> None:
    # The provider holds the first request past the client's read timeout.
    release = threading.Event()
    held = Reply(201, body={"id": "em_1"}, hold=release)
    upstream.script(path, held)
    api = web(lease=1)
    try:
        with pytest.raises(httpx.ReadTimeout):
            await api.post(path, json={"to": "ann"}, timeout=0.5)
    finally:
        release.set()
    assert held.arrived.wait(30)
    first = upstream.seen(path)[0]
    assert first.key is not None
    scope = f"POST {upstream.url.removeprefix('http://')}{path}"
    key = input_key(sql, "POST", upstream.url + path, {"to": "ann"})
    rec = record(sql, scope, key)
    assert rec is not None and rec["state"] == "in_progress" and rec["upstream_key"] == first.key

    until_lapsed(sql, scope, key)
    taken = await api.post(path, json={"to": "ann"})
    second = upstream.seen(path)[1]
    assert second.key == first.key, "the takeover sends the same Idempotency-Key"
    info = call_info(taken)
    assert info is not None and info.upstream_key == first.key and not info.replayed
    rec = record(sql, scope, key)
    assert rec is not None and rec["state"] == "succeeded" and rec["attempt"] == 2
    assert rec["upstream_key"] == first.key

    again = await api.post(path, json={"to": "ann"})
    assert again.json() == taken.json() and len(upstream.seen(path)) == 2


async def test_a_409_takeover_sends_the_same_key_and_is_then_replayed(
        web, upstream: Upstream, path: str, sql: psycopg.Connection) -> None:
    upstream.script(path, Reply(409, body={"error": "running"}))
    api = web(lease=1)
    with pytest.raises(StatusError) as e:
        await api.post(path, json={"n": 1})
    info = call_info(e.value.response)
    assert info is not None and info.key
    until_lapsed(sql, info.scope, info.key)
    await api.post(path, json={"n": 1})
    first, second = upstream.seen(path)
    assert first.key == second.key
    await api.post(path, json={"n": 1})
    assert len(upstream.seen(path)) == 2


async def test_a_takeover_can_refuse_to_send_again(web, upstream: Upstream, path: str,
                                                   sql: psycopg.Connection) -> None:
    release = threading.Event()
    held = Reply(hold=release)
    upstream.script(path, held)
    api = web(lease=1, on_unknown_outcome="refuse")
    try:
        with pytest.raises(httpx.ReadTimeout):
            await api.post(path, json={}, key="refusing", timeout=0.5)
    finally:
        release.set()
    assert held.arrived.wait(30)
    until_lapsed(sql, f"POST {upstream.url.removeprefix('http://')}{path}", "refusing")
    with pytest.raises(OutcomeUnknown):
        await api.post(path, json={}, key="refusing")
    assert len(upstream.seen(path)) == 1


async def test_a_request_that_never_left_is_released(web, path: str,
                                                     sql: psycopg.Connection) -> None:
    # Nobody listens on the port any more: the connection is refused, nothing was sent.
    listener = Upstream()
    url = listener.url
    listener.stop()
    api = web()
    with pytest.raises(httpx.ConnectError):
        await api.post(url + path, json={}, key="never-sent")
    scope = f"POST {url.removeprefix('http://')}{path}"
    assert record(sql, scope, "never-sent") is None


async def test_the_heartbeat_keeps_the_lease_while_the_request_runs(
        web, upstream: Upstream, path: str, sql: psycopg.Connection) -> None:
    release = threading.Event()
    held = Reply(hold=release)
    upstream.script(path, held)
    # A lease of 3 s, renewed every second: a heartbeat late by up to 2 s on a loaded
    # machine still keeps it (with 1 s, a beat 0.7 s late let it lapse under a parallel build).
    api = web(lease=3)
    first = api.start("POST", path, json={"n": 1})
    try:
        assert await asyncio.to_thread(held.arrived.wait, 30)
        scope = f"POST {upstream.url.removeprefix('http://')}{path}"
        key = input_key(sql, "POST", upstream.url + path, {"n": 1})
        # Past the first lease's end, the call is still held: the heartbeat renewed it.
        deadline = time.monotonic() + 60
        while True:
            row = sql.execute(
                "SELECT state, lease_until > clock_timestamp() FROM idem_lookup(%s, %s) "
                "WHERE clock_timestamp() > created_at + interval '4 s'", (scope, key)).fetchone()
            if row is not None:
                break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert row == ("in_progress", True)
        with pytest.raises(InProgress):
            await api.post(path, json={"n": 1})
    finally:
        release.set()
    assert (await first).status_code == 201
    rec = record(sql, scope, key)
    assert rec is not None and rec["state"] == "succeeded" and rec["attempt"] == 1
    assert len(upstream.seen(path)) == 1
