"""What the framework adapters share: find the parameter through which the framework hands
a tool its context, and make `@idempotent` key the call on what that context says (the
run's id) and the other arguments, never on the per-turn tool-call id."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from ..agent_keys import agent_key
from ..decorator import idempotent
from ..errors import InvalidArgument

F = TypeVar("F", bound=Callable[..., Any])

# The adapters make the key: these members would name another one.
_KEY_MEMBERS = ("key", "key_fields", "strategy")


def context_parameter(fn: Callable[..., Any], classes: tuple[type, ...], what: str,
                      hint: str) -> str:
    """The name of fn's parameter annotated with one of `classes` (or a generic of one)."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that cannot be resolved here: read it as written
        hints = {}
    names = {c.__name__ for c in classes}
    for name, p in inspect.signature(fn).parameters.items():
        ann = hints.get(name, p.annotation)
        # The annotation, a generic of it (RunContext[Deps]), or a union holding it (Context
        # | None, which the MCP SDK injects too).
        for t in (ann, *typing.get_args(ann)):
            origin = typing.get_origin(t) or t
            if origin in classes or _subclass(origin, classes):
                return name
        if isinstance(ann, str) and ann.split("[", 1)[0].split(".")[-1].strip() in names:
            return name
    raise InvalidArgument(
        f"{getattr(fn, '__qualname__', fn)} takes no {what}",
        detail="The key of a tool call is the run's id, the tool and its arguments; the run's "
        f"id comes from the {what} the framework passes to the tool.",
        hint=hint,
    )


def _subclass(t: Any, classes: tuple[type, ...]) -> bool:
    try:
        return inspect.isclass(t) and issubclass(t, classes)
    except TypeError:  # a TypedDict (RunnableConfig) refuses class checks
        return False


def excluded_names(members: dict[str, Any]) -> tuple[str, ...]:
    excluded = members.get("exclude") or ()
    return (excluded,) if isinstance(excluded, str) else tuple(excluded)


def check_members(members: dict[str, Any], context: str | None = None,
                  adapter: str = "idempotent_tool") -> None:
    """Refuse the members that would name another key, or hide the context parameter."""
    for name in _KEY_MEMBERS:
        if members.get(name) is not None:
            raise InvalidArgument(
                f"{adapter} makes the key itself: {name}= names another one",
                hint="drop it, or use @idempotent(key=...) for a key of your own",
            )
    if context is not None and context in excluded_names(members):
        raise InvalidArgument(
            f"{adapter} reads the run's id from {context!r}: it cannot be excluded",
            hint="the context parameter is never part of the key's arguments; drop it from "
            "exclude=",
        )


def run_keyed(fn: F, *, context: str, run_id: Callable[[Any], Any], tool: str | None,
              no_run_id_hint: str, members: dict[str, Any]) -> F:
    """@idempotent keyed on agent_key(run_id(context), tool, the other arguments)."""
    check_members(members, context)
    name = tool or fn.__name__

    def key(input: dict[str, Any]) -> str:
        rid = run_id(input[context])
        if not isinstance(rid, str) or not rid.strip():
            raise InvalidArgument(
                f"no run id for the call of {name}",
                detail=f"The run id read from {context!r} is {rid!r}.",
                hint=no_run_id_hint,
            )
        return agent_key(rid, name, {k: v for k, v in input.items() if k != context})

    wrapped: F = idempotent(key=key, **members)(fn)
    return wrapped


def decorate(fn: F | None, wrap: Callable[[F], F]) -> Any:
    """`@adapter` and `@adapter(...)` alike."""
    return wrap(fn) if fn is not None else wrap
