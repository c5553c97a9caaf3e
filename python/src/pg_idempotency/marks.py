"""The responses recorded in place of a result that cannot or must not be kept, so that
every retry is told what happened instead of running the call again. The same objects as
the Rust client's (docs/client.md, "After the tool ran"): records are shared across
languages."""

from __future__ import annotations

from typing import Any

MARK = "pg_idempotency"


def unrecorded(why: str) -> dict[str, Any]:
    return {MARK: {"unrecorded": why}}


def outcome_unknown(why: str) -> dict[str, Any]:
    return {MARK: {"outcome_unknown": why}}


def mark_of(response: Any) -> tuple[str, str] | None:
    """("unrecorded" | "outcome_unknown", why) when the response is a mark."""
    if not isinstance(response, dict) or len(response) != 1:
        return None
    inner = response.get(MARK)
    if not isinstance(inner, dict):
        return None
    for kind in ("unrecorded", "outcome_unknown"):
        why = inner.get(kind)
        if isinstance(why, str):
            return kind, why
    return None
