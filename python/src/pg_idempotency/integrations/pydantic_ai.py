"""Pydantic AI: an `@agent.tool` keyed on the agent run, not on the model's tool-call id.

    from pydantic_ai import Agent, RunContext
    from pg_idempotency.integrations.pydantic_ai import idempotent_tool

    @agent.tool
    @idempotent_tool(ttl=86_400)
    async def send_email(ctx: RunContext[Deps], to: str, subject: str) -> dict:
        '''Send an email.'''
        ...

    await agent.run("...", run_id=request_id)

The key is `agent_key(ctx.run_id, "send_email", {"to": ..., "subject": ...})`. The run id is
the one `agent.run(..., run_id=...)` was given; inside a Temporal workflow or a DBOS
workflow Pydantic AI derives it from the workflow, so it stays the same when the engine
runs the workflow again. Without it every run gets a fresh id: a re-planned step in the
run is deduplicated, a retried run is not. `run_id=lambda ctx: ctx.conversation_id` keys on
the conversation instead (a later request in it with the same arguments replays)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ._tool import check_members, context_parameter, decorate, run_keyed

F = TypeVar("F", bound=Callable[..., Any])

_HINT = ("run the agent with an id that stays the same when it is retried: "
         "agent.run(prompt, run_id=request_id), or idempotent_tool(run_id=lambda ctx: ...)")


def run_id_of(ctx: Any) -> Any:
    """The default run id: `RunContext.run_id`."""
    return getattr(ctx, "run_id", None)


def idempotent_tool(fn: F | None = None, /, *, run_id: Callable[[Any], Any] | None = None,
                    tool: str | None = None, **members: Any) -> Any:
    """`@idempotent` for a Pydantic AI tool whose first parameter is a RunContext: keyed
    on the run id (or `run_id=`'s reading of the RunContext), the tool's name (`tool=`,
    default the function's) and the other arguments. `members` are @idempotent's (ttl,
    store, scope, ...). Put `@agent.tool` above it."""
    from pydantic_ai import RunContext

    check_members(members)

    def wrap(f: F) -> F:
        context = context_parameter(
            f, (RunContext,), "RunContext",
            "make the first parameter ctx: RunContext[YourDeps] and register the tool with "
            "@agent.tool, or use @idempotent (with @agent.tool_plain) for a key of the "
            "arguments alone")
        return run_keyed(f, context=context, run_id=run_id or run_id_of, tool=tool,
                         no_run_id_hint=_HINT, members=members)

    return decorate(fn, wrap)
