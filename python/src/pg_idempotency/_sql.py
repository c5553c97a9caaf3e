"""The SQL API's statements, their parameters and their answers, one place for every
driver. Statements are written with $1..$n (each used once, in order); a driver writes its
own placeholders (psycopg: %s). Parameters cross as text, numbers and booleans only, so
that every driver sends them alike: json as text cast to jsonb, durations as seconds cast
to interval, uuids as text; answers come back as text too (json parsed here)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .errors import InvalidArgument

_SECS = "pg_catalog.make_interval(secs => {})"
_NO_TIMES = "NULL::pg_catalog.timestamptz, NULL::pg_catalog.timestamptz,"


@dataclass(frozen=True)
class Statement:
    """One statement with $n placeholders, and its driver spellings (cached)."""

    name: str
    text: str

    def with_percent_s(self) -> str:
        # $n in order, each once: psycopg's %s are positional. A literal % is doubled.
        return re.sub(r"\$\d+", "%s", self.text.replace("%", "%%"))


def quoted_schema(schema: str) -> str:
    if not schema or "\x00" in schema:
        raise InvalidArgument("schema must be a non-empty name", detail=f"schema is {schema!r}.")
    return '"' + schema.replace('"', '""') + '"'


@dataclass(frozen=True)
class Statements:
    begin: Statement
    begin_call: Statement
    begin_batch: Statement
    complete: Statement
    complete_call: Statement
    complete_batch: Statement
    release: Statement
    extend: Statement
    lookup: Statement
    forget: Statement
    purge: Statement
    installed: Statement

    @staticmethod
    def in_schema(schema: str = "public") -> Statements:
        # The API's functions are named with their schema: an unqualified call would run
        # whatever idem_begin a schema earlier on the search_path holds (docs/security.md).
        s = quoted_schema(schema)
        t, j = "$%d::pg_catalog.text", "$%d::pg_catalog.text::pg_catalog.jsonb"

        def secs(n: int) -> str:
            return _SECS.format(f"${n}::pg_catalog.float8")

        begin_cols = (
            "outcome, fence, attempt, recovered, upstream_key::pg_catalog.text, succeeded, "
            "response::pg_catalog.text, lease_until, expires_at, "
            "extract(epoch FROM retry_after)::pg_catalog.float8, key, "
            # The lease left by the server's clock: the heartbeat's pace, whatever the skew.
            "extract(epoch FROM lease_until - pg_catalog.clock_timestamp())::pg_catalog.float8"
        )
        return Statements(
            begin=Statement(
                "begin",
                f"SELECT {begin_cols} FROM {s}.idem_begin({t % 1}, {t % 2}, {j % 3}, {secs(4)}, "
                f"{secs(5)}, {t % 6}, {t % 7}, {secs(8)}, $9::pg_catalog.text::pg_catalog.uuid, "
                f"{secs(10)})",
            ),
            # The decorator's begin and complete: the same calls, without the timestamps it
            # never reads (their decoding was a tenth of a replay's cost). begin_call's
            # columns are begin's, the two timestamps NULL.
            begin_call=Statement(
                "begin_call",
                f"SELECT {begin_cols.replace('lease_until, expires_at,', _NO_TIMES)} FROM "
                f"{s}.idem_begin({t % 1}, {t % 2}, {j % 3}, {secs(4)}, {secs(5)}, {t % 6}, "
                f"{t % 7}, {secs(8)}, $9::pg_catalog.text::pg_catalog.uuid, {secs(10)})",
            ),
            complete_call=Statement(
                "complete_call",
                f"SELECT state FROM {s}.idem_complete({t % 1}, {t % 2}, $3::pg_catalog.int8, "
                f"{j % 4}, $5::pg_catalog.bool, $6::pg_catalog.bool)",
            ),
            begin_batch=Statement(
                "begin_batch",
                f"SELECT item, {begin_cols} FROM {s}.idem_begin_batch({t % 1}, "
                "$2::pg_catalog.text[], $3::pg_catalog.text[]::pg_catalog.jsonb[], "
                f"{secs(4)}, {secs(5)}, {t % 6}, {t % 7}, "
                "$8::pg_catalog.text[]::pg_catalog.uuid[]) ORDER BY item",
            ),
            complete=Statement(
                "complete",
                f"SELECT state, expires_at FROM {s}.idem_complete({t % 1}, {t % 2}, "
                f"$3::pg_catalog.int8, {j % 4}, $5::pg_catalog.bool, $6::pg_catalog.bool)",
            ),
            complete_batch=Statement(
                "complete_batch",
                f"SELECT item, outcome, state FROM {s}.idem_complete_batch({t % 1}, "
                "$2::pg_catalog.text[], $3::pg_catalog.int8[], "
                "$4::pg_catalog.text[]::pg_catalog.jsonb[], $5::pg_catalog.bool[], "
                "$6::pg_catalog.bool[]) ORDER BY item",
            ),
            release=Statement(
                "release",
                f"SELECT {s}.idem_release({t % 1}, {t % 2}, $3::pg_catalog.int8)",
            ),
            extend=Statement(
                "extend",
                f"SELECT lease_until, expires_at FROM {s}.idem_extend({t % 1}, {t % 2}, "
                f"$3::pg_catalog.int8, {secs(4)})",
            ),
            lookup=Statement(
                "lookup",
                "SELECT state, fence, attempt, upstream_key::pg_catalog.text, "
                "response::pg_catalog.text, created_at, completed_at, lease_until, expires_at "
                f"FROM {s}.idem_lookup({t % 1}, {t % 2})",
            ),
            forget=Statement("forget", f"SELECT {s}.idem_forget({t % 1}, {t % 2})"),
            purge=Statement("purge", f"SELECT {s}.idem_purge_expired()"),
            installed=Statement(
                "installed",
                "SELECT pg_catalog.to_regprocedure($1::pg_catalog.text) IS NOT NULL",
            ),
        )


def dumps(value: Any) -> str:
    """Compact JSON text of a response or request. U+0000 cannot be stored (jsonb refuses
    it): refused here, before anything is sent."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(
            "the value cannot be stored as JSON",
            detail=str(e),
            hint="return (and take) JSON values: dict, list, str, int, float, bool, None, "
            "or a pydantic model or dataclass",
        ) from e
    if "\\u0000" in text and _has_nul(value):
        raise InvalidArgument(
            "response must not contain U+0000",
            detail="PostgreSQL's jsonb cannot hold the character U+0000.",
            hint="remove or replace U+0000 in the value",
        )
    return text


def _jsonable(value: Any) -> Any:
    """What json.dumps does not know: pydantic models, dataclasses, datetimes, uuids, sets."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (datetime,)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    import uuid

    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# One encoder for every call: json.dumps with options makes a new one each time.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                            default=_jsonable)


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nul(v) for v in value)
    return False


# The C scanner json.loads ends in, called directly: PostgreSQL's jsonb text has no white
# space around the value (json.loads's two checks for it were a fifth of its cost).
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)  # its error, or a value with white space around it
    return value if end == len(text) else json.loads(text)


def check_text(value: str | None, name: str) -> None:
    """NUL cannot cross the wire in a text parameter: refused before anything is sent."""
    if value is not None and "\x00" in value:
        raise InvalidArgument(
            f"{name} must not contain NUL",
            detail=f"The {name} holds the character U+0000.",
            hint=f"remove U+0000 from the {name}",
        )


def params(*values: Any) -> Sequence[Any]:
    return values
