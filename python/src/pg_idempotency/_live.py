"""The calls this process is holding (a claimed call whose result is not recorded yet),
so that a retry in the same process joins its holder instead of asking the store: without
it, a store down for longer than the lease came back with the lease lapsed, and the retry
took the call over and ran it a second time while the holder still held the first run's
result (docs/client.md, "A retry in the holder's process")."""

from __future__ import annotations

import threading
from typing import Any

_NOT_YET = object()


class Holding:
    """One held call. `result` is the function's (set once it returned); `done` is set when
    the result is recorded, or the holder gave the call up (`recorded` says which).

    `ran` and `done` are Events made only when a retry in this process asks for them (most
    calls have no such retry; three Events per call were a measurable part of a new key's
    cost). The holder marks them with `set_ran()` / `set_done()`."""

    __slots__ = ("_done", "_events", "_ran", "background", "failed", "recorded", "result")

    def __init__(self) -> None:
        self.result: Any = _NOT_YET
        self.failed = False
        self.recorded = False
        self.background = False
        """The recording went on in the background after the caller was answered."""
        self._ran = self._done = False
        self._events: tuple[threading.Event, threading.Event] | None = None

    @property
    def has_result(self) -> bool:
        return self.result is not _NOT_YET

    @property
    def ran(self) -> threading.Event:
        return self._made()[0]

    @property
    def done(self) -> threading.Event:
        return self._made()[1]

    def _made(self) -> tuple[threading.Event, threading.Event]:
        # Under the guard: an Event made now starts set if its mark came first, and a mark
        # that comes later sees the Event.
        with _GUARD:
            if self._events is None:
                ran, done = threading.Event(), threading.Event()
                if self._ran:
                    ran.set()
                if self._done:
                    done.set()
                self._events = (ran, done)
            return self._events

    def set_ran(self) -> None:
        with _GUARD:
            self._ran = True
            events = self._events
        if events is not None:
            events[0].set()

    def set_done(self) -> None:
        with _GUARD:
            self._done = True
            events = self._events
        if events is not None:
            events[1].set()


_GUARD = threading.Lock()


class LiveHolders:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[tuple[int, str, str], Holding] = {}
        self._scopes: dict[tuple[int, str], int] = {}

    def any_in(self, store: object, scope: str) -> bool:
        # Read without the lock: a stale answer only means one more store round trip.
        return (id(store), scope) in self._scopes

    def get(self, store: object, scope: str, name: str) -> Holding | None:
        with self._lock:
            return self._calls.get((id(store), scope, name))

    def add(self, store: object, scope: str, names: list[str]) -> Holding:
        holding = Holding()
        with self._lock:
            for name in names:
                self._calls[(id(store), scope, name)] = holding
            self._scopes[(id(store), scope)] = self._scopes.get((id(store), scope), 0) + len(names)
        return holding

    def remove(self, store: object, scope: str, names: list[str], holding: Holding) -> None:
        with self._lock:
            for name in names:
                if self._calls.get((id(store), scope, name)) is holding:
                    del self._calls[(id(store), scope, name)]
                    left = self._scopes[(id(store), scope)] - 1
                    if left:
                        self._scopes[(id(store), scope)] = left
                    else:
                        del self._scopes[(id(store), scope)]


LIVE = LiveHolders()
