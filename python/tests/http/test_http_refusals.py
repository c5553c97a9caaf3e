"""What is refused before anything is claimed or sent, each with what to do instead; and a
duplicate of a call still running, which sends nothing."""

from __future__ import annotations

import asyncio
import threading
import uuid

import httpx
import psycopg
import pytest
from http_records import record
from http_upstream import Reply, Upstream

from pg_idempotency import (
    AsyncStore,
    InProgress,
    InvalidArgument,
    Mismatch,
    Store,
    current_call,
    idempotent,
)
from pg_idempotency.http import Actions, AsyncActions, call_info


async def test_a_method_neither_read_nor_write_must_say(web, upstream: Upstream,
                                                        path: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        await web().call("PURGE", path)
    assert e.value.hint and "side_effect=True" in e.value.hint
    assert upstream.seen() == []


async def test_unknown_keywords_are_named(web, upstream: Upstream, path: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        await web().post(path, json={}, tll=60)
    assert "tll" in e.value.message and e.value.hint and "ttl" in e.value.hint
    with pytest.raises(InvalidArgument):
        web(key="one-key-for-every-call")
    with pytest.raises(InvalidArgument):
        web(upstream_key="both")
    assert upstream.seen() == []


async def test_a_multipart_upload_needs_a_key(web, upstream: Upstream, path: str) -> None:
    api = web()
    files = {"file": ("a.txt", b"hello")}
    with pytest.raises(InvalidArgument) as e:
        await api.post(path, files=files)
    assert e.value.hint and "key=" in e.value.hint
    assert upstream.seen() == []
    key = f"upload-{uuid.uuid4().hex[:8]}"
    await api.post(path, files=files, key=key)
    await api.post(path, files=files, key=key)
    seen = upstream.seen(path)
    assert len(seen) == 1 and b"hello" in seen[0].body


async def test_a_call_key_http_cannot_carry_is_refused(web, upstream: Upstream,
                                                       path: str) -> None:
    api = web(upstream_key="call")
    for bad in (" order-1", "order-1\t", "order\r\n-1"):
        with pytest.raises(InvalidArgument):
            await api.post(path, json={}, key=bad)
    assert upstream.seen() == []
    # Another script goes as its UTF-8 bytes (which http.server reads as Latin-1).
    await api.post(path, json={}, key="zamówienie-1")
    sent = upstream.seen(path)[0].key
    assert sent is not None and sent.encode("latin-1").decode("utf-8") == "zamówienie-1"


async def test_a_reused_key_with_another_body_is_a_mismatch_when_fingerprinted(
        web, upstream: Upstream, path: str) -> None:
    api = web(fingerprint="input")
    key = f"order-{uuid.uuid4().hex[:8]}"
    await api.post(path, json={"amount": 100}, key=key)
    with pytest.raises(Mismatch):
        await api.post(path, json={"amount": 200}, key=key)
    assert len(upstream.seen(path)) == 1


async def test_a_uuid_strategy_sends_a_fresh_key_each_time(web, upstream: Upstream,
                                                           path: str,
                                                           sql: psycopg.Connection) -> None:
    api = web(strategy="uuid")
    answers = [await api.post(path, json={}) for _ in range(2)]
    first, second = upstream.seen(path)
    assert first.key and second.key and first.key != second.key
    for answer, seen in zip(answers, (first, second), strict=True):
        info = call_info(answer)
        assert info is not None and info.key == info.upstream_key == seen.key
        assert record(sql, info.scope, seen.key) is None, "nothing is recorded"


async def test_inside_an_idempotent_function_a_call_sends_its_own_key(
        web, upstream: Upstream, path: str, scope: str, store: Store,
        astore: AsyncStore) -> None:
    api = web()
    actions = api.actions
    if isinstance(actions, AsyncActions):
        @idempotent(store=astore, scope=scope)
        async def outer(n: int) -> str:
            await actions.post(path, json={"n": n})
            await actions.post(path + "/none", json={"n": n}, strategy="none")
            return current_call().upstream_key

        upstream_key = await outer(1)
    else:
        @idempotent(store=store, scope=scope)
        def outer(n: int) -> str:
            actions.post(path, json={"n": n})
            actions.post(path + "/none", json={"n": n}, strategy="none")
            return current_call().upstream_key

        upstream_key = outer(1)
    own = upstream.seen(path)[0].key
    assert own is not None and own != upstream_key, "its own record's key, not the caller's"
    assert upstream.seen(path + "/none")[0].key is None, "a call not deduplicated sends none"


def test_the_client_must_match(store: Store) -> None:
    with pytest.raises(InvalidArgument) as e:
        Actions(httpx.AsyncClient(), store=store)
    assert e.value.hint == "use AsyncActions(client)"
    with pytest.raises(InvalidArgument):
        AsyncActions(httpx.Client())


async def test_a_duplicate_of_a_running_call_sends_nothing(web, upstream: Upstream,
                                                           path: str) -> None:
    release = threading.Event()
    held = Reply(hold=release)
    upstream.script(path, held)
    api = web()
    first = api.start("POST", path, json={"to": "ann"})
    try:
        assert await asyncio.to_thread(held.arrived.wait, 30), "the first request arrived"
        with pytest.raises(InProgress):
            await api.post(path, json={"to": "ann"})
    finally:
        release.set()
    answered = await first
    again = await api.post(path, json={"to": "ann"})
    assert again.json() == answered.json() and len(upstream.seen(path)) == 1
