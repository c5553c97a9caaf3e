"""`AsyncActions`: the twin of `Actions` (actions.py) on asyncio, through the caller's
`httpx.AsyncClient` (the heartbeat is a task, as for an `async def`)."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from .. import _async_call
from ..context import CallContext, current_call
from ..decorator import _async_store
from ..errors import InvalidArgument
from ..settings import KeyStrategy
from ..store import AsyncStore
from ._call import Call
from ._options import defaults_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._options import Options, Settings


class AsyncActions:
    """Requests that change something, sent once however often they are retried.

        api = AsyncActions(httpx.AsyncClient(base_url="https://api.example.com",
                                             headers={"Authorization": f"Bearer {token}"}))
        r = await api.post("/v1/emails", json={"to": "ann@example.com"}, ttl=86_400)

    POST, PUT, PATCH and DELETE are deduplicated and carry `Idempotency-Key` (the record's
    uuid, the same on every attempt, a takeover included); GET, HEAD, OPTIONS and TRACE run
    every time, with no key, unless the call gives settings of its own (`ttl=60`). A status
    other than 2xx raises `StatusError`. The settings given here apply to every call that
    changes something; a call's own replace them one by one. `store`: an AsyncStore or conninfo
    (default: `pg_idempotency.configure()`'s); `client`: yours (default: a new one)."""

    def __init__(self, client: httpx.AsyncClient | None = None, *, store: Any = None,
                 **settings: Unpack[Settings]) -> None:
        if isinstance(client, httpx.Client):
            raise InvalidArgument("AsyncActions sends through an httpx.AsyncClient; this is "
                                  "an httpx.Client", hint="use Actions(client)")
        self._defaults = defaults_of(settings)
        self._own_client = client is None
        self.client = httpx.AsyncClient() if client is None else client
        self._own_store = store is not None and not isinstance(store, AsyncStore)
        self._store: AsyncStore | None = None if store is None else _async_store(store)

    async def request(self, method: str, url: httpx.URL | str,
                **options: Unpack[Options]) -> httpx.Response:
        """Send `method url` as httpx does (`json=`, `params=`, `headers=`, ...), under the
        settings given here and the call's own (`ttl=`, `key=`, `cache_failures=`, ...)."""
        call = Call.of(self.client, method, url, options, self._defaults)
        if call.plan is None:
            return call.plain(await self._send(call, None))
        if call.plan.strategy is KeyStrategy.UUID:  # a fresh key, sent; nothing recorded
            return call.plain(await self._send(call, call.plan.uuid_context()))

        async def run() -> Any:
            return call.recorded(await self._send(call, current_call()))

        try:
            result = await _async_call.run(self._store or _async_store(None), call.plan, run,
                                           (), {}, _as_is)
        except Exception as e:
            failed = call.failed(e)
            if failed is e:
                raise
            raise failed from e
        return call.answer(result)

    async def _send(self, call: Call, ctx: CallContext | None) -> httpx.Response:
        call.stamp(ctx)
        try:
            return await self.client.send(call.request, **call.send)
        except httpx.TransportError as e:
            call.left_unanswered(e)
            raise

    async def get(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return await self.request("GET", url, **options)

    async def head(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return await self.request("HEAD", url, **options)

    async def options(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return await self.request("OPTIONS", url, **options)

    async def post(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return await self.request("POST", url, **options)

    async def put(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return await self.request("PUT", url, **options)

    async def patch(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return await self.request("PATCH", url, **options)

    async def delete(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return await self.request("DELETE", url, **options)

    async def aclose(self) -> None:
        """Close what this made: the client (none given) and the store (a conninfo given)."""
        if self._own_client:
            await self.client.aclose()
        if self._own_store and self._store is not None:
            await self._store.close()

    async def __aenter__(self) -> AsyncActions:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        await self.aclose()


def _as_is(record: Any) -> Any:
    return record
