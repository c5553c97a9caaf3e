"""A call's input (its arguments by name) and its key under each strategy."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from . import _sql
from .agent_keys import tool_call_id_in, warn_if_tool_call_id
from .errors import InvalidArgument
from .settings import Idempotent, KeyStrategy

# A first parameter of these names is the receiver of a method: not part of the input.
_RECEIVERS = ("self", "cls")


class Binder:
    """Binds a function's arguments to its parameter names: the call's input is a dict of
    them (defaults applied), the way an agent framework passes a tool's JSON arguments, so
    a Python tool and another language's tool of the same name and input share keys."""

    def __init__(self, fn: Callable[..., Any], leave_out: tuple[str, ...]) -> None:
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        self.receiver = params[0].name if params and params[0].name in _RECEIVERS else None
        names = {p.name for p in params}
        missing = [n for n in leave_out if n not in names]
        if missing:
            raise InvalidArgument(
                f"{getattr(fn, '__qualname__', fn)} has no parameter {missing[0]!r}",
                detail=f"Its parameters are: {', '.join(names) or 'none'}.",
                hint="exclude= and exactly_once= name parameters of the function",
            )
        self.leave_out = set(leave_out)
        self.var_kw = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
        # Parameters that are all plain (positional or keyword): a call's arguments are
        # matched to them here, without Signature.bind (the largest cost of a replay).
        self._names: tuple[str, ...] | None = None
        if all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params):
            self._names = tuple(p.name for p in params)
            self._name_set = frozenset(self._names)
            self._defaults = {p.name: p.default for p in params if p.default is not p.empty}

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, in the signature's order, defaults
        applied; a call that does not fit raises Signature.bind's TypeError."""
        names = self._names
        if names is not None and len(args) <= len(names):
            given = dict(zip(names, args, strict=False))
            for k, v in kwargs.items():
                if k in given or k not in self._name_set:
                    break  # given twice, or no such parameter: Signature.bind says which
                given[k] = v
            else:
                if len(given) == len(names):
                    return {n: given[n] for n in names}
                if all(n in given or n in self._defaults for n in names):
                    return {n: given[n] if n in given else self._defaults[n] for n in names}
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def input(self, arguments: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in arguments.items():
            if name == self.receiver or name in self.leave_out:
                continue
            if name == self.var_kw:
                out.update(value)
            else:
                out[name] = value
        return out


def field_of(input: dict[str, Any], path: str) -> Any:
    """A dotted path into the input: dict members, attributes, list indexes."""
    if path in input:
        return input[path]  # a parameter's name (most key fields): nothing to walk
    value: Any = input
    for part in path.split("."):
        if isinstance(value, dict):
            if part not in value:
                raise _missing(path, part)
            value = value[part]
        elif isinstance(value, (list, tuple)) and part.isdigit():
            if int(part) >= len(value):
                raise _missing(path, part)
            value = value[int(part)]
        elif hasattr(value, part):
            value = getattr(value, part)
        else:
            raise _missing(path, part)
    return value


def _missing(path: str, part: str) -> InvalidArgument:
    return InvalidArgument(
        f"the call has no field {path!r}",
        detail=f"{part!r} is missing from the arguments.",
        hint="key_fields and fingerprint name fields of the arguments as dotted paths",
    )


def explicit_key(settings: Idempotent, input: dict[str, Any], receiver: Any,
                 scope: str | None = None) -> str:
    """The EXPLICIT key: the key function's, the named fields', or the receiver's
    `idempotency_key_for(input)` (the Java framework's IdempotencyKeySupplier). A key that
    looks like a per-turn tool-call id is warned about (agent_keys.py)."""
    if settings.key is not None:
        key: Any = settings.key(input)
    elif settings.key_fields:
        fields = settings.key_fields
        if len(fields) == 1:
            key = field_of(input, fields[0])
            key = key if isinstance(key, str) else _sql.dumps(key)
        else:
            key = "/".join(v if isinstance(v, str) else _sql.dumps(v)
                           for v in (field_of(input, f) for f in fields))
    elif receiver is not None and callable(getattr(receiver, "idempotency_key_for", None)):
        key = receiver.idempotency_key_for(input)
    else:
        raise InvalidArgument(
            "EXPLICIT needs a key",
            detail="No key function, no key fields, and no idempotency_key_for on the class.",
            hint="@idempotent(key=lambda input: input['order_id']) or key_fields=['order_id'], "
            "or define idempotency_key_for(self, input) on the class",
        )
    if not isinstance(key, str) or not key.strip():
        raise InvalidArgument(
            "the EXPLICIT key is blank",
            detail=f"{_key_source(settings, receiver)} returned {key!r}.",
            hint="return a non-blank string that names the call",
        )
    if tool_call_id_in(key) is not None:
        warn_if_tool_call_id(scope, key, _key_source(settings, receiver))
    return key


def _key_source(settings: Idempotent, receiver: Any) -> str:
    """Where the EXPLICIT key came from, for a message (made only when one is shown)."""
    if settings.key is not None:
        return "the key function"
    if settings.key_fields:
        return f"the key fields {list(settings.key_fields)}"
    return f"{type(receiver).__name__}.idempotency_key_for"


def request_of(settings: Idempotent, strategy: KeyStrategy,
               input: dict[str, Any]) -> dict[str, Any] | None:
    """What is fingerprinted (and, under HASH_INPUT, what the key is derived from)."""
    if strategy is KeyStrategy.HASH_INPUT or settings.fingerprint == "input":
        return input
    if settings.fingerprint:
        return {f: field_of(input, f) for f in settings.fingerprint}
    return None


def local_name(scope: str, key: str | None, request_json: str | None) -> str:
    """A name for the call in this process before the server derived its key: the key,
    else (HASH_INPUT) the input's JSON with sorted members."""
    if key is not None:
        return f"k:{key}"
    assert request_json is not None
    return "r:" + json.dumps(json.loads(request_json), sort_keys=True)
