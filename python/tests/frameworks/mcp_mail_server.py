"""A stdio MCP server for test_mcp.py: its send_email tool writes a row to an outbox table
(the effect, seen by the test from another process) and is keyed by the MCP adapter.
PGIDEM_DSN names the database, MAIL_SCOPE the scope."""

from __future__ import annotations

import os
import uuid

import psycopg
from mcp.server.mcpserver import Context, MCPServer

import pg_idempotency
from pg_idempotency.integrations.mcp import idempotent_tool

DSN = os.environ["PGIDEM_DSN"]
SCOPE = os.environ["MAIL_SCOPE"]
PREPARE = os.environ.get("PGIDEM_STATEMENTS") != "unnamed"

pg_idempotency.configure(DSN, prepare=PREPARE)
server = MCPServer("mail")


@server.tool()
@idempotent_tool(scope=SCOPE)
async def send_email(to: str, subject: str, ctx: Context) -> dict[str, str]:
    """Send an email."""
    kw = {} if PREPARE else {"prepare_threshold": None}
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True, **kw) as conn:
        await conn.execute("INSERT INTO py_frameworks_outbox VALUES (%s, %s, %s)",
                           (SCOPE, to, subject))
    return {"message_id": str(uuid.uuid4()), "to": to}


if __name__ == "__main__":
    server.run("stdio")
