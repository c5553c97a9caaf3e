"""The canonical JSON of a request and its SHA-256, as the server computes them for
HASH_INPUT (`idem_canonical`, `idem_hash`: RFC 8785 with lossless numbers,
docs/canonical-json.md), so that a key built here names the call the server would name.

The value is first written as the decorator sends it (`_sql.dumps`: pydantic models,
dataclasses, datetimes, uuids, sets, tuples), then read back with every number as its exact
decimal value: what the server's jsonb holds."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any

from . import _sql
from .errors import Uncanonicalizable

MAX_DEPTH = 128  # the server's limit (IK005 beyond it)


def canonical_json(value: Any) -> str:
    """The canonical text of a JSON value: `SELECT idem_canonical($1::jsonb)`."""
    parsed = json.loads(_sql.dumps(value), parse_float=Decimal)
    out: list[str] = []
    _write(parsed, out, 0)
    return "".join(out)


def input_hash(value: Any) -> str:
    """The lowercase hex SHA-256 of the canonical text: the HASH_INPUT key of `value`,
    `encode(idem_hash($1::jsonb), 'hex')`."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _write(value: Any, out: list[str], depth: int) -> None:
    if isinstance(value, dict):
        _deeper(depth)
        out.append("{")
        for i, k in enumerate(sorted(value, key=_utf16)):
            if i:
                out.append(",")
            out.append(_string(k))
            out.append(":")
            _write(value[k], out, depth + 1)
        out.append("}")
    elif isinstance(value, list):
        _deeper(depth)
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out, depth + 1)
        out.append("]")
    elif isinstance(value, str):
        out.append(_string(value))
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif value is None:
        out.append("null")
    else:  # int or Decimal: an exact value
        out.append(_number(Decimal(value)))


def _deeper(depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise Uncanonicalizable(
            "the request has no canonical form",
            detail=f"It nests arrays and objects deeper than {MAX_DEPTH} levels.",
            hint="a request is an input, not a data set: flatten it",
        )


def _utf16(key: str) -> bytes:
    # Members are sorted by UTF-16 code units (JavaScript's order), not by code points.
    return _utf8_checked(key).encode("utf-16-be")


def _utf8_checked(s: str) -> str:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise Uncanonicalizable(
            "the request has no canonical form",
            detail="A string holds a lone UTF-16 surrogate, which jsonb cannot hold.",
            hint="decode text with errors='replace' before passing it",
        ) from e
    return s


def _string(s: str) -> str:
    # json.dumps without ensure_ascii escapes exactly as JCS does: \" \\ \b \f \n \r \t,
    # other characters below U+0020 as lowercase \u00xx, everything else (DEL too) raw.
    return json.dumps(_utf8_checked(s), ensure_ascii=False)


def _number(v: Decimal) -> str:
    """The exact value's significant digits in ECMAScript's Number::toString layout."""
    if v.is_zero():
        return "0"
    # Not Decimal.normalize(): it rounds to the context's 28 digits.
    sign, digits_t, exp = v.as_tuple()
    assert isinstance(exp, int)
    digits = "".join(map(str, digits_t)).lstrip("0")
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    digits = stripped
    k = len(digits)
    n = k + exp  # the value is 0.DIGITS x 10^n
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        text = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") \
            + str(abs(e))
    return ("-" if sign else "") + text
