"""agent_key, the canonical JSON it digests (checked against the server's idem_canonical
and idem_hash), and the KeyWarning for EXPLICIT keys that look like per-turn tool-call ids."""

from __future__ import annotations

import struct
import uuid
import warnings
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pg_idempotency
from pg_idempotency import (
    InvalidArgument,
    KeyWarning,
    Store,
    Uncanonicalizable,
    _sql,
    agent_key,
    agent_keys,
    canonical_json,
    current_call,
    idempotent,
    input_hash,
)

NUMBERS = Path(__file__).resolve().parents[3] / "canon/tests/data/jcs/numbers/es6-1000.txt"

VALUES: list[Any] = [
    {"b": 2, "a": 1},
    {"z": {"y": [3, {"x": None, "w": True}], "v": False}, "\u00e9": "caf\u00e9"},
    # Non-ASCII: accents, CJK, an emoji (a surrogate pair in UTF-16), right-to-left text.
    {"name": "J\u00fcrgen \u6771\u4eac \U0001f600 \u05e9\u05dc\u05d5\u05dd", "to": "a@b"},
    # UTF-16 order: U+E000 sorts after U+1F600 (0xD83D), unlike code-point order.
    {"\ue000": 1, "\U0001f600": 2, "a": 3, "\u00ff": 4, "\u0100": 5, "A": 6, "": 7},
    # Escapes: quotes, backslash, controls as lowercase \u00xx, DEL and '/' raw.
    {"s": "q\"b\\n\n\r\t\b\f\x01\x1f\x7f/</script>"},
    # Numbers: exact integers, doubles' shortest forms, ECMAScript's exponent thresholds.
    {"n": [0, -0.0, 1, -1, 1.0, 0.1, 0.5, -2.5, 100, 1e20, 1e21, 1.5e21, 1e-6, 1e-7,
           1.5e-7, 123456789.125, 9007199254740993, -9007199254740993,
           123456789012345678901234567890, 5e-324, 1.7976931348623157e308, 333333333.3333333,
           2 ** 64, 1e23, 0.000001234]},
    [],
    {},
    [[[]], {"a": []}],
    "just a string",
    12,
    True,
    None,
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_canonical_json_and_its_hash_are_the_servers(value: Any, sql: psycopg.Connection) -> None:
    sent = _sql.dumps(value)  # what the decorator sends as the request
    row = sql.execute(
        "SELECT idem_canonical(%s::jsonb), encode(idem_hash(%s::jsonb), 'hex')", (sent, sent)
    ).fetchone()
    assert row is not None
    assert canonical_json(value) == row[0]
    assert input_hash(value) == row[1]


def test_member_order_and_spelling_do_not_change_the_digest() -> None:
    a = {"to": "ann@example.com", "subject": "Hi", "amount": 100}
    b = {"amount": 100.0, "subject": "Hi", "to": "ann@example.com"}
    assert agent_key("run-1", "send_email", a) == agent_key("run-1", "send_email", b)
    assert agent_key("run-1", "send_email", a) != agent_key("run-2", "send_email", a)
    assert agent_key("run-1", "send_email", a) != agent_key("run-1", "send_sms", a)
    c = dict(a, amount=101)
    assert agent_key("run-1", "send_email", a) != agent_key("run-1", "send_email", c)


def test_a_double_is_written_as_ecmascript_writes_it() -> None:
    """The 1,000 number lines of RFC 8785's reference: IEEE-754 bits, Number::toString."""
    if not NUMBERS.exists():
        pytest.skip(f"the number vectors are not here: {NUMBERS}")
    lines = NUMBERS.read_text().split()
    assert len(lines) == 1000
    for line in lines:
        bits, expected = line.split(",")
        x = struct.unpack(">d", bytes.fromhex(bits.zfill(16)))[0]
        assert canonical_json(x) == expected, line


def test_the_hash_input_key_is_the_digest(store: Store, scope: str) -> None:
    seen: list[str] = []

    @idempotent(store=store, scope=scope)
    def send_email(to: str, subject: str, cc: list[str]) -> str:
        seen.append(current_call().key)
        return "sent"

    send_email("\u00e9l\u00e8ve@example.com", "\u00bfQu\u00e9 tal? \U0001f600", ["b@x", "a@x"])
    assert seen == [input_hash({"cc": ["b@x", "a@x"], "subject": "\u00bfQu\u00e9 tal? \U0001f600",
                                "to": "\u00e9l\u00e8ve@example.com"})]


def test_depth_limit_is_the_servers(sql: psycopg.Connection) -> None:
    ok: Any = 1
    for _ in range(128):
        ok = [ok]
    assert canonical_json(ok) == "[" * 128 + "1" + "]" * 128
    too_deep = [ok]
    with pytest.raises(Uncanonicalizable):
        canonical_json(too_deep)
    with pytest.raises(psycopg.Error) as e:
        sql.execute("SELECT idem_canonical(%s::jsonb)", (_sql.dumps(too_deep),))
    assert e.value.sqlstate == "IK005"


def test_a_lone_surrogate_has_no_canonical_form() -> None:
    with pytest.raises(Uncanonicalizable):
        input_hash({"a": "\ud800"})
    with pytest.raises(Uncanonicalizable):
        input_hash({"\udfff": 1})


def test_agent_key_refuses_what_would_make_a_bad_key() -> None:
    for run_id in ("", "  ", None):
        with pytest.raises(InvalidArgument, match="run id"):
            agent_key(run_id, "send_email", {})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="without ':'"):
        agent_key("run-1", "mail:send", {})
    with pytest.raises(InvalidArgument, match="longer than 512 bytes"):
        agent_key("r" * 500, "send_email", {})
    assert len(agent_key("r" * 420, "send_email", {})) <= 512


@pytest.mark.parametrize("key", [
    "call_Jja7J89XsjrOLA5rMEOWSL7x",            # OpenAI
    "call_0_3b5e2c4d-8f1a-4b6c-9d2e-7f8a9b0c1d2e",  # DeepSeek
    "fc_67ca09c5efe0819096d0511c92b8c890096610f474011cc0",  # OpenAI Responses item
    "toolu_01A09q90qw90lq917835lq9",            # Anthropic
    "toolu_vrtx_01XyZabcDEF123",                # Anthropic on Vertex
    "srvtoolu_014hJH82Qum7Td6UV8gDXThB",        # Anthropic server tool
    "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",           # Amazon Bedrock
    "pyd_ai_5f0c3c5e0e7b4b3f9c1d2e3f4a5b6c7d",  # Pydantic AI
    "order-42:call_Jja7J89XsjrOLA5rMEOWSL7x",   # a part of the key
    "run-7/send_email/toolu_01A09q90qw90lq917835lq9",
])
def test_tool_call_ids_are_recognised(key: str) -> None:
    assert agent_keys.tool_call_id_in(key) is not None


@pytest.mark.parametrize("key", [
    "order-42", "call_center", "call_center_department", "recall_Jja7J89XsjrOLA5r",
    str(uuid.uuid4()), "run-1:send_email:" + "a" * 64, "toolu_", "fc_abc", "42",
    "ann@example.com/Welcome",
])
def test_other_keys_are_not(key: str) -> None:
    assert agent_keys.tool_call_id_in(key) is None


def test_a_key_that_looks_like_a_tool_call_id_is_warned_about_once_per_scope(
        store: Store, scope: str) -> None:
    sent: list[str] = []

    @idempotent(store=store, scope=scope, key=lambda i: i["tool_call_id"])
    def send_email(tool_call_id: str, to: str) -> str:
        sent.append(to)
        return "sent"

    with pytest.warns(KeyWarning, match=r"call_Ab12.*looks like an OpenAI tool-call id") as w:
        send_email("call_Ab12Cd34Ef56Gh78Ij90Kl12", "ann@example.com")
    assert "agent_key(run_id, tool, arguments)" in str(w[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KeyWarning)  # a second warning would raise here
        send_email("call_Zz98Yy76Xx54Ww32Vv10Uu98", "ann@example.com")
    # The point of the warning: a retried turn's new id ran the tool again.
    assert sent == ["ann@example.com", "ann@example.com"]

    @idempotent(store=store, scope=scope + "-other", key_fields=["tool_call_id"])
    def send_sms(tool_call_id: str, to: str) -> str:
        return "sent"

    with pytest.warns(KeyWarning, match="the key fields"):
        send_sms("toolu_01A09q90qw90lq917835lq9", "+100")


def test_agent_keys_are_not_warned_about_unless_the_run_id_is_a_tool_call_id(
        store: Store, scope: str) -> None:
    @idempotent(store=store, scope=scope,
                key=lambda i: agent_key(i["run_id"], "send_email", {"to": i["to"]}))
    def send_email(run_id: str, to: str) -> str:
        return "sent"

    with warnings.catch_warnings():
        warnings.simplefilter("error", KeyWarning)
        send_email(str(uuid.uuid4()), "ann@example.com")
    with pytest.warns(KeyWarning):
        send_email("call_Ab12Cd34Ef56Gh78Ij90Kl12", "ann@example.com")


def test_the_names_are_exported() -> None:
    assert pg_idempotency.agent_key is agent_key
    assert issubclass(pg_idempotency.KeyWarning, UserWarning)
