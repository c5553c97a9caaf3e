"""The OpenAI Agents SDK: a `@function_tool` keyed on the run, not on the model's call id.

    from agents import RunContextWrapper, function_tool
    from pg_idempotency.integrations.openai_agents import idempotent_tool

    @function_tool
    @idempotent_tool(ttl=86_400)
    def send_email(ctx: RunContextWrapper[Job], to: str, subject: str) -> dict:
        '''Send an email.'''
        ...

    await Runner.run(agent, "...", context=Job(run_id=request_id))

The key is `agent_key(run_id, "send_email", {"to": ..., "subject": ...})`. The SDK has no
run id of its own that survives a retry, so the run id is the context's: its `run_id`
attribute (or item), or what `run_id=lambda ctx: ...` reads from the RunContextWrapper.
function_tool builds the same schema and description as without the adapter (the
signature and docstring are kept; the context parameter is not part of the schema)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ._tool import check_members, context_parameter, decorate, run_keyed

F = TypeVar("F", bound=Callable[..., Any])

_HINT = ("give the run's id in the context: Runner.run(agent, input, context=Job(run_id=...)), "
         "or say where it is: idempotent_tool(run_id=lambda ctx: ctx.context.job_id)")


def context_run_id(ctx: Any) -> Any:
    """The default run id: the context's `run_id` attribute, or its "run_id" item."""
    context = getattr(ctx, "context", None)
    if isinstance(context, Mapping):
        return context.get("run_id")
    return getattr(context, "run_id", None)


def idempotent_tool(fn: F | None = None, /, *, run_id: Callable[[Any], Any] | None = None,
                    tool: str | None = None, **members: Any) -> Any:
    """`@idempotent` for a function tool whose first parameter is a RunContextWrapper (or
    ToolContext): keyed on the run id, the tool's name (`tool=`, default the function's)
    and the other arguments. `members` are @idempotent's (ttl, store, scope, ...)."""
    from agents import RunContextWrapper

    check_members(members)

    def wrap(f: F) -> F:
        context = context_parameter(
            f, (RunContextWrapper,), "RunContextWrapper",
            "make the first parameter ctx: RunContextWrapper[YourContext], or use "
            "@idempotent for a key of the arguments alone")
        return run_keyed(f, context=context, run_id=run_id or context_run_id, tool=tool,
                         no_run_id_hint=_HINT, members=members)

    return decorate(fn, wrap)
