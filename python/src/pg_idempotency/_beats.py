"""When a blocking call's heartbeat is first due. A heartbeat extends the lease every third
of it; most calls end long before the first extension, so a thread per call (started and
stopped around every call: the largest cost of a new key) bought nothing. One thread of
the process waits for the first due time of every running call and starts a call's own
heartbeat thread only then, for a call still running."""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
import weakref
from typing import Protocol

# The due times' granularity: the waiting thread sleeps at least this long between wakes,
# however many calls end (a stopped call is dropped when its time comes, not searched for).
TICK_S = 0.005


class Due(Protocol):
    """What waits here: `begin()` starts its own heartbeat thread unless it stopped."""

    def begin(self) -> None: ...


class FirstBeats:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._due: list[tuple[float, int, weakref.ref[Due]]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, beat: Due, after_s: float) -> None:
        """`beat.begin()` in `after_s` seconds, unless the beat is gone by then (a call that
        ended drops its Heartbeat)."""
        due = time.monotonic() + after_s
        with self._cond:
            earliest = not self._due or due < self._due[0][0]
            heapq.heappush(self._due, (due, next(self._order), weakref.ref(beat)))
            if self._thread is None or not self._thread.is_alive():
                # The first call, or the thread is gone (nothing here ends it; a thread is
                # not carried into a forked child, which _forked covers): start one.
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="pg_idempotency heartbeats")
                self._thread.start()
            elif earliest:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                now = time.monotonic()
                ready = []
                while self._due and self._due[0][0] <= now:
                    beat = heapq.heappop(self._due)[2]()
                    if beat is not None:
                        ready.append(beat)
                if not ready:
                    self._cond.wait(max(self._due[0][0] - now, TICK_S))
                    continue
            for beat in ready:
                try:
                    beat.begin()
                except Exception:
                    pass  # no thread to start now: the other calls still get theirs

    def _forked(self) -> None:
        # The child has no waiting thread, and none of the parent's calls.
        self.__init__()  # type: ignore[misc]


FIRST_BEATS = FirstBeats()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=FIRST_BEATS._forked)
