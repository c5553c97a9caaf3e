"""`@idempotent`: the Java framework's `@Idempotent` for Python functions, over the SQL API.

    @idempotent(ttl=timedelta(days=1))
    def send_email(to: str, subject: str) -> dict: ...

On `def` and `async def` alike; on a class, its settings apply to the public methods that
have none of their own (a method's own settings win whole). A function without the
decorator is not deduplicated: reads stay fresh."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar, overload

from . import _async_call, _exactly_once, _sync_call
from ._plan import Plan
from .context import _CURRENT
from .errors import InvalidArgument
from .keys import Binder
from .settings import Idempotent, KeyStrategy
from .store import AsyncStore, Store

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_SETTINGS_ATTR = "__pg_idempotency__"


class _Default:
    """The store `configure()` set: a conninfo (a Store and an AsyncStore are opened from it
    as blocking and async functions need them), or a Store or AsyncStore."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.source: Any = None
        self.schema = "public"
        self.prepare = True
        self.sync: Store | None = None
        self.async_: AsyncStore | None = None


_DEFAULT = _Default()


def configure(connection: Any, *, schema: str = "public", prepare: bool = True) -> None:
    """Set the store every `@idempotent` function without `store=` uses: a conninfo string
    (`"postgresql://app@db/app"`; a pool of autocommit connections is opened at the first
    call, a blocking one for `def` functions and an asyncio one for `async def`), a Store or
    an AsyncStore. `prepare=False` behind a pooler in transaction mode (PgBouncer)."""
    with _DEFAULT.lock:
        _DEFAULT.source, _DEFAULT.schema, _DEFAULT.prepare = connection, schema, prepare
        _DEFAULT.sync = connection if isinstance(connection, Store) else None
        _DEFAULT.async_ = connection if isinstance(connection, AsyncStore) else None


def _no_store(kind: str) -> InvalidArgument:
    return InvalidArgument(
        "no store for @idempotent",
        detail=f"An {kind} function needs a{'n Async' if kind == 'async' else ' '}Store.",
        hint='call pg_idempotency.configure("postgresql://...") once at start-up, or pass '
        "store= to the decorator",
    )


def _sync_store(given: Any) -> Store:
    if isinstance(given, Store):
        return given
    if given is not None:
        return Store(given)
    opened = _DEFAULT.sync  # read without the lock: set once, by the first call
    if opened is not None:
        return opened
    with _DEFAULT.lock:
        if _DEFAULT.sync is None:
            if _DEFAULT.source is None or isinstance(_DEFAULT.source, AsyncStore):
                raise _no_store("blocking")
            _DEFAULT.sync = Store(_DEFAULT.source, schema=_DEFAULT.schema,
                                  prepare=_DEFAULT.prepare)
        return _DEFAULT.sync


def _async_store(given: Any) -> AsyncStore:
    if isinstance(given, AsyncStore):
        return given
    if given is not None:
        return AsyncStore(given)
    opened = _DEFAULT.async_  # read without the lock: set once, by the first call
    if opened is not None:
        return opened
    with _DEFAULT.lock:
        if _DEFAULT.async_ is None:
            if _DEFAULT.source is None or isinstance(_DEFAULT.source, Store):
                raise _no_store("async")
            _DEFAULT.async_ = AsyncStore(_DEFAULT.source, schema=_DEFAULT.schema,
                                         prepare=_DEFAULT.prepare)
        return _DEFAULT.async_


def _schema(store: Any) -> str:
    if isinstance(store, (Store, AsyncStore)):
        return store.schema
    return _DEFAULT.schema


def _decoder(fn: Callable[..., Any]) -> Callable[[Any], Any]:
    """A replay gives back what the function's return annotation says (a pydantic model, a
    dataclass, ...), validated by pydantic where it is installed; otherwise the JSON value
    as stored. Built at the first replay."""
    adapter: list[Any] = []

    def decode(value: Any) -> Any:
        if not adapter:
            adapter.append(_adapter_for(fn))
        a = adapter[0]
        return value if a is None else a.validate_python(value)

    return decode


def _adapter_for(fn: Callable[..., Any]) -> Any:
    hint = _return_hint(fn)
    if hint in (inspect.Signature.empty, Any, None, type(None), dict, list, str, int, float,
                bool, object):
        return None
    try:
        from pydantic import TypeAdapter

        return TypeAdapter(hint)
    except Exception:
        return None


def _return_hint(fn: Callable[..., Any]) -> Any:
    """The return annotation, resolved: a string one (`from __future__ import annotations`)
    in the function's module and closure (a class defined beside the function)."""
    import typing

    closure = getattr(fn, "__closure__", None) or ()
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    local: dict[str, Any] = {}
    for name, cell in zip(names, closure, strict=False):
        try:
            local[name] = cell.cell_contents
        except ValueError:
            pass
    try:
        return typing.get_type_hints(fn, localns=local).get("return", inspect.Signature.empty)
    except Exception:
        hint = inspect.signature(fn).return_annotation
        return inspect.Signature.empty if isinstance(hint, str) else hint


def _wrap_function(fn: Callable[..., Any], settings: Idempotent, store: Any) -> Callable[..., Any]:
    strategy = settings.strategy or KeyStrategy.HASH_INPUT
    if strategy is KeyStrategy.HASH_INPUT and settings.fingerprint:
        raise InvalidArgument(
            "fingerprint= applies to EXPLICIT keys",
            detail="Under HASH_INPUT the key is the hash of the whole input: it is the "
            "fingerprint.",
            hint="drop fingerprint=, or name the key (key= or key_fields=)",
        )
    leave_out = settings.exclude + ((settings.exactly_once,) if settings.exactly_once else ())
    binder = Binder(fn, leave_out)
    scope = settings.scope or fn.__name__
    sent = Plan.sent_of(settings)
    decode = _decoder(fn)
    schema = _schema(store)
    is_async = inspect.iscoroutinefunction(fn)
    if is_async and isinstance(store, Store):
        raise InvalidArgument(f"{fn.__qualname__} is async: give it an AsyncStore, not a Store")
    if not is_async and isinstance(store, AsyncStore):
        raise InvalidArgument(f"{fn.__qualname__} is blocking: give it a Store, not an "
                              "AsyncStore")

    # A conninfo or a pool given as store= is opened once, at the first call, not per call.
    opened: list[Any] = []

    def own_store(make: Callable[[Any], Any]) -> Any:
        if store is None or isinstance(store, (Store, AsyncStore)):
            return make(store)
        with _DEFAULT.lock:
            if not opened:
                opened.append(Store(store, schema=schema) if make is _sync_store
                              else AsyncStore(store, schema=schema))
            return opened[0]

    def plan_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Plan, Any]:
        arguments = binder.bind(args, kwargs)
        receiver = arguments.get(binder.receiver) if binder.receiver else None
        plan = Plan.of(settings, scope, binder.input(arguments), receiver, sent)
        conn = arguments[settings.exactly_once] if settings.exactly_once else None
        return plan, conn

    wrapper: Callable[..., Any]
    if strategy is KeyStrategy.NONE:
        wrapper = fn
    elif is_async:
        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            plan, conn = plan_of(args, kwargs)
            if plan.strategy is KeyStrategy.UUID:
                token = _CURRENT.set(plan.uuid_context())
                try:
                    return await fn(*args, **kwargs)
                finally:
                    _CURRENT.reset(token)
            if conn is not None:
                return await _exactly_once.run_async(AsyncStore(conn, schema=schema), plan, fn,
                                                     args, kwargs, decode)
            return await _async_call.run(own_store(_async_store), plan, fn, args, kwargs,
                                         decode)

        wrapper = async_wrapper
    else:
        @functools.wraps(fn)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            plan, conn = plan_of(args, kwargs)
            if plan.strategy is KeyStrategy.UUID:
                token = _CURRENT.set(plan.uuid_context())
                try:
                    return fn(*args, **kwargs)
                finally:
                    _CURRENT.reset(token)
            if conn is not None:
                return _exactly_once.run(Store(conn, schema=schema), plan, fn, args, kwargs,
                                         decode)
            return _sync_call.run(own_store(_sync_store), plan, fn, args, kwargs, decode)

        wrapper = sync_wrapper
    if wrapper is not fn:
        setattr(wrapper, _SETTINGS_ATTR, settings)
    return wrapper


def _wrap_class(cls: type[T], settings: Idempotent, store: Any) -> type[T]:
    """Class-level settings: every public method defined in the class body without settings
    of its own gets them. `idempotency_key_for` (the key supplier) is not a call."""
    setattr(cls, _SETTINGS_ATTR, settings)
    for name, member in list(vars(cls).items()):
        if name.startswith("_") or name == "idempotency_key_for":
            continue
        kind: type | None = None
        fn = member
        if isinstance(member, (staticmethod, classmethod)):
            kind, fn = type(member), member.__func__
        if not inspect.isfunction(fn) or hasattr(fn, _SETTINGS_ATTR):
            continue  # not a method, or its own settings win whole
        wrapped = _wrap_function(fn, settings, store)
        setattr(cls, name, kind(wrapped) if kind else wrapped)
    return cls


@overload
def idempotent(fn: F, /) -> F: ...


@overload
def idempotent(
    fn: None = None, /, *, store: Any = None, strategy: KeyStrategy | str | None = None,
    ttl: Any = None, on_cache_hit: Any = None, cache_failures: bool | None = None,
    lease: Any = None, wait: Any = None, on_mismatch: Any = None,
    on_unknown_outcome: Any = None, unresolved_ttl: Any = None,
    key: Callable[[dict[str, Any]], str] | None = None, key_fields: Any = None,
    fingerprint: Any = None, scope: str | None = None, exclude: Any = None,
    exactly_once: str | None = None,
) -> Callable[[F], F]: ...


def idempotent(fn: Any = None, /, *, store: Any = None, **members: Any) -> Any:
    """Deduplicate a function's calls (or, on a class, its public methods' calls).

    Members (all optional; an unset one is not sent, so the scope's policy in the database
    governs it, then the server's settings):

    - `strategy`: HASH_INPUT (default: the canonical SHA-256 of the arguments), EXPLICIT
      (`key=`, `key_fields=`, or the class's `idempotency_key_for(input)`), UUID (a fresh
      key per call, sent upstream; nothing deduplicated), NONE (no protection)
    - `ttl`, `lease`, `wait`, `unresolved_ttl`: seconds or a timedelta
    - `on_cache_hit`: RETURN_CACHED | RETURN_CACHED_IF_SUCCESS | FAIL_FAST
    - `cache_failures`: remember a failure (replayed as ToolFailed) or let a retry run again
    - `on_mismatch`: REJECT (Mismatch) | IGNORE, when a repeat's fingerprint differs
    - `on_unknown_outcome`: "rerun" (default) | "refuse" | a reconcile read (a function of a
      `Reconcile` returning the earlier attempt's result, NOT_FOUND or UNKNOWN)
    - `key`: a function of the input dict returning the key; `key_fields`: dotted paths
    - `fingerprint`: under EXPLICIT, what a repeat must match: "input" or field paths
    - `scope`: the record's scope (default: the function's name)
    - `exclude`: parameters that are not part of the input (a client, a logger)
    - `exactly_once`: the name of the parameter that carries the caller's connection or
      session: the claim, the function's writes and the completion are one transaction
    - `store`: a Store, AsyncStore or conninfo (default: `configure()`'s)
    """
    settings = Idempotent.of(**members)

    def wrap(obj: Any) -> Any:
        if inspect.isclass(obj):
            return _wrap_class(obj, settings, store)
        if not callable(obj):
            raise InvalidArgument(f"@idempotent decorates functions and classes, not {obj!r}")
        return _wrap_function(obj, settings, store)

    return wrap(fn) if fn is not None else wrap


def settings_of(fn: Callable[..., Any]) -> Idempotent | None:
    """The settings a decorated function runs under (None: not deduplicated)."""
    return getattr(fn, _SETTINGS_ATTR, None)
