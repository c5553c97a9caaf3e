"""The calls this process is holding (a claimed call whose result is not recorded yet),
so that a retry in the same process joins its holder instead of asking the store: without
it, a store down for longer than the lease came back with the lease lapsed, and the retry
took the call over and ran it a second time while the holder still held the first run's
result (docs/client.md, "A retry in the holder's process")."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

_NOT_YET = object()


@dataclass
class Holding:
    """One held call. `result` is the function's (set once it returned); `done` is set when
    the result is recorded, or the holder gave the call up (`recorded` says which)."""

    ran: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = _NOT_YET
    failed: bool = False
    recorded: bool = False
    background: bool = False
    """The recording went on in the background after the caller was answered."""

    @property
    def has_result(self) -> bool:
        return self.result is not _NOT_YET


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
