"""After the function ran, its result is never thrown away: a completion the store did not
take is retried under the fence, a retry in the same process joins its holder, and the
function never runs twice (docs/client.md, "After the tool ran")."""

from __future__ import annotations

import time

import pytest

import pg_idempotency as pi
from pg_idempotency import Store, idempotent

from .forwarder import Forwarder
from .helpers import Effects, record_of


@pytest.fixture
def link(dsn: str):
    f = Forwarder(dsn)
    yield f
    f.close()


def until(condition, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {limit} s")
        time.sleep(0.02)


def test_a_store_out_of_reach_after_the_run_records_once_back(link: Forwarder, scope: str,
                                                              sql) -> None:
    cut_store = Store(link.dsn, pool_options={"timeout": 1})
    sent = Effects()

    @idempotent(store=cut_store, scope=scope, key=lambda i: i["id"], lease=1)
    def send(id: str) -> dict:
        n = sent(id)
        link.cut()  # the network fails right after the effect
        return {"email_id": n}

    try:
        with pytest.raises(pi.Unrecorded) as e:
            send("h-1")
        assert e.value.response == {"email_id": 1} and not e.value.replayed
        # A retry in this process while the store is still out of reach joins the holder:
        # it is told the result exists, and nothing runs (no takeover once the lease lapsed).
        with pytest.raises(pi.Unrecorded) as again:
            send("h-1")
        assert again.value.replayed and again.value.response == {"email_id": 1}
        link.restore()
        # The holder records the result under its fence once the store is back.
        until(lambda: (record_of(sql, scope, "h-1") or {}).get("state") == "succeeded",
              "the recording")
        assert send("h-1") == {"email_id": 1}
        rec = record_of(sql, scope, "h-1")
        assert rec is not None and rec["attempt"] == 1 and sent.count == 1
    finally:
        link.restore()
        cut_store.close()


def test_a_result_too_large_is_marked_and_every_retry_says_so(store: Store, scope: str,
                                                              sql) -> None:
    sent = Effects()

    @idempotent(store=store, scope=scope, key=lambda i: i["id"])
    def export(id: str, size: int) -> dict:
        sent(id)
        return {"blob": "x" * size}

    big = 3 << 20  # above max_response_bytes, 1 MB by default on both backends
    with pytest.raises(pi.Unrecorded) as e:
        export("big-1", big)
    assert len(e.value.response["blob"]) == big and not e.value.replayed
    with pytest.raises(pi.Unrecorded) as again:
        export("big-1", big)
    assert again.value.replayed and sent.count == 1
    rec = record_of(sql, scope, "big-1")
    assert rec is not None and "unrecorded" in rec["response"]["pg_idempotency"]


def test_a_result_that_is_not_json_is_marked_and_handed_back(store: Store, scope: str,
                                                             sql) -> None:
    @idempotent(store=store, scope=scope, key=lambda i: i["id"])
    def f(id: str) -> object:
        return object()

    with pytest.raises(pi.Unrecorded) as e:
        f("nj-1")
    assert isinstance(e.value.response, object) and "JSON" in e.value.hint
    rec = record_of(sql, scope, "nj-1")
    assert rec is not None and "unrecorded" in rec["response"]["pg_idempotency"]
