#!/usr/bin/env python3
"""An MCP caller written with the official Python SDK (`mcp` 2.x ClientSession), for
pg_idempotency's MCP proxy trials. Same command line and output as ts_client.mjs.

    py_client.py (--http URL | --stdio -- CMD ARGS...) [--header 'K: V']... [--timeout S] [--progress]
        ( --list
        | --tool NAME [--args JSON] [--meta JSON] [--repeat N]
        | --calls FILE )

--stdio starts CMD with this process's whole environment (the SDK would pass only a safe
subset), so COUNTING_LOG and friends reach the server. --header adds an HTTP header to every
request of the HTTP transport. --meta is sent as the tools/call request's `_meta`.
--calls FILE: one JSON object a line, {"tool": ..., "args": {...}, "meta": {...}}, all in
one session. --timeout: seconds to wait for each call's answer (default 60; connecting and
--list wait at least 30). --progress: ask for
progress notifications and print each as {"progress": {...}} before the call's line.

Output (stdout), one JSON line per call: the CallToolResult in its wire shape (content,
structuredContent, isError, _meta: the SDK's model dumped by alias, only the fields the server
sent), or
{"error": {"code", "message", "data"}} when the server answered with a JSON-RPC error.
--list prints the tools/list result as one line. Exit 0 when every call got an answer (a tool
error or a JSON-RPC error is an answer); 2 when the server cannot be reached or the connection
fails, with the reason on stderr; 64 on a bad command line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED


class Usage(Exception):
    pass


def parse_args(argv: list[str]) -> argparse.Namespace:
    server_cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, server_cmd = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(prog="py_client.py", description="MCP caller (Python SDK)")
    p.add_argument("--http", metavar="URL")
    p.add_argument("--stdio", action="store_true")
    p.add_argument("--tool")
    p.add_argument("--args", default="{}")
    p.add_argument("--meta")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--list", action="store_true")
    p.add_argument("--calls", metavar="FILE")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--progress", action="store_true")
    a = p.parse_args(argv)
    a.server_cmd = server_cmd
    if bool(a.http) == bool(a.stdio):
        raise Usage("give exactly one of --http URL or --stdio -- CMD ARGS...")
    if a.stdio and not server_cmd:
        raise Usage("--stdio needs the server command after --")
    if sum([bool(a.tool), a.list, bool(a.calls)]) != 1:
        raise Usage("give exactly one of --tool NAME, --list or --calls FILE")
    headers: dict[str, str] = {}
    for h in a.header:
        if ":" not in h:
            raise Usage(f"--header wants 'Name: value', got {h!r}")
        k, v = h.split(":", 1)
        headers[k.strip()] = v.strip()
    a.headers = headers
    try:
        if a.tool:
            call = {"tool": a.tool, "args": json.loads(a.args), "meta": json.loads(a.meta) if a.meta else None}
            a.call_list = [call] * a.repeat
        elif a.calls:
            with open(a.calls, encoding="utf-8") as f:
                a.call_list = [json.loads(line) for line in f if line.strip()]
    except (json.JSONDecodeError, OSError) as e:
        raise Usage(f"bad --args/--meta/--calls: {e}") from e
    return a


def emit(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def wire(model: Any) -> Any:
    # exclude_unset: the fields the server sent, not the 2.x models' defaults for fields of the
    # 2026-07-28 revision (resultType, ttlMs, cacheScope) that the handshake revisions lack.
    return model.model_dump(by_alias=True, exclude_unset=True, mode="json")


class ConnectionLost(Exception):
    pass


# The errors the SDK makes up itself when the connection or a response stream is lost (code
# -32000, no data): told apart from a server's JSON-RPC errors by their messages.
LOCAL = re.compile(r"^(Connection closed$|SSE stream |server answered a request with 202 Accepted$)")


async def run(a: argparse.Namespace) -> None:
    failure: list[BaseException] = []

    async def on_message(message: Any) -> None:
        # Transport faults (a refused connection, an HTTP error status, a dead process) arrive
        # here as exceptions; the request they belong to would otherwise wait for its timeout.
        if isinstance(message, Exception):
            failure.append(message)
            tg.cancel_scope.cancel()

    async with AsyncExitStack() as stack:
        if a.http:
            http = await stack.enter_async_context(create_mcp_http_client(headers=a.headers or None))
            read, write = await stack.enter_async_context(streamable_http_client(a.http, http_client=http))
        else:
            params = StdioServerParameters(command=a.server_cmd[0], args=a.server_cmd[1:], env=dict(os.environ))
            read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(read, write, read_timeout_seconds=max(a.timeout, 30.0), message_handler=on_message)
        )
        async with anyio.create_task_group() as tg:

            async def work() -> None:
                await session.initialize()
                print(f"py_client: protocol {session.protocol_version}", file=sys.stderr)
                if a.list:
                    emit(wire(await session.list_tools()))
                    return
                for call in a.call_list:

                    async def progress(p: float, total: float | None, message: str | None) -> None:
                        emit({"progress": {"progress": p, "total": total, "message": message}})

                    try:
                        result = await session.call_tool(
                            call["tool"],
                            call.get("args") or {},
                            read_timeout_seconds=a.timeout,
                            progress_callback=progress if a.progress else None,
                            meta=call.get("meta"),
                        )
                        emit(wire(result))
                    except MCPError as e:
                        if e.error.code == CONNECTION_CLOSED and e.error.data is None and LOCAL.match(e.error.message):
                            raise ConnectionLost(e.error.message) from e
                        emit({"error": wire(e.error)})

            await work()
    if failure:
        raise ConnectionLost(repr(failure[0]))


def main() -> int:
    try:
        a = parse_args(sys.argv[1:])
    except Usage as e:
        print(f"py_client: {e}", file=sys.stderr)
        return 64
    try:
        anyio.run(run, a)
    except BaseException as e:  # noqa: BLE001 - anyio wraps task failures in exception groups
        leaf = first_leaf(e)
        if isinstance(leaf, (KeyboardInterrupt, SystemExit)):
            raise
        print(f"py_client: connection failed: {type(leaf).__name__}: {leaf}", file=sys.stderr)
        return 2
    return 0


def first_leaf(e: BaseException) -> BaseException:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


if __name__ == "__main__":
    sys.exit(main())
