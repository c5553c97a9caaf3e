"""A request sent and never answered (the client's timeout) leaves its claim to lapse; the
attempt that takes the call over sends the provider the same Idempotency-Key, so that the
provider can recognise it. The lease is kept by the heartbeat while the request runs."""

from __future__ import annotations

import threading

import httpx
import psycopg
import pytest
from http_records import input_key, record, until_lapsed
from http_upstream import Reply, Upstream

from pg_idempotency import OutcomeUnknown
from pg_idempotency.http import StatusError, call_info


async def test_a_takeover_after_a_lapsed_lease_sends_the_same_upstream_key(
        web, upstream: Upstream, path: str, sql: psycopg.Connection) -> None:
    # The provider holds the first request past the client's read timeout.
    release = threading.Event()
    upstream.script(path, Reply(201, body={"id": "em_1"}, hold=release))
    api = web(timeout=0.5, lease=1)
    try:
        with pytest.raises(httpx.ReadTimeout):
            await api.post(path, json={"to": "ann"})
    finally:
        release.set()
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
    upstream.script(path, Reply(hold=release))
    api = web(timeout=0.5, lease=1, on_unknown_outcome="refuse")
    try:
        with pytest.raises(httpx.ReadTimeout):
            await api.post(path, json={}, key="refusing")
    finally:
        release.set()
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
