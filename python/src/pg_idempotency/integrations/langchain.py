"""LangChain and LangGraph: a `@tool` keyed on the graph's thread, not on the model's
tool-call id.

    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import tool
    from pg_idempotency.integrations.langchain import idempotent_tool

    @tool
    @idempotent_tool(ttl=86_400)
    def send_email(to: str, subject: str, config: RunnableConfig) -> dict:
        '''Send an email.'''
        ...

    graph.invoke(inputs, {"configurable": {"thread_id": "order-42"}})

The key is `agent_key(thread_id, "send_email", {"to": ..., "subject": ...})`: the thread id
is what a checkpointer resumes a graph by, so a tools node that runs again after a crash,
a re-planned step and a retried turn on the same thread all replay the first call. LangChain
injects the `config: RunnableConfig` parameter (or LangGraph's `runtime: ToolRuntime`); it
is not part of the tool's schema. `run_id=lambda config: ...` reads another id from it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ._tool import check_members, context_parameter, decorate, run_keyed

F = TypeVar("F", bound=Callable[..., Any])

_HINT = ('invoke the graph with a thread: graph.invoke(inputs, {"configurable": {"thread_id": '
         '...}}), or say where the run id is: idempotent_tool(run_id=lambda config: ...)')


def thread_id(config_or_runtime: Any) -> Any:
    """The default run id: the config's `configurable.thread_id` (a ToolRuntime's config's)."""
    config = getattr(config_or_runtime, "config", config_or_runtime)
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    return configurable.get("thread_id") if isinstance(configurable, Mapping) else None


def _context_classes() -> tuple[type, ...]:
    from langchain_core.runnables import RunnableConfig

    classes: list[type] = [RunnableConfig]
    try:
        from langgraph.prebuilt import ToolRuntime
    except ImportError:  # LangChain without LangGraph: the config alone
        pass
    else:
        classes.append(ToolRuntime)
    return tuple(classes)


def idempotent_tool(fn: F | None = None, /, *, run_id: Callable[[Any], Any] | None = None,
                    tool: str | None = None, **members: Any) -> Any:
    """`@idempotent` for a LangChain tool function that takes `config: RunnableConfig` (or
    `runtime: ToolRuntime`): keyed on the thread id (or `run_id=`'s reading of the config),
    the tool's name (`tool=`, default the function's) and the other arguments. `members`
    are @idempotent's (ttl, store, scope, ...). Put `@tool` above it."""

    check_members(members)

    def wrap(f: F) -> F:
        context = context_parameter(
            f, _context_classes(), "RunnableConfig",
            "add a parameter config: RunnableConfig (LangChain injects it and keeps it out of "
            "the tool's schema), or use @idempotent for a key of the arguments alone")
        return run_keyed(f, context=context, run_id=run_id or thread_id, tool=tool,
                         no_run_id_hint=_HINT, members=members)

    return decorate(fn, wrap)
