"""An MCP server written with the MCP SDK (`MCPServer`, FastMCP before mcp 2): a tool keyed
as pg-idempotency-mcp keys it (docs/mcp.md, "The key").

    from mcp.server.mcpserver import Context, MCPServer
    from pg_idempotency.integrations.mcp import idempotent_tool

    server = MCPServer("mail")

    @server.tool()
    @idempotent_tool(ttl=86_400)
    async def send_email(to: str, subject: str, ctx: Context) -> dict:
        ...

The key is the request's `_meta` "pg-idempotency/key" or "idempotencyKey" (the MCP proposal
SEP-3182), else the arguments' HASH_INPUT digest; never the JSON-RPC id, which a retry
changes. The fingerprint is the arguments either way: the same key with other arguments is
refused (Mismatch). An agent that wants its run in the key sends
`_meta={"idempotencyKey": pg_idempotency.agent_key(run_id, tool, arguments)}`.
The server injects `ctx: Context`; it is not part of the tool's schema. A refusal (Mismatch,
InProgress, OutcomeUnknown, a remembered failure, ...) reaches the client as the tool's
error with its detail and hint (a ToolError), not as the server's "Error executing tool"."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..canonical import input_hash
from ..decorator import idempotent
from ..errors import GrantRoleCaller, IdempotencyError, NotInstalled, NotPermitted, StoreUnavailable
from ._tool import check_members, context_parameter, decorate, excluded_names

F = TypeVar("F", bound=Callable[..., Any])

KEY_META = ("pg-idempotency/key", "idempotencyKey")

# The operator's problems, not the caller's: the server logs them, the client is told only
# that the tool failed.
_SERVER_SIDE = (StoreUnavailable, NotInstalled, NotPermitted, GrantRoleCaller)


def meta_key(ctx: Any) -> str | None:
    """The key the request's `_meta` names, if any."""
    try:
        meta = ctx.request_context.meta
    except (AttributeError, LookupError, ValueError):  # outside a request
        return None
    if not isinstance(meta, Mapping):
        return None
    for name in KEY_META:
        value = meta.get(name)
        if isinstance(value, str) and value.strip():
            return value
    return None


def idempotent_tool(fn: F | None = None, /, **members: Any) -> Any:
    """`@idempotent` for an MCP server's tool that takes `ctx: Context`: keyed on the
    request's `_meta` key, else the hash of the arguments; fingerprinted by the arguments.
    `members` are @idempotent's (ttl, store, scope, ...). Put `@server.tool()` above it."""
    from mcp.server.mcpserver import Context

    check_members(members)

    def wrap(f: F) -> F:
        context = context_parameter(
            f, (Context,), "Context",
            "add a parameter ctx: Context (the server injects it and keeps it out of the "
            "tool's schema), or use @idempotent for a key of the arguments alone")
        check_members(members, context)
        excluded = excluded_names(members)
        arguments = [p for p in inspect.signature(f).parameters
                     if p != context and p not in excluded]

        def key(input: dict[str, Any]) -> str:
            args = {k: v for k, v in input.items() if k != context}
            return meta_key(input[context]) or input_hash(args)

        return _told_to_the_client(
            idempotent(key=key, **{"fingerprint": arguments or None, **members})(f))

    return decorate(fn, wrap)


def _told_to_the_client(fn: F) -> F:
    """A refusal raised as the SDK's ToolError: the client sees its message, detail and
    hint (the model can act on them); any other exception stays the server's crash."""
    from mcp.server.mcpserver.exceptions import ToolError

    def told(e: IdempotencyError) -> ToolError:
        return ToolError(str(e))

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_tool(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except IdempotencyError as e:
                if isinstance(e, _SERVER_SIDE):
                    raise
                raise told(e) from e

        return async_tool  # type: ignore[return-value]

    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except IdempotencyError as e:
            if isinstance(e, _SERVER_SIDE):
                raise
            raise told(e) from e

    return tool  # type: ignore[return-value]
