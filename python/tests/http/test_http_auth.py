"""The caller's Authorization (and any header, cookie or the URL's password) reaches the
provider, and is neither in the record nor in what names the call: a repeat with another
token is the same call."""

from __future__ import annotations

import psycopg
import pytest
from http_records import input_key, record
from http_upstream import Upstream

from pg_idempotency import InvalidArgument
from pg_idempotency.http import call_info


async def test_authorization_reaches_the_server_and_not_the_record(
        web, upstream: Upstream, path: str, sql: psycopg.Connection) -> None:
    api = web(headers={"Authorization": "Bearer secret-client-1"})
    first = await api.post(path, json={"to": "ann"}, headers={"X-Api-Key": "secret-call-1"},
                           cookies={"session": "secret-cookie-1"})
    seen = upstream.seen(path)
    assert seen[0].headers["authorization"] == "Bearer secret-client-1"
    assert seen[0].headers["x-api-key"] == "secret-call-1"
    assert "secret-cookie-1" in seen[0].headers["cookie"]

    # A refreshed token, another key and cookie: the same call, replayed.
    other = web(headers={"Authorization": "Bearer secret-client-2"})
    again = await other.post(path, json={"to": "ann"}, headers={"X-Api-Key": "secret-call-2"},
                             cookies={"session": "secret-cookie-2"})
    assert len(upstream.seen(path)) == 1 and again.json() == first.json()

    info = call_info(first)
    assert info is not None and info.key
    rec = record(sql, info.scope, info.key)
    assert rec is not None and rec["state"] == "succeeded"
    whole = str(rec)
    assert "secret" not in whole, whole
    assert rec["response"] == {"status": 201, "body": {"path": path, "n": 1}}
    # What names the call is the method, the URL and the body: the server's own hash of it.
    assert input_key(sql, "POST", upstream.url + path, {"to": "ann"}) == info.key


async def test_the_urls_password_is_not_part_of_the_call(web, upstream: Upstream,
                                                         path: str) -> None:
    api = web()
    url = upstream.url.replace("http://", "http://user:secret-pw@") + path
    first = await api.post(url, json={})
    info = call_info(first)
    assert info is not None and "secret" not in info.scope
    assert upstream.seen(path)[0].headers["authorization"].startswith("Basic ")
    await api.post(upstream.url.replace("http://", "http://user:other-pw@") + path, json={})
    assert len(upstream.seen(path)) == 1


async def test_an_idempotency_key_header_is_refused_before_anything_is_sent(
        web, upstream: Upstream, path: str) -> None:
    api = web()
    with pytest.raises(InvalidArgument) as e:
        await api.post(path, json={}, headers={"idempotency-key": "mine"})
    assert e.value.hint and "key=" in e.value.hint
    with pytest.raises(InvalidArgument):
        await web(headers={"Idempotency-Key": "mine"}).get(path)
    assert upstream.seen() == []
