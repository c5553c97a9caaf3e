"""Claim, run once, replay: the decorator over the store, blocking and async."""

from __future__ import annotations

import inspect
import threading
from datetime import timedelta

import pytest

import pg_idempotency as pi
from pg_idempotency import AsyncStore, Store, current_call, idempotent

from .helpers import Effects, record_of


def test_three_calls_run_once_and_replay_the_first_result(store: Store, scope: str, sql) -> None:
    sent = Effects()

    @idempotent(store=store, scope=scope, ttl=60)
    def send_email(to: str, subject: str) -> dict:
        return {"email_id": sent(to), "upstream": current_call().upstream_key}

    first = send_email("ann@example.com", "Hi")
    assert [send_email("ann@example.com", "Hi") for _ in range(2)] == [first, first]
    assert sent.count == 1
    other = send_email("bob@example.com", "Hi")
    assert other["email_id"] == 2 and sent.count == 2
    # The server derived the key (HASH_INPUT) from the arguments by name.
    key = sql.execute("SELECT encode(idem_hash(%s::jsonb), 'hex')",
                      ('{"to": "ann@example.com", "subject": "Hi"}',)).fetchone()[0]
    rec = record_of(sql, scope, key)
    assert rec is not None and rec["state"] == "succeeded" and rec["response"] == first
    assert first["upstream"] == rec["upstream_key"]


async def test_async_functions_run_once(astore: AsyncStore, scope: str) -> None:
    sent = Effects()

    @idempotent(store=astore, scope=scope)
    async def charge(order_id: str, cents: int) -> dict:
        return {"charge": sent(order_id), "key": current_call().key}

    first = await charge("o-1", 500)
    assert await charge("o-1", 500) == first
    assert await charge(order_id="o-1", cents=500) == first, "keywords name the same call"
    assert sent.count == 1


def test_the_signature_annotations_and_docstring_are_kept(store: Store) -> None:
    def send(to: str, subject: str = "Hi", *, urgent: bool = False) -> dict:
        """Send an email."""
        return {}

    wrapped = idempotent(store=store)(send)
    assert inspect.signature(wrapped) == inspect.signature(send)
    assert wrapped.__doc__ == "Send an email." and wrapped.__name__ == "send"
    assert wrapped.__annotations__ == send.__annotations__
    assert pi.settings_of(wrapped) is not None and pi.settings_of(send) is None


def test_defaults_are_part_of_the_input(store: Store, scope: str) -> None:
    sent = Effects()

    @idempotent(store=store, scope=scope)
    def send(to: str, subject: str = "Hi") -> int:
        return sent(to)

    assert send("ann") == send("ann", "Hi") == send(to="ann", subject="Hi") == 1
    assert send("ann", "Bye") == 2


def test_another_scope_is_another_call(store: Store, scope: str) -> None:
    sent = Effects()

    @idempotent(store=store, scope=scope + "-a")
    def a(x: int) -> int:
        return sent(x)

    @idempotent(store=store, scope=scope + "-b")
    def b(x: int) -> int:
        return sent(x)

    assert (a(1), b(1), a(1), b(1)) == (1, 2, 1, 2)


def test_the_scope_defaults_to_the_function_s_name(store: Store, sql) -> None:
    @idempotent(store=store, strategy="explicit", key=lambda i: i["id"])
    def py_scope_default_name(id: str) -> int:
        return 7

    key = f"k-{threading.get_ident()}-{id(store)}"
    sql.execute("SELECT idem_forget('py_scope_default_name', %s)", (key,))
    assert py_scope_default_name(key) == 7
    assert record_of(sql, "py_scope_default_name", key) is not None


def test_the_context_is_the_call_s(store: Store, scope: str) -> None:
    seen = []

    @idempotent(store=store, scope=scope, lease=timedelta(seconds=30))
    def tool(x: int) -> int:
        c = current_call()
        seen.append(c)
        c.lease.ensure()
        return x

    tool(1)
    (c,) = seen
    assert (c.scope, c.attempt, c.recovered, c.lease.state) == (scope, 1, False, "held")
    assert c.fence is not None and len(c.key) == 64 and c.input == {"x": 1}
    with pytest.raises(LookupError):
        current_call()
    assert pi.maybe_current_call() is None


def test_a_replay_gives_back_the_annotated_type(store: Store, scope: str) -> None:
    pydantic = pytest.importorskip("pydantic", reason="pydantic is the pydantic extra")

    class Receipt(pydantic.BaseModel):
        email_id: int
        to: str

    sent = Effects()

    @idempotent(store=store, scope=scope)
    def send(to: str) -> Receipt:
        return Receipt(email_id=sent(to), to=to)

    first = send("ann")
    again = send("ann")
    assert isinstance(again, Receipt) and again == first and sent.count == 1


def test_no_settings_no_protection_and_none_runs_every_time(store: Store, scope: str) -> None:
    sent = Effects()

    def plain(x: int) -> int:
        return sent(x)

    @idempotent(store=store, scope=scope, strategy=pi.KeyStrategy.NONE)
    def unprotected(x: int) -> int:
        return sent(x)

    assert (plain(1), plain(1), unprotected(1), unprotected(1)) == (1, 2, 3, 4)


def test_uuid_keys_are_fresh_per_call_and_reach_the_function(store: Store, scope: str,
                                                              sql) -> None:
    keys = []

    @idempotent(store=store, scope=scope, strategy="uuid")
    def call_upstream() -> str:
        keys.append(current_call().upstream_key)
        return keys[-1]

    assert call_upstream() != call_upstream() and len(set(keys)) == 2
    # Nothing deduplicated here: no record.
    n = sql.execute("SELECT count(*) FROM idem_metrics() WHERE scope = %s", (scope,)).fetchone()
    assert n[0] == 0


def test_a_store_of_the_wrong_kind_is_refused_at_decoration(store: Store, dsn: str) -> None:
    with pytest.raises(pi.InvalidArgument, match="async"):
        @idempotent(store=store)
        async def a() -> None: ...

    astore = AsyncStore(dsn)
    with pytest.raises(pi.InvalidArgument, match="blocking"):
        @idempotent(store=astore)
        def b() -> None: ...


def test_without_a_store_the_error_says_how_to_configure(monkeypatch) -> None:
    from pg_idempotency import decorator

    monkeypatch.setattr(decorator, "_DEFAULT", decorator._Default())

    @idempotent
    def f(x: int) -> int:
        return x

    with pytest.raises(pi.InvalidArgument) as e:
        f(1)
    assert "configure" in (e.value.hint or "")


def test_configure_serves_blocking_and_async_functions(dsn: str, scope: str, monkeypatch) -> None:
    import asyncio

    from pg_idempotency import decorator

    monkeypatch.setattr(decorator, "_DEFAULT", decorator._Default())
    pi.configure(dsn)
    sent = Effects()

    @idempotent(scope=scope)
    def f(x: int) -> int:
        return sent(x)

    @idempotent(scope=scope)
    async def g(x: int) -> int:
        return sent(x)

    assert f(1) == 1
    assert asyncio.run(g(1)) == 1, "the same call from async code replays"
    assert sent.count == 1
    decorator._DEFAULT.sync.close()  # type: ignore[union-attr]


def test_a_conninfo_given_as_store_opens_one_pool(dsn: str, scope: str) -> None:
    import os

    from .forwarder import Forwarder

    if os.environ.get("PGIDEM_STATEMENTS") == "unnamed":  # behind a pooler (conftest.py)
        pytest.skip("a conninfo given as store= opens a pool that prepares statements "
                    "(psycopg's default), which PgBouncer in transaction mode does not keep: "
                    "behind it give Store(..., prepare=False) or configure(..., prepare=False)")

    link = Forwarder(dsn)  # counts the connections made through it
    try:
        @idempotent(store=link.dsn, scope=scope)
        def f(x: int) -> int:
            return x

        for i in range(10):
            assert f(i) == i
        # One pool, of a connection or two as it warms up; a pool per call would open ten.
        assert 1 <= link.accepted <= 2, link.accepted
    finally:
        link.close()
