"""Which call a key names: HASH_INPUT, EXPLICIT (a key function, named fields, the class's
idempotency_key_for), the fingerprint under EXPLICIT, and class-level settings."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import pg_idempotency as pi
from pg_idempotency import Store, idempotent

from .helpers import Effects, record_of


def test_a_key_function_names_the_call(store: Store, scope: str, sql) -> None:
    made = Effects()

    @idempotent(store=store, scope=scope, key=lambda i: i["title"].lower())
    def create_issue(title: str, body: str) -> int:
        return made(title)

    # Same title, same issue: a body edit replays (no fingerprint under EXPLICIT).
    assert create_issue("Crash", "first") == create_issue("crash", "edited") == 1
    assert made.count == 1 and record_of(sql, scope, "crash") is not None


def test_named_fields_are_dotted_paths(store: Store, scope: str) -> None:
    @dataclass
    class Order:
        id: str
        lines: list

    charged = Effects()

    @idempotent(store=store, scope=scope, key_fields=["order.id", "currency"])
    def charge(order: Order, currency: str) -> int:
        return charged(order.id)

    assert charge(Order("o-1", [1]), "EUR") == charge(Order("o-1", [2]), "EUR") == 1
    assert charge(Order("o-1", [1]), "USD") == 2
    with pytest.raises(pi.InvalidArgument, match=r"no field 'order\.nope'"):
        idempotent(store=store, scope=scope, key_fields=["order.nope"])(charge)(
            Order("o-2", []), "EUR")


def test_one_key_field_names_the_call_by_its_value_as_json_unless_text(
        store: Store, scope: str) -> None:
    keys: list[str] = []

    @idempotent(store=store, scope=scope, key_fields=["order_id"])
    def charge(order_id: int, note: str = "") -> int:
        keys.append(pi.current_call().key)
        return len(keys)

    @idempotent(store=store, scope=scope + "_text", key_fields=["order_id"])
    def refund(order_id: str) -> int:
        keys.append(pi.current_call().key)
        return len(keys)

    assert charge(7) == charge(7, "again") == charge(order_id=7) == 1
    assert charge(8) == 2
    assert refund("7") == 3 and refund(order_id="7") == 3
    assert keys == ["7", "8", "7"]


@pytest.mark.parametrize("key", ["", "   ", None, 42])
def test_a_blank_key_is_an_error_and_runs_nothing(store: Store, scope: str, key) -> None:
    ran = Effects()

    @idempotent(store=store, scope=scope, key=lambda i: key)
    def f(x: int) -> int:
        return ran(x)

    with pytest.raises(pi.InvalidArgument) as e:
        f(1)
    assert e.value.sqlstate == "22023" and e.value.hint and ran.count == 0


def test_the_fingerprint_under_explicit_rejects_another_body(store: Store, scope: str) -> None:
    made = Effects()

    @idempotent(store=store, scope=scope, key_fields="title", fingerprint=["body"])
    def create_issue(title: str, body: str, labels: tuple = ()) -> int:
        return made(title)

    assert create_issue("a", "x") == create_issue("a", "x", ("bug",)) == 1
    with pytest.raises(pi.Mismatch) as e:
        create_issue("a", "y")
    assert e.value.sqlstate == "IK001" and e.value.detail
    assert made.count == 1


def test_a_fingerprint_under_hash_input_is_refused(store: Store) -> None:
    with pytest.raises(pi.InvalidArgument, match="EXPLICIT"):
        @idempotent(store=store, fingerprint="input")
        def f(x: int) -> int:
            return x


def test_excluded_parameters_are_not_part_of_the_key(store: Store, scope: str) -> None:
    sent = Effects()

    @idempotent(store=store, scope=scope, exclude=["client"])
    def send(client: object, to: str) -> int:
        return sent(to)

    assert send(object(), "ann") == send(object(), "ann") == 1
    with pytest.raises(pi.InvalidArgument, match="no parameter 'nope'"):
        idempotent(store=store, exclude=["nope"])(send)


def test_class_settings_apply_to_its_methods_and_a_method_s_own_win_whole(
        store: Store, scope: str) -> None:
    made = Effects()

    @idempotent(store=store, strategy="explicit", ttl=86_400, scope=scope)
    class IssueTools:
        def create_issue(self, title: str, body: str) -> int:
            return made(("issue", title))

        # Its own settings win whole: HASH_INPUT here, not the class's EXPLICIT.
        @idempotent(store=store, scope=scope + "-orders", cache_failures=True,
                    on_cache_hit="fail_fast")
        def place_order(self, sku: str, quantity: int) -> int:
            return made(("order", sku))

        def idempotency_key_for(self, input: dict) -> str:
            return input["title"].lower()

        def _helper(self) -> int:
            return made("helper")

    tools = IssueTools()
    assert tools.create_issue("Crash", "a") == tools.create_issue("CRASH", "b") == 1
    assert tools.place_order("sku-1", 2) == 2
    with pytest.raises(pi.RepeatRefused):
        tools.place_order("sku-1", 2)
    assert tools._helper() == 3 and tools._helper() == 4, "private methods are not calls"
    assert made.count == 4


def test_explicit_without_a_key_says_what_to_add(store: Store, scope: str) -> None:
    @idempotent(store=store, scope=scope, strategy="explicit")
    def f(x: int) -> int:
        return x

    with pytest.raises(pi.InvalidArgument) as e:
        f(1)
    assert "idempotency_key_for" in (e.value.hint or "")


def test_unknown_members_and_words_are_refused_with_the_choices() -> None:
    with pytest.raises(pi.InvalidArgument, match="unknown member"):
        idempotent(tll=60)  # type: ignore[call-overload]
    with pytest.raises(pi.InvalidArgument, match="on_cache_hit must be one of"):
        idempotent(on_cache_hit="sometimes")
    with pytest.raises(pi.InvalidArgument, match="ttl must be"):
        idempotent(ttl="1 day")
