"""Where the records go: a conninfo given to the actions (a pool of their own, closed with
them), or the store `pg_idempotency.configure()` set."""

from __future__ import annotations

import os

import httpx
import pytest
from http_upstream import Upstream

from pg_idempotency import decorator
from pg_idempotency.http import Actions, AsyncActions, call_info

pytestmark = pytest.mark.skipif(
    os.environ.get("PGIDEM_STATEMENTS") == "unnamed",
    reason="a conninfo opens a pool that prepares statements, which a pooler in "
    "transaction mode refuses (the other web tests run there through the store fixture)")


def test_a_conninfo_opens_a_pool_the_actions_close(dsn: str, upstream: Upstream,
                                                   path: str) -> None:
    with Actions(httpx.Client(base_url=upstream.url), store=dsn) as api:
        first = api.post(path, json={})
        again = api.post(path, json={})
    assert len(upstream.seen(path)) == 1
    info = call_info(again)
    assert info is not None and info.replayed and again.json() == first.json()


async def test_a_conninfo_opens_an_async_pool_the_actions_close(dsn: str, upstream: Upstream,
                                                                path: str) -> None:
    async with AsyncActions(httpx.AsyncClient(base_url=upstream.url), store=dsn) as api:
        await api.post(path, json={})
        again = await api.post(path, json={})
    assert len(upstream.seen(path)) == 1
    info = call_info(again)
    assert info is not None and info.replayed


async def test_without_a_store_the_configured_one_is_used(dsn: str, upstream: Upstream,
                                                          path: str,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          ) -> None:
    for name in ("source", "sync", "async_"):  # restored after the test
        monkeypatch.setattr(decorator._DEFAULT, name, getattr(decorator._DEFAULT, name))
    decorator.configure(dsn)
    with Actions(httpx.Client(base_url=upstream.url)) as api:
        api.post(path, json={"a": 1})
        api.post(path, json={"a": 1})
    async with AsyncActions(httpx.AsyncClient(base_url=upstream.url)) as aapi:
        await aapi.post(path, json={"a": 1})
    assert len(upstream.seen(path)) == 1
    opened, aopened = decorator._DEFAULT.sync, decorator._DEFAULT.async_
    assert opened is not None and aopened is not None, "opened from the conninfo"
    opened.close()
    await aopened.close()
