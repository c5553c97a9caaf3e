"""One call, as the sync and async actions share it: the request built by the caller's
client, whether and how it is deduplicated (a `Plan` of the decorator's), the key it
sends upstream, and what its answer becomes.

The call's input (what HASH_INPUT hashes, what `fingerprint="input"` compares, what
`key_fields` name) is `{"method", "url", "json" | "content"}`: never its headers, cookies
or auth, nor the URL's user and password. Its default scope is the method and the URL
without its query (`POST api.example.com/v1/emails`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from .._plan import Plan
from ..canonical import input_hash
from ..context import CallContext
from ..errors import InvalidArgument, LeaseLost, ToolFailed, Unrecorded
from ..settings import Idempotent, KeyStrategy
from ._methods import changes_something
from ._options import split, upstream_of
from ._recorded import EXTENSION, CallInfo, StatusError, record_of, response_of

MAX_SCOPE_BYTES = 128  # the server's pg_idempotency.max_scope_bytes
IDEMPOTENCY_KEY = "Idempotency-Key"


@dataclass
class Call:
    request: httpx.Request
    send: dict[str, Any]
    plan: Plan | None
    """None: not deduplicated (a read without settings of its own, or strategy NONE)."""
    changes: bool
    upstream: str
    scope: str = ""
    ctx: CallContext | None = None
    record_keyed: bool = False
    """The key sent is the record's uuid, which a release would lose (the next claim mints
    another)."""
    sent: list[httpx.Response] = field(default_factory=list)

    # -- before anything is sent

    @staticmethod
    def of(client: httpx.Client | httpx.AsyncClient, method: str, url: httpx.URL | str,
           options: Mapping[str, Any], defaults: Mapping[str, Any]) -> Call:
        build, send, members, own = split(options)
        method = method.upper()
        changes = changes_something(method, own.get("side_effect"))
        upstream = upstream_of(own.get("upstream_key", defaults.get("upstream_key")))
        request = client.build_request(method, url, **build)
        if IDEMPOTENCY_KEY.lower() in request.headers:
            raise InvalidArgument(
                "Idempotency-Key cannot be set as a header",
                detail="It is sent on POST, PUT, PATCH and DELETE: the record's uuid (or the "
                "call's key, upstream_key=\"call\"), the same on every attempt of the call, "
                "a takeover included.",
                hint="name the call with key= instead (remove the header from the call's "
                "headers and the client's)",
            )
        call = Call(request, send, None, changes, upstream)
        # A read is deduplicated only by settings of its own (the Java framework's rule).
        if not members and not changes:
            return call
        settings = _settings({**_members_of(defaults), **members})
        if settings.strategy is KeyStrategy.NONE:
            return call
        call.scope = settings.scope or default_scope(method, request.url)
        call.plan = Plan.of(settings, call.scope, _input_of(request, build), None)
        _check_nameable(call.plan)
        if upstream == "call" and call.plan.key is not None:
            _header_key(call.plan.key)  # refused now, before anything is claimed or sent
        return call

    # -- sending

    def stamp(self, ctx: CallContext | None) -> None:
        """Puts the key of this call's claim (or, under UUID, its fresh key) on the request."""
        self.ctx = ctx
        if not self.changes or ctx is None:
            return
        self.record_keyed = self.upstream == "record" and ctx.fence is not None
        key = ctx.upstream_key if self.upstream == "record" else ctx.key
        # httpx writes header values as ASCII; a key of another script goes as UTF-8.
        self.request.headers = httpx.Headers(
            [*self.request.headers.raw, (IDEMPOTENCY_KEY.encode(), _header_key(key))])

    def left_unanswered(self, e: httpx.TransportError) -> None:
        """Sent under the record's key and no answer (a timeout, a connection broken after
        the request went out): the provider may have acted. Released, the retry would send
        a new key; left to lapse, the takeover keeps it. One that never left is released."""
        never_sent = isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout,
                                    httpx.ProxyError, httpx.UnsupportedProtocol,
                                    httpx.LocalProtocolError))
        if self.record_keyed and not never_sent:
            setattr(e, "leaves_claim", True)  # noqa: B010 (read by the core's holder)

    def recorded(self, response: httpx.Response) -> Any:
        """What the core records of a 2xx answer; any other raises StatusError (a 409 to the
        record's key is left to lapse: the provider still runs an earlier request)."""
        self.sent.append(response)
        if response.is_success:
            return record_of(response)
        failed = StatusError(response, keyed=IDEMPOTENCY_KEY in response.request.headers)
        failed.leaves_claim = self.record_keyed and response.status_code == 409
        raise failed

    # -- the answer

    def plain(self, response: httpx.Response) -> httpx.Response:
        """A call that is not deduplicated: its answer as it came, or StatusError."""
        try:
            self.recorded(response)
        finally:
            if self.ctx is not None:  # UUID: the fresh key it sent
                response.extensions[EXTENSION] = self._info(replayed=False)
        return response

    def answer(self, result: Any) -> httpx.Response:
        """The response sent (this attempt ran), or the record's (a replay)."""
        if self.sent:
            response = self.sent[-1]
            response.extensions[EXTENSION] = self._info(replayed=False)
            return response
        return response_of(result, self.request, self._info(replayed=True))

    def failed(self, e: Exception) -> Exception:
        """The error the caller gets: a remembered status as StatusError (replayed), the
        response this attempt got in an Unrecorded or LeaseLost, else `e` itself."""
        if isinstance(e, ToolFailed) and isinstance(e.response, dict) \
                and isinstance(e.response.get("status"), int):
            rebuilt = response_of(e.response, self.request, self._info(replayed=True))
            return StatusError(rebuilt, replayed=True)
        if isinstance(e, (Unrecorded, LeaseLost)) and self.sent:
            e.response = self.sent[-1]
        if isinstance(e, StatusError):
            e.response.extensions[EXTENSION] = self._info(replayed=False)
        return e

    def _info(self, replayed: bool) -> CallInfo:
        ctx = None if replayed else self.ctx
        if ctx is not None:
            key = ctx.key
        else:  # a replay: its own key, or the server's hash of its input (HASH_INPUT)
            assert self.plan is not None
            key = self.plan.key or input_hash(self.plan.input)
        sent = self.sent[-1].request.headers.get(IDEMPOTENCY_KEY) if self.sent else None
        return CallInfo(self.scope, key, None if replayed else sent, replayed)


def _members_of(defaults: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in defaults.items() if k != "upstream_key"}


def _settings(members: dict[str, Any]) -> Idempotent:
    key = members.get("key")
    if isinstance(key, str):
        members["key"] = lambda _input: key
    settings = Idempotent.of(**members)
    strategy = settings.strategy or KeyStrategy.HASH_INPUT
    if strategy is KeyStrategy.HASH_INPUT and settings.fingerprint:
        raise InvalidArgument(
            "fingerprint= applies to explicit keys",
            detail="Without key= the key is the hash of the whole request: it is the "
            "fingerprint.",
            hint="drop fingerprint=, or name the key (key= or key_fields=)",
        )
    return settings


def default_scope(method: str, url: httpx.URL) -> str:
    """`POST api.example.com/v1/emails`; past 128 bytes, cut and ended by a hash of the
    whole, so that two long endpoints stay two scopes."""
    path = url.raw_path.split(b"?", 1)[0].decode("ascii")
    scope = f"{method} {url.netloc.decode('ascii')}{path}"
    if len(scope.encode()) <= MAX_SCOPE_BYTES:
        return scope
    digest = hashlib.sha256(scope.encode()).hexdigest()[:16]
    return scope[:MAX_SCOPE_BYTES - 17] + "~" + digest


def _input_of(request: httpx.Request, build: Mapping[str, Any]) -> dict[str, Any]:
    """What names the call: its method, its URL (query included), its body; not its headers,
    nor the URL's user and password."""
    url = request.url
    out: dict[str, Any] = {
        "method": request.method,
        "url": f"{url.scheme}://{url.netloc.decode('ascii')}{url.raw_path.decode('ascii')}",
    }
    if build.get("json") is not None:
        out["json"] = build["json"]  # as a value: spelling and member order do not matter
        return out
    try:
        body = request.content
    except httpx.RequestNotRead:
        out["content"] = None  # streamed or multipart: only a key of the caller's names it
        out["streamed"] = True
        return out
    if body:
        try:
            out["content"] = body.decode("utf-8")
        except UnicodeDecodeError:
            out["content"] = {"sha256": hashlib.sha256(body).hexdigest()}
    return out


def _check_nameable(plan: Plan) -> None:
    """A streamed or multipart body (its boundary is new each time) cannot name the call."""
    if not plan.input.get("streamed"):
        return
    if plan.strategy is KeyStrategy.HASH_INPUT or plan.settings.fingerprint == "input":
        raise InvalidArgument(
            "a streamed or multipart body cannot name the call",
            detail="Its bytes are not known before it is sent (a multipart boundary is new "
            "each time), so a retry would not be recognised.",
            hint="give the call its key: key=\"order-42\", or key_fields=[\"url\"]",
        )


def _header_key(key: str) -> bytes:
    """The key as an Idempotency-Key value: a control character, or a space or tab at either
    end (which receivers strip, so " o-1" and "o-1" would be one key upstream), is refused."""
    if key[:1] in (" ", "\t") or key[-1:] in (" ", "\t") or any(
            ord(c) < 32 or ord(c) == 127 for c in key):
        raise InvalidArgument(
            "the key cannot be sent as Idempotency-Key",
            detail="It holds a control character, or a space or tab at either end.",
            hint='use upstream_key="record" (the default) to send the record\'s uuid, or a '
            "key without them",
        )
    return key.encode("utf-8")
