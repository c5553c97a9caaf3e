#!/usr/bin/env python3
"""The agent of scripts/mcp-demo.sh: an MCP client written with the official Python SDK
(`mcp` 2.x, ClientSession over Streamable HTTP) that sends one email with the `send_email`
tool, over a flaky network.

    mcp_demo_agent.py --url http://127.0.0.1:PORT/mcp [--record FILE]

The agent names its logical call once, with a key it makes itself (`_meta`
"pg-idempotency/key"), and keeps that key for every attempt of the call, as an agent that
retries tool calls should. It reaches the server through a TCP relay of its own that plays
the flaky network: the connection that carries the first `tools/call` is closed once the
server's answer was produced, and the agent gets none of it. Then:

    attempt 1  the call; its answer is lost on the way back
    attempt 2  the agent's retry after the lost connection (same key, a new connection)
    attempt 3  a plain duplicate: the agent's step runs again (it restarted from its last
               checkpoint, say) and sends the same tool call, key included

For each attempt it prints what happened: lost, or the answer, with the mark
`_meta["pg-idempotency/call"]` that pg-idempotency-mcp puts on every deduplicated result
(`replayed` false: the tool ran; true: the first run's result, replayed). A server reached
directly has no such mark. --record FILE: the mark's scope and key, tab-separated, for the
demo to look the record up. Exit 0 after the three attempts; 3 when the relay lost nothing
(the demo would show nothing), 2 when the server could not be reached at all.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

# The SDK warns when a session's DELETE is answered with anything but 200 or 204; the proxy
# (rmcp's Streamable HTTP server) answers 202 Accepted, and the session ends all the same.
logging.getLogger("mcp.client.streamable_http").addFilter(
    lambda r: not r.getMessage().startswith("Session termination failed: 202")
)

MARK = "pg-idempotency/call"
KEY = "pg-idempotency/key"


class FlakyRelay:
    """A TCP relay in front of an HTTP server that loses one answer.

    The first connection whose request carries a `tools/call` is marked; from then on what
    the server sends back on it is read and thrown away until the JSON-RPC answer is in it
    (a "result" or an "error" member), and then both sides of it are closed. The server did
    all its work; the client hears nothing but a closed connection."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.armed = True
        self.lost = 0
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for w in list(self.writers):
            w.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(self.host, self.port)
        except OSError:
            client_w.close()
            return
        self.writers |= {client_w, up_w}
        this_one = False

        async def upward() -> None:
            nonlocal this_one
            tail = b""
            while data := await client_r.read(65536):
                seen = tail + data
                if b'"tools/call"' in seen and self.armed:
                    self.armed, this_one = False, True
                tail = seen[-32:]
                up_w.write(data)
                await up_w.drain()

        async def downward() -> None:
            swallowed = b""
            while data := await up_r.read(65536):
                if this_one:
                    swallowed += data
                    if b'"result"' in swallowed or b'"error"' in swallowed:
                        self.lost += 1  # the whole answer was produced; none of it goes on
                        return
                    continue
                client_w.write(data)
                await client_w.drain()

        tasks = [asyncio.ensure_future(upward()), asyncio.ensure_future(downward())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass
        finally:
            for t in tasks:
                t.cancel()
            for w in (client_w, up_w):
                w.close()
                self.writers.discard(w)


class Lost(Exception):
    pass


async def call_send_email(url: str, args: dict[str, Any], key: str) -> dict[str, Any]:
    """One attempt on a connection of its own: the result in its wire shape, or Lost."""
    failure: list[BaseException] = []
    result: dict[str, Any] = {}

    async def on_message(message: Any) -> None:
        # The SDK hands transport faults (a connection closed before the answer) to the
        # session's message handler; the call would otherwise wait for its timeout.
        if isinstance(message, Exception):
            failure.append(message)
            tg.cancel_scope.cancel()

    try:
        async with create_mcp_http_client() as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=30, message_handler=on_message) as session:
                    async with anyio.create_task_group() as tg:
                        await session.initialize()
                        r = await session.call_tool("send_email", args, read_timeout_seconds=30, meta={KEY: key})
                        result = r.model_dump(by_alias=True, exclude_unset=True, mode="json")
    except MCPError as e:
        raise Lost(e.error.message) from e
    except Exception as e:  # noqa: BLE001 - what the SDK raises when the connection dies varies
        raise Lost(reason(e)) from e
    if failure:
        raise Lost(reason(failure[0]))
    if not result:
        raise Lost("no answer")
    return result


def reason(e: BaseException) -> str:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"


def describe(result: dict[str, Any]) -> str:
    sent = (result.get("structuredContent") or {}).get("sent")
    mark = (result.get("_meta") or {}).get(MARK)
    told = f"the server says: email #{sent} sent"
    if mark is None:
        return f"answered; {told} (no proxy: nothing tells whether it ran again)"
    if mark.get("replayed"):
        return f"REPLAYED by the proxy (the tool did not run); {told}"
    return f"RAN: the tool sent it; {told}"


async def main_async(a: argparse.Namespace) -> int:
    target = urlsplit(a.url)
    relay = FlakyRelay(target.hostname or "127.0.0.1", target.port or 80)
    port = await relay.start()
    url = urlunsplit((target.scheme, f"127.0.0.1:{port}", target.path, target.query, ""))

    # One logical call, one key, made once and kept across its retries.
    key = f"send-email-{uuid.uuid4()}"
    args = {"to": "ann@example.com", "subject": "Your order has shipped", "body": "Order 1042 is on its way."}
    print(f"  the agent names its call: _meta {{\"{KEY}\": \"{key}\"}}")
    attempts = [
        "attempt 1, the call",
        "attempt 2, the agent's retry (same key)",
        "attempt 3, the step run again (a duplicate)",
    ]
    mark: dict[str, Any] | None = None
    answered = 0
    try:
        for what in attempts:
            try:
                result = await call_send_email(url, args, key)
            except Lost as e:
                print(f"  {what}: LOST on its way back (the connection closed: {e})")
                continue
            answered += 1
            mark = (result.get("_meta") or {}).get(MARK) or mark
            print(f"  {what}: {describe(result)}")
    finally:
        await relay.stop()
    if relay.lost == 0:
        print("mcp_demo_agent: the relay lost no answer: the server was not reached?", file=sys.stderr)
        return 2 if answered == 0 else 3
    if a.record and mark is not None:
        with open(a.record, "w", encoding="utf-8") as f:
            f.write(f"{mark.get('scope')}\t{mark.get('key')}\n")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="the MCP server's Streamable HTTP endpoint")
    p.add_argument("--record", metavar="FILE", help="write the proxy mark's scope and key here")
    return anyio.run(main_async, p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
