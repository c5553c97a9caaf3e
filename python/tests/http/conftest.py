"""Fixtures of the web actions' tests: a real HTTP server per test (http_upstream.py), and
`web`: Actions or AsyncActions behind one awaitable face, so that every scenario runs
through both (the sync one blocks the test's event loop while it sends: nothing else
runs on it)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is not installed: pip install "
                            "'pg-idempotency[httpx]' (python/requirements/http.txt)")

from http_upstream import Upstream  # noqa: E402

from pg_idempotency import AsyncStore, Store  # noqa: E402
from pg_idempotency.http import Actions, AsyncActions  # noqa: E402


@pytest.fixture
def path() -> str:
    """A path no other test (or earlier run) used: its calls' default scopes and keys are
    new."""
    return f"/t/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    u = Upstream().start()
    yield u
    u.stop()


class Web:
    """`await web.call("POST", "/v1/emails", json=...)` through Actions or AsyncActions."""

    def __init__(self, actions: Actions | AsyncActions) -> None:
        self.actions = actions

    async def call(self, method: str, path: str, **options: Any) -> httpx.Response:
        if isinstance(self.actions, AsyncActions):
            return await self.actions.request(method, path, **options)
        return self.actions.request(method, path, **options)

    def start(self, method: str, path: str, **options: Any) -> asyncio.Future[httpx.Response]:
        """The call running beside the test (a task, or a thread for the blocking one)."""
        if isinstance(self.actions, AsyncActions):
            return asyncio.ensure_future(self.actions.request(method, path, **options))
        return asyncio.ensure_future(asyncio.to_thread(self.actions.request, method, path,
                                                       **options))

    async def post(self, path: str, **options: Any) -> httpx.Response:
        return await self.call("POST", path, **options)

    async def get(self, path: str, **options: Any) -> httpx.Response:
        return await self.call("GET", path, **options)


@pytest.fixture(params=["sync", "async"])
async def web(request: pytest.FixtureRequest, upstream: Upstream, store: Store,
              astore: AsyncStore) -> AsyncIterator[Callable[..., Web]]:
    """`web(headers=..., **settings)`: actions through a client of their own
    (base_url: the test's server), on the test database."""
    made: list[Actions | AsyncActions] = []

    def make(headers: dict[str, str] | None = None, **settings: Any) -> Web:
        if request.param == "sync":
            made.append(Actions(httpx.Client(base_url=upstream.url, headers=headers,
                                             timeout=30), store=store, **settings))
        else:
            made.append(AsyncActions(httpx.AsyncClient(base_url=upstream.url, headers=headers,
                                                       timeout=30),
                                     store=astore, **settings))
        return Web(made[-1])

    yield make
    for a in made:
        if isinstance(a, AsyncActions):
            await a.client.aclose()
        else:
            a.client.close()
