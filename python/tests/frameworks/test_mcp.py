"""An MCP server written with the MCP SDK (MCPServer, FastMCP before mcp 2) whose tool is
idempotent, called by the SDK's own Client more than once: in process (the SDK's direct
dispatch, and JSON-RPC over its in-memory streams), across a reconnect, and as a stdio
server whose process is restarted between the calls. One email per key."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("mcp", reason="mcp is not installed (requirements/frameworks.txt)")

from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import Context, MCPServer

from pg_idempotency import AsyncStore, InvalidArgument, KeyWarning, agent_key
from pg_idempotency.integrations.mcp import idempotent_tool

ARGS = {"to": "ann@example.com", "subject": "Your order \u00e9t\u00e9 #42"}
MODES = ["auto", "legacy"]  # the SDK's direct dispatch; the initialize handshake and JSON-RPC


def mail_server(astore: AsyncStore, scope: str, outbox: list[tuple[str, str]]) -> MCPServer:
    server = MCPServer("mail")

    @server.tool()
    @idempotent_tool(store=astore, scope=scope)
    async def send_email(to: str, subject: str, ctx: Context) -> dict[str, str]:
        """Send an email."""
        outbox.append((to, subject))
        return {"message_id": f"m-{len(outbox)}", "to": to}

    return server


def structured(result: Any) -> Any:
    assert not result.is_error, result
    return result.structured_content


async def test_the_schema_is_the_one_without_the_decorator() -> None:
    async def send_email(to: str, subject: str, ctx: Context) -> dict[str, str]:
        """Send an email."""
        return {}

    bare, adapted = MCPServer("a"), MCPServer("b")
    bare.tool()(send_email)
    adapted.tool()(idempotent_tool(send_email))
    async with Client(bare) as a, Client(adapted) as b:
        ta, tb = (await a.list_tools()).tools[0], (await b.list_tools()).tools[0]
    assert (ta.name, ta.description, ta.input_schema, ta.output_schema) == \
        (tb.name, tb.description, tb.input_schema, tb.output_schema)
    assert set(tb.input_schema["properties"]) == {"to", "subject"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_retried_call_sends_one_email(astore: AsyncStore, scope: str, mode: str) -> None:
    """A retry is a new request (a new JSON-RPC id): keyed on the arguments' hash."""
    outbox: list[tuple[str, str]] = []
    server = mail_server(astore, scope, outbox)
    async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
        first = structured(await client.call_tool("send_email", ARGS))
        again = structured(await client.call_tool(
            "send_email", {"subject": ARGS["subject"], "to": ARGS["to"]}))
    assert outbox == [(ARGS["to"], ARGS["subject"])]
    assert first == again == {"message_id": "m-1", "to": ARGS["to"]}


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_keyed_call_replays_across_a_reconnect(
        astore: AsyncStore, scope: str, mode: str) -> None:
    """The agent names the call with agent_key in _meta; it reconnects (its process restarted)
    and makes the call again; another run sends its own email."""
    outbox: list[tuple[str, str]] = []
    server = mail_server(astore, scope, outbox)
    run = str(uuid.uuid4())
    meta = {"idempotencyKey": agent_key(run, "send_email", ARGS)}
    async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
        first = structured(await client.call_tool("send_email", ARGS, meta=meta))
    async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
        again = structured(await client.call_tool("send_email", ARGS, meta=meta))
        other = structured(await client.call_tool(
            "send_email", ARGS,
            meta={"pg-idempotency/key": agent_key(str(uuid.uuid4()), "send_email", ARGS)}))
    assert first == again == {"message_id": "m-1", "to": ARGS["to"]}
    assert other == {"message_id": "m-2", "to": ARGS["to"]}
    assert len(outbox) == 2


async def test_a_key_reused_with_other_arguments_is_refused(
        astore: AsyncStore, scope: str) -> None:
    outbox: list[tuple[str, str]] = []
    server = mail_server(astore, scope, outbox)
    meta = {"idempotencyKey": f"order-42-{uuid.uuid4()}"}
    async with Client(server) as client:
        structured(await client.call_tool("send_email", ARGS, meta=meta))
        refused = await client.call_tool("send_email", dict(ARGS, to="bob@example.com"),
                                         meta=meta)
    assert refused.is_error
    told = json.dumps(refused.model_dump(mode="json"))
    assert "idempotency key reused with a different request" in told
    assert "HINT: Use a new key for a different request" in told
    assert len(outbox) == 1


async def test_a_tool_call_id_sent_as_the_key_is_warned_about(
        astore: AsyncStore, scope: str) -> None:
    outbox: list[tuple[str, str]] = []
    server = mail_server(astore, scope, outbox)
    async with Client(server) as client:
        with pytest.warns(KeyWarning, match="Anthropic tool-use id"):
            await client.call_tool("send_email", ARGS,
                                   meta={"idempotencyKey": "toolu_01A09q90qw90lq917835lq9"})


def test_the_adapter_names_what_is_missing() -> None:
    async def no_context(to: str) -> str:
        return to

    with pytest.raises(InvalidArgument, match="takes no Context"):
        idempotent_tool(no_context)

    async def optional_context(to: str, ctx: Context | None = None) -> str:
        return to

    assert idempotent_tool(optional_context).__wrapped__.__name__ == "optional_context"


SERVER = Path(__file__).with_name("mcp_mail_server.py")


async def test_a_stdio_server_restarted_between_the_calls_sends_one_email(
        dsn: str, sql: psycopg.Connection, scope: str) -> None:
    """The server is its own process (the SDK's stdio transport), writing to an outbox
    table; the first process ends after the call, a new one answers the retry."""
    sql.execute("CREATE TABLE IF NOT EXISTS py_frameworks_outbox "
                "(scope text, recipient text, subject text)")
    params = StdioServerParameters(
        command=sys.executable, args=[str(SERVER)],
        env={**os.environ, "PGIDEM_DSN": dsn, "MAIL_SCOPE": scope})
    results = []
    for _ in range(2):  # two server processes, one after the other
        async with Client(params) as client:
            results.append(structured(await client.call_tool("send_email", ARGS)))
    rows = sql.execute("SELECT recipient, subject FROM py_frameworks_outbox WHERE scope = %s",
                       (scope,)).fetchall()
    assert rows == [(ARGS["to"], ARGS["subject"])]
    assert results[0] == results[1]
    assert results[0]["to"] == ARGS["to"]
