"""What every Python row shares: the function body and its failure, and the keys.

A module of its own, so that driver.py (run as __main__) and async_peers.py raise and catch
the same `Failed` class."""

import threading
import uuid

# Completed keys a replay case cycles over.
REPLAY_KEYS = 100


class Failed(Exception):
    """What the function body raises in the failure case."""


class Body:
    """The function under idempotency: a no-op that counts its executions."""

    def __init__(self):
        self.lock = threading.Lock()
        self.executions = 0

    def run(self, key):
        with self.lock:
            self.executions += 1
        if key.startswith("fail-"):
            raise Failed(key)
        return {"ok": True}


def fresh(prefix):
    return f"{prefix}-{uuid.uuid4().hex}"
