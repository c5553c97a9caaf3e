#!/usr/bin/env python3
"""An MCP server that counts its side effects, for pg_idempotency's MCP proxy trials.

Written with the official Python SDK (`mcp` 2.x, `mcp.server.mcpserver.MCPServer`).

    counting_server.py                      # stdio
    counting_server.py --http PORT          # Streamable HTTP on http://127.0.0.1:PORT/mcp
        [--json-response]                   #   answer POSTs with JSON instead of an SSE stream
        [--stateless]                       #   no Mcp-Session-Id, a fresh transport per request

Environment:
    COUNTING_LOG       the effect log (required): one JSON line per effect, appended under an
                       exclusive flock, flushed and fsync'd BEFORE the tool answers.
    COUNTING_HOLD_DIR  where a held call announces itself and waits (see send_email's `hold`).
    COUNTING_ALIASES   more names for send_email, comma-separated (any spelling, e.g. one
                       with `@`: the SDK only warns about names outside the specification's
                       rules); each is listed and logs effects of kind "send_email".
    COUNTING_BARE      tools listed without annotations, comma-separated (`*`: all of them), as
                       most servers list their tools.

An effect line: {"n", "kind", "pid", "time", "request_id", "meta", "headers", ...the tool's
arguments}. "n" is the effect's ordinal: the log's line count after the append (all kinds
counted). "meta" is the request's `_meta` as it came on the wire (None when the request
had none); "headers" are the HTTP request's headers (lower-case names; None on stdio).

Tools:
    send_email(to, subject, body="", message_id=None, hold=False, slow_ms=0, gate=False)
        -> {"sent": n, "to": to, "message_id": message_id}; not read-only, not idempotent.
        slow_ms: sleeps that long BEFORE the effect (a cancelled call leaves no effect).
        hold: with COUNTING_HOLD_DIR set, AFTER the effect is logged the call creates
        <dir>/held-<message_id or n> and polls (20 ms) until <dir>/release exists, then answers.
        Reports progress when the caller asked for it: 0/1 "sending" first, 0.5/1 "held" once held.
        gate: with COUNTING_HOLD_DIR set, BEFORE the effect the call creates
        <dir>/gated-<message_id> ({"pid"}) and polls (20 ms) until <dir>/open exists: a test
        holds a call that has not acted yet, and decides when it may. A gated call acts once
        the gate opens even if its client has gone (stdin closed): the server process lives
        until then, as a server whose work outlives the request does.
    find_email(message_id) -> {"found": bool, "sent": n | null, "to", "message_id"}; read-only (the
        reconcile read: when found, its answer has send_email's shape).
    count_emails() -> {"count": send_email effects, "effects": all effects}; read-only.
    reject(reason) -> a tool error result (isError: true, the reason as text); logs an effect
        of kind "reject" first, so repeats can be counted.
    rpc_error(code=-32603, message=..., effect=False) -> a JSON-RPC error response (code,
        message, data {"tool", "effect"}) instead of a result; with effect=true it logs an effect
        of kind "rpc_error" first (an effect whose answer is an error).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from typing import Any, TypedDict

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, ToolAnnotations

server = MCPServer("pg-idempotency-counting-server", version="1.0.0")


def _log_path() -> str:
    path = os.environ.get("COUNTING_LOG")
    if not path:
        raise RuntimeError("COUNTING_LOG is not set: the counting server has nowhere to count effects")
    return path


def _read_effects() -> list[dict[str, Any]]:
    try:
        with open(_log_path(), encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_SH)
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def _request_info(ctx: Context) -> dict[str, Any]:
    rc = ctx.request_context
    headers = ctx.headers
    return {
        "request_id": rc.request_id,
        # The raw params keep the wire's key names; rc.meta (the SDK's parse) renames progressToken.
        "meta": (rc.params or {}).get("_meta"),
        "headers": {k.lower(): v for k, v in headers.items()} if headers is not None else None,
    }


def _write_marker(path, fields):
    """Writes a marker whole or not at all (a temporary file renamed into place): a test
    that sees the marker reads all of it."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(fields) + "\n")
    os.replace(tmp, path)


def _append_effect(kind: str, fields: dict[str, Any], ctx: Context) -> int:
    """Appends one effect line and makes it durable; returns its ordinal (line count after)."""
    with open(_log_path(), "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # one writer at a time, also across server processes
        f.seek(0)
        n = sum(1 for line in f if line.strip()) + 1
        line = {"n": n, "kind": kind, "pid": os.getpid(), "time": time.time(), **_request_info(ctx), **fields}
        f.write(json.dumps(line, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return n


class Sent(TypedDict):
    sent: int
    to: str
    message_id: str | None


class Found(TypedDict):
    found: bool
    sent: int | None
    to: str | None
    message_id: str | None


class Count(TypedDict):
    count: int
    effects: int


@server.tool(
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    description="Sends an email (counted in COUNTING_LOG). Not idempotent: each call sends one.",
)
async def send_email(
    to: str,
    subject: str,
    ctx: Context,
    body: str = "",
    message_id: str | None = None,
    hold: bool = False,
    slow_ms: int = 0,
    gate: bool = False,
) -> Sent:
    await ctx.report_progress(0, 1, "sending")
    if slow_ms > 0:
        await anyio.sleep(slow_ms / 1000)
    hold_dir = os.environ.get("COUNTING_HOLD_DIR")
    fields = {"to": to, "subject": subject, "body": body, "message_id": message_id, "hold": hold, "slow_ms": slow_ms, "gate": gate}
    if gate and hold_dir:
        # Shielded: a gated call acts once the gate opens even if its client went away (its
        # stdin closed, the session cancelled), as a server whose work outlives the request.
        with anyio.CancelScope(shield=True):
            marker = os.path.join(hold_dir, f"gated-{message_id}")
            _write_marker(marker, {"pid": os.getpid()})
            opened = os.path.join(hold_dir, "open")
            while not os.path.exists(opened):
                await anyio.sleep(0.02)
            n = _append_effect("send_email", fields, ctx)
    else:
        n = _append_effect("send_email", fields, ctx)
    if hold and hold_dir:
        marker = os.path.join(hold_dir, f"held-{message_id if message_id is not None else n}")
        _write_marker(marker, {"n": n, "pid": os.getpid()})
        await ctx.report_progress(0.5, 1, "held")
        release = os.path.join(hold_dir, "release")
        while not os.path.exists(release):
            await anyio.sleep(0.02)
    # No progress right before the answer: the TypeScript SDK (1.32) handles notifications a
    # microtask late, so one read together with the response finds its handler gone and is dropped.
    return {"sent": n, "to": to, "message_id": message_id}


@server.tool(
    annotations=ToolAnnotations(read_only_hint=True),
    description="Whether an email with this message_id was sent; when it was, the email as send_email answered it (its ordinal, to, message_id), so that its answer can stand for send_email's.",
)
def find_email(message_id: str) -> Found:
    for effect in _read_effects():
        if effect.get("kind") == "send_email" and effect.get("message_id") == message_id:
            return {"found": True, "sent": effect["n"], "to": effect.get("to"), "message_id": message_id}
    return {"found": False, "sent": None, "to": None, "message_id": None}


@server.tool(
    annotations=ToolAnnotations(read_only_hint=True),
    description="How many emails were sent (and how many effects of any kind were logged).",
)
def count_emails() -> Count:
    effects = _read_effects()
    return {"count": sum(1 for e in effects if e.get("kind") == "send_email"), "effects": len(effects)}


@server.tool(
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    description="Always fails with a tool error (isError: true) carrying the reason; each call is counted.",
)
def reject(reason: str, ctx: Context) -> CallToolResult:
    _append_effect("reject", {"reason": reason}, ctx)
    return CallToolResult(content=[TextContent(type="text", text=reason)], is_error=True)


@server.tool(
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    description="Answers with a JSON-RPC error (not a tool result); with effect=true logs an effect first.",
)
def rpc_error(ctx: Context, code: int = -32603, message: str = "rpc_error asked for", effect: bool = False) -> str:
    if effect:
        _append_effect("rpc_error", {"code": code, "message": message}, ctx)
    raise MCPError(code=code, message=message, data={"tool": "rpc_error", "effect": effect})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--json-response", action="store_true", help="HTTP: JSON responses instead of SSE")
    parser.add_argument("--stateless", action="store_true", help="HTTP: no sessions")
    args = parser.parse_args()
    _log_path()  # fail at start, not at the first effect
    for alias in filter(None, os.environ.get("COUNTING_ALIASES", "").split(",")):
        server.add_tool(
            send_email,
            name=alias,
            annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
            description="send_email under another name.",
        )
    bare = set(filter(None, os.environ.get("COUNTING_BARE", "").split(",")))
    for tool in server._tool_manager.list_tools():  # noqa: SLF001 (the SDK has no setter)
        if "*" in bare or tool.name in bare:
            tool.annotations = None
    if args.http is None:
        server.run("stdio")
    else:
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=args.http,
            streamable_http_path="/mcp",
            json_response=args.json_response,
            stateless_http=args.stateless,
        )


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as e:
        print(f"counting_server: {e}", file=sys.stderr)
        sys.exit(2)
