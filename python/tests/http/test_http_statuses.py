"""A status other than 2xx, as the Rust client's web executor treats it: a StatusError
(an httpx.HTTPStatusError); worth retrying for a 5xx, a 429 and a keyed 409, with the
provider's Retry-After; released (the retry is sent again, with a new record uuid) unless
failures are remembered (then replayed as the same status and body, the provider not
called); a 409 to the record's key is left to lapse (the provider still runs it)."""

from __future__ import annotations

from datetime import timedelta
from email.utils import format_datetime, parsedate_to_datetime

import httpx
import psycopg
import pytest
from http_records import record
from http_upstream import Reply, Upstream

from pg_idempotency import InProgress
from pg_idempotency.http import StatusError, call_info


async def test_a_4xx_is_not_worth_retrying_and_not_remembered(
        web, upstream: Upstream, path: str, sql: psycopg.Connection) -> None:
    upstream.script(path, Reply(422, body={"error": "bad address"}))
    api = web()
    with pytest.raises(StatusError) as e:
        await api.post(path, json={"to": "x"})
    failed = e.value
    assert isinstance(failed, httpx.HTTPStatusError)
    assert failed.response.status_code == 422
    assert failed.response.json() == {"error": "bad address"}
    assert not failed.retryable and failed.retry_after is None and not failed.replayed
    info = call_info(failed.response)
    assert info is not None and info.key
    assert record(sql, info.scope, info.key) is None, "released, not remembered"

    retried = await api.post(path, json={"to": "x"})
    assert retried.status_code == 201
    first, second = upstream.seen(path)
    assert first.key and second.key and first.key != second.key, \
        "a released call's retry is a new claim: a new record uuid"


async def test_a_5xx_is_worth_retrying_after_its_retry_after(web, upstream: Upstream,
                                                             path: str) -> None:
    upstream.script(path, Reply(503, body={"error": "busy"}, headers={"Retry-After": "7"}))
    api = web()
    with pytest.raises(StatusError) as e:
        await api.post(path, json={})
    assert e.value.retryable and e.value.retry_after == timedelta(seconds=7)
    assert "503" in str(e.value)
    assert (await api.post(path, json={})).status_code == 201
    assert len(upstream.seen(path)) == 2


async def test_a_429_takes_an_http_date(web, upstream: Upstream, path: str) -> None:
    when = parsedate_to_datetime("Sun, 06 Nov 2094 08:49:37 GMT")
    upstream.script(path, Reply(429, headers={"Retry-After": format_datetime(when, True)}),
                    Reply(400, headers={"Retry-After": "5"}))
    api = web()
    with pytest.raises(StatusError) as e:
        await api.post(path, json={})
    assert e.value.retryable and e.value.retry_after is not None
    assert e.value.retry_after > timedelta(days=365 * 60)
    with pytest.raises(StatusError) as e:
        await api.post(path, json={})
    assert not e.value.retryable and e.value.retry_after is None, \
        "advice on an answer not worth retrying is ignored"


async def test_a_remembered_failure_is_replayed_without_calling_the_provider(
        web, upstream: Upstream, path: str, sql: psycopg.Connection) -> None:
    upstream.script(path, Reply(500, body={"error": "boom"}))
    api = web(cache_failures=True)
    with pytest.raises(StatusError) as first:
        await api.post(path, json={})
    assert first.value.retryable and not first.value.replayed
    with pytest.raises(StatusError) as again:
        await api.post(path, json={})
    assert again.value.replayed and not again.value.retryable
    assert again.value.response.status_code == 500
    assert again.value.response.json() == {"error": "boom"}
    assert len(upstream.seen(path)) == 1
    info = call_info(first.value.response)
    assert info is not None and info.key
    rec = record(sql, info.scope, info.key)
    assert rec is not None and rec["state"] == "failed"
    assert rec["response"] == {"status": 500, "body": {"error": "boom"}}


async def test_a_409_to_the_record_key_is_left_to_lapse(web, upstream: Upstream, path: str,
                                                       sql: psycopg.Connection) -> None:
    upstream.script(path, Reply(409, body={"error": "in use"}))
    api = web(lease=30)
    with pytest.raises(StatusError) as e:
        await api.post(path, json={})
    assert e.value.retryable, "the provider still runs the key: worth retrying"
    info = call_info(e.value.response)
    assert info is not None and info.key
    rec = record(sql, info.scope, info.key)
    assert rec is not None and rec["state"] == "in_progress", "neither remembered nor released"
    with pytest.raises(InProgress):
        await api.post(path, json={})
    assert len(upstream.seen(path)) == 1


async def test_a_409_to_the_call_key_is_released(web, upstream: Upstream, path: str,
                                                 sql: psycopg.Connection) -> None:
    upstream.script(path, Reply(409))
    api = web(upstream_key="call")
    with pytest.raises(StatusError) as e:
        await api.post(path, json={})
    assert e.value.retryable
    info = call_info(e.value.response)
    assert info is not None and info.key
    assert record(sql, info.scope, info.key) is None
