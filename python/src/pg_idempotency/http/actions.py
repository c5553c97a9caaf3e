"""`Actions`: web actions through the caller's `httpx.Client`, deduplicated by the
decorator's machinery (claim, heartbeat, completion under the fence, replay)."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from .. import _sync_call
from ..context import CallContext, current_call
from ..decorator import _sync_store
from ..errors import InvalidArgument
from ..settings import KeyStrategy
from ..store import Store
from ._call import Call
from ._options import defaults_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._options import Options, Settings


class Actions:
    """Requests that change something, sent once however often they are retried.

        api = Actions(httpx.Client(base_url="https://api.example.com",
                                   headers={"Authorization": f"Bearer {token}"}))
        r = api.post("/v1/emails", json={"to": "ann@example.com"}, ttl=86_400)

    POST, PUT, PATCH and DELETE are deduplicated and carry `Idempotency-Key` (the record's
    uuid, the same on every attempt, a takeover included); GET, HEAD, OPTIONS and TRACE run
    every time, with no key, unless the call gives settings of its own (`ttl=60`). A status
    other than 2xx raises `StatusError`. The settings given here apply to every call that
    changes something; a call's own replace them one by one. `store`: a Store or conninfo
    (default: `pg_idempotency.configure()`'s); `client`: yours (default: a new one)."""

    def __init__(self, client: httpx.Client | None = None, *, store: Any = None,
                 **settings: Unpack[Settings]) -> None:
        if isinstance(client, httpx.AsyncClient):
            raise InvalidArgument("Actions sends through an httpx.Client; this is an "
                                  "httpx.AsyncClient", hint="use AsyncActions(client)")
        self._defaults = defaults_of(settings)
        self._own_client = client is None
        self.client = httpx.Client() if client is None else client
        self._own_store = store is not None and not isinstance(store, Store)
        self._store: Store | None = None if store is None else _sync_store(store)

    def request(self, method: str, url: httpx.URL | str,
                **options: Unpack[Options]) -> httpx.Response:
        """Send `method url` as httpx does (`json=`, `params=`, `headers=`, ...), under the
        settings given here and the call's own (`ttl=`, `key=`, `cache_failures=`, ...)."""
        call = Call.of(self.client, method, url, options, self._defaults)
        if call.plan is None:
            return call.plain(self._send(call, None))
        if call.plan.strategy is KeyStrategy.UUID:  # a fresh key, sent; nothing recorded
            return call.plain(self._send(call, call.plan.uuid_context()))

        def run() -> Any:
            return call.recorded(self._send(call, current_call()))

        try:
            result = _sync_call.run(self._store or _sync_store(None), call.plan, run, (), {},
                                    _as_is)
        except Exception as e:
            failed = call.failed(e)
            if failed is e:
                raise
            raise failed from e
        return call.answer(result)

    def _send(self, call: Call, ctx: CallContext | None) -> httpx.Response:
        call.stamp(ctx)
        try:
            return self.client.send(call.request, **call.send)
        except httpx.TransportError as e:
            call.left_unanswered(e)
            raise

    def get(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return self.request("GET", url, **options)

    def head(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return self.request("HEAD", url, **options)

    def options(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return self.request("OPTIONS", url, **options)

    def post(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return self.request("POST", url, **options)

    def put(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return self.request("PUT", url, **options)

    def patch(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return self.request("PATCH", url, **options)

    def delete(self, url: httpx.URL | str, **options: Unpack[Options]) -> httpx.Response:
        return self.request("DELETE", url, **options)

    def close(self) -> None:
        """Close what this made: the client (none given) and the store (a conninfo given)."""
        if self._own_client:
            self.client.close()
        if self._own_store and self._store is not None:
            self._store.close()

    def __enter__(self) -> Actions:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _as_is(record: Any) -> Any:
    return record
