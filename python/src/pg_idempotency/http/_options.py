"""A call's keywords: httpx's own, and the idempotency settings (the decorator's members,
less those that name a function's parameters), split and checked."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from ..errors import InvalidArgument
from ..settings import Idempotent, KeyStrategy, OnCacheHit, OnMismatch, Seconds, UnknownOutcome

if TYPE_CHECKING:
    from httpx._client import UseClientDefault
    from httpx._types import (
        AuthTypes,
        CookieTypes,
        HeaderTypes,
        QueryParamTypes,
        RequestContent,
        RequestData,
        RequestExtensions,
        RequestFiles,
        TimeoutTypes,
    )

    from ..settings import ReconcileRead

# Build the request (httpx.Client.build_request), and send it (httpx.Client.send).
BUILD = frozenset({"content", "data", "files", "json", "params", "headers", "cookies",
                   "timeout", "extensions"})
SEND = frozenset({"auth", "follow_redirects"})
# The decorator's members that mean something for a request.
MEMBERS = frozenset({"strategy", "ttl", "on_cache_hit", "cache_failures", "lease", "wait",
                     "on_mismatch", "on_unknown_outcome", "unresolved_ttl", "key",
                     "key_fields", "fingerprint", "scope"})
UPSTREAM = ("record", "call")


class Settings(TypedDict, total=False):
    """The idempotency settings an `Actions` gives every call that changes something."""

    strategy: KeyStrategy | str
    ttl: Seconds
    on_cache_hit: OnCacheHit | str
    cache_failures: bool
    lease: Seconds
    wait: Seconds
    on_mismatch: OnMismatch | str
    on_unknown_outcome: UnknownOutcome | str | ReconcileRead
    unresolved_ttl: Seconds
    key_fields: str | Sequence[str]
    fingerprint: str | Sequence[str]
    scope: str
    upstream_key: Literal["record", "call"]


class Options(Settings, total=False):
    """One call's keywords: httpx's, the settings, and what only a call says."""

    content: RequestContent
    data: RequestData
    files: RequestFiles
    json: Any
    params: QueryParamTypes
    headers: HeaderTypes
    cookies: CookieTypes
    auth: AuthTypes | UseClientDefault | None
    follow_redirects: bool | UseClientDefault
    timeout: TimeoutTypes | UseClientDefault
    extensions: RequestExtensions
    key: str | Callable[[dict[str, Any]], str]
    side_effect: bool


def defaults_of(settings: Mapping[str, Any]) -> dict[str, Any]:
    """An `Actions`' settings, checked now rather than at its first call."""
    allowed = (MEMBERS - {"key"}) | {"upstream_key"}
    _refuse_unknown(settings, allowed, "Actions")
    given = {k: v for k, v in settings.items() if v is not None}
    upstream_of(given.get("upstream_key"))
    Idempotent.of(**{k: v for k, v in given.items() if k in MEMBERS})
    return given


def split(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any],
                                               dict[str, Any]]:
    """(build_request's, send's, the settings given, the call's own: upstream_key and
    side_effect)."""
    _refuse_unknown(options, BUILD | SEND | MEMBERS | {"upstream_key", "side_effect"}, "a call")
    build = {k: v for k, v in options.items() if k in BUILD}
    send = {k: v for k, v in options.items() if k in SEND}
    members = {k: v for k, v in options.items() if k in MEMBERS and v is not None}
    own = {k: v for k, v in options.items() if k in ("upstream_key", "side_effect")}
    return build, send, members, own


def upstream_of(value: Any) -> str:
    """Which key goes upstream: the record's uuid (default) or the call's key."""
    if value is None:
        return "record"
    if value not in UPSTREAM:
        raise InvalidArgument(
            'upstream_key must be "record" or "call"',
            detail=f"upstream_key is {value!r}.",
            hint='"record" (the default) sends the record\'s uuid, the same on every attempt '
            'and unique per scope and key; "call" sends the call\'s own key',
        )
    return str(value)


def _refuse_unknown(given: Mapping[str, Any], allowed: frozenset[str], whose: str) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise InvalidArgument(
            f"{whose} got unknown keyword(s): {', '.join(unknown)}",
            hint=f"the keywords are: {', '.join(sorted(allowed))}",
        )
