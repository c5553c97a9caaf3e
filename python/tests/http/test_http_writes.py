"""Requests that change something: sent once, with one Idempotency-Key, however often the
call is made; replayed from the record (status and body) afterwards."""

from __future__ import annotations

import uuid

import psycopg
from http_records import record
from http_upstream import Reply, Upstream

from pg_idempotency.http import call_info


async def test_three_posts_send_one_request_with_one_key(web, upstream: Upstream, path: str,
                                                          sql: psycopg.Connection) -> None:
    api = web()
    body = {"to": "ann@example.com", "subject": "Hi"}
    answers = [await api.post(path, json=body, ttl=86_400) for _ in range(3)]

    seen = upstream.seen(path)
    assert len(seen) == 1, "three calls, one request"
    assert seen[0].method == "POST" and seen[0].json() == body
    sent = seen[0].key
    assert sent is not None and str(uuid.UUID(sent)) == sent, "the record's uuid goes upstream"

    # The first answer as it came; the repeats rebuilt from the record: status and body.
    assert [a.status_code for a in answers] == [201, 201, 201]
    assert [a.json() for a in answers] == [{"path": path, "n": 1}] * 3
    infos = [call_info(a) for a in answers]
    assert [i.replayed for i in infos if i] == [False, True, True]
    assert len({i.key for i in infos if i}) == 1, "a replay names its record too"
    first = infos[0]
    assert first is not None and first.upstream_key == sent
    assert first.scope == f"POST {upstream.url.removeprefix('http://')}{path}"

    rec = record(sql, first.scope, first.key or "")
    assert rec is not None
    assert rec["state"] == "succeeded" and rec["attempt"] == 1
    assert rec["upstream_key"] == sent
    assert rec["response"] == {"status": 201, "body": {"path": path, "n": 1}}


async def test_the_key_is_the_request_not_its_spelling(web, upstream: Upstream,
                                                       path: str) -> None:
    api = web()
    await api.post(path, json={"a": 1, "b": [1, 2]})
    await api.post(path, json={"b": [1, 2], "a": 1})  # the same JSON value
    await api.post(path, json={"a": 2, "b": [1, 2]})  # another body: another call
    await api.post(path, json={"a": 1, "b": [1, 2]}, params={"v": "2"})  # another URL
    seen = upstream.seen(path)
    assert [s.json() for s in seen] == [{"a": 1, "b": [1, 2]}, {"a": 2, "b": [1, 2]},
                                         {"a": 1, "b": [1, 2]}]
    assert len({s.key for s in seen}) == 3


async def test_put_patch_delete_carry_the_key_too(web, upstream: Upstream, path: str) -> None:
    api = web()
    for method in ("PUT", "PATCH", "DELETE", "PUT"):
        await api.call(method, path, content=b"x")
    seen = upstream.seen(path)
    assert [s.method for s in seen] == ["PUT", "PATCH", "DELETE"]
    assert all(s.key for s in seen) and len({s.key for s in seen}) == 3


async def test_a_text_answer_replays_as_text(web, upstream: Upstream, path: str) -> None:
    upstream.script(path, Reply(202, body="queued"), Reply(202, body='"queued"'))
    api = web()
    first = await api.post(path, data={"a": "1"})
    again = await api.post(path, data={"a": "1"})
    assert (first.status_code, first.text) == (202, "queued")
    assert (again.status_code, again.text) == (202, "queued")
    assert len(upstream.seen(path)) == 1


async def test_an_explicit_key_names_the_call(web, upstream: Upstream, path: str,
                                              sql: psycopg.Connection) -> None:
    api = web()
    order = f"order-{uuid.uuid4().hex[:8]}"
    first = await api.post(path, json={"n": 1}, key=order)
    again = await api.post(path, json={"n": 2}, key=order)  # the key alone names it
    info = call_info(first)
    assert info is not None and info.key == order
    assert again.json() == first.json() and len(upstream.seen(path)) == 1
    rec = record(sql, info.scope, order)
    assert rec is not None and rec["upstream_key"] == upstream.seen(path)[0].key


async def test_upstream_key_call_sends_the_call_key(web, upstream: Upstream,
                                                    path: str) -> None:
    api = web(upstream_key="call")
    order = f"order-{uuid.uuid4().hex[:8]}"
    await api.post(path, json={}, key=order)
    await api.post(path + "/hashed", json={"x": 1})
    assert upstream.seen(path)[0].key == order
    # Keyed by the input's hash: the server's key (64 hex digits) goes upstream.
    hashed = upstream.seen(path + "/hashed")[0].key
    assert hashed is not None and len(hashed) == 64 and int(hashed, 16) >= 0


async def test_two_endpoints_with_one_key_send_two_keys(web, upstream: Upstream,
                                                        path: str) -> None:
    api = web()
    order = f"order-{uuid.uuid4().hex[:8]}"
    await api.post(path + "/create", json={}, key=order)
    await api.call("DELETE", path + "/cancel", key=order)
    create, cancel = upstream.seen(path + "/create"), upstream.seen(path + "/cancel")
    assert len(create) == len(cancel) == 1, "each endpoint is a scope of its own"
    assert create[0].key != cancel[0].key


async def test_a_method_it_does_not_know_says_what_it_is(web, upstream: Upstream,
                                                         path: str) -> None:
    api = web()
    await api.call("PURGE", path, side_effect=True)
    await api.call("PURGE", path, side_effect=True)
    await api.call("PURGE", path, side_effect=False)
    seen = upstream.seen(path)
    assert len(seen) == 2 and seen[0].key and seen[1].key is None
