"""While a call runs: duplicates are told it runs (or wait for its result), the heartbeat
keeps its lease past the lease's length, and a lost lease reaches the function."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

import pg_idempotency as pi
from pg_idempotency import Store, current_call, idempotent

from .helpers import Effects, record_of, until_server_passes


def wait_for(event: threading.Event, what: str) -> None:
    assert event.wait(30), f"{what} did not happen within 30 s"


def until_waiting_in_begin(sql, application_name: str) -> None:
    """The duplicate's session is inside idem_begin (seen by the server)."""
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = sql.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND state = 'active' AND query LIKE '%%idem_begin%%'", (application_name,)
        ).fetchone()
        if row and row[0]:
            return
        time.sleep(0.01)
    raise AssertionError("the duplicate never waited inside idem_begin")


def test_a_duplicate_is_told_it_runs_and_with_wait_gets_the_result(
        store: Store, dsn: str, scope: str, sql) -> None:
    started, finish = threading.Event(), threading.Event()
    sent = Effects()

    def body(to: str) -> dict:
        started.set()
        wait_for(finish, "the test's go-ahead")
        return {"email_id": sent(to)}

    send = idempotent(store=store, scope=scope)(body)
    other = Store(dsn + " application_name=py_duplicate")  # another process, as it were
    try:
        send_elsewhere = idempotent(store=other, scope=scope)(body)
        send_waiting = idempotent(store=other, scope=scope, wait=30)(body)
        first: dict = {}
        t = threading.Thread(target=lambda: first.update(send("ann")))
        t.start()
        wait_for(started, "the first call")
        with pytest.raises(pi.InProgress) as e:
            send_elsewhere("ann")
        assert e.value.retry_after is not None and e.value.retry_after > timedelta(0)
        waited: dict = {}
        w = threading.Thread(target=lambda: waited.update(send_waiting("ann")))
        w.start()
        until_waiting_in_begin(sql, "py_duplicate")
        finish.set()
        t.join(30)
        w.join(30)
        assert first == waited == {"email_id": 1} and sent.count == 1
    finally:
        finish.set()
        other.close()


def test_a_retry_in_the_same_process_joins_its_holder(store: Store, scope: str) -> None:
    started, finish = threading.Event(), threading.Event()
    sent = Effects()

    def body(to: str) -> dict:
        started.set()
        wait_for(finish, "the test's go-ahead")
        return {"email_id": sent(to)}

    send = idempotent(store=store, scope=scope, wait=30)(body)
    send_now = idempotent(store=store, scope=scope)(body)
    first: dict = {}
    t = threading.Thread(target=lambda: first.update(send("ann")))
    t.start()
    wait_for(started, "the first call")
    # Answered by the holder in this process, not by the store.
    with pytest.raises(pi.InProgress, match="in this process"):
        send_now("ann")
    joined: dict = {}
    j = threading.Thread(target=lambda: joined.update(send("ann")))
    j.start()
    finish.set()
    t.join(30)
    j.join(30)
    assert first == joined == {"email_id": 1} and sent.count == 1


def test_the_heartbeat_keeps_the_lease_past_its_length(store: Store, dsn: str, scope: str,
                                                        sql) -> None:
    sent = Effects()
    other = Store(dsn)
    claimed_lease: list = []

    # A lease of 3 s, renewed every second: a beat late by up to 2 s on a loaded machine
    # still keeps it.
    @idempotent(store=store, scope=scope, key=lambda i: i["id"], lease=3)
    def slow(id: str) -> dict:
        rec = record_of(sql, scope, id)
        assert rec is not None
        claimed_lease.append(rec["lease_until"])
        # Run well past the first lease's end, as the server tells time.
        until_server_passes(sql, rec["lease_until"] + timedelta(seconds=1), "two leases")
        # Another process is still told it runs: the lease was extended, not lapsed.
        assert other.begin(scope, id).outcome == "in_progress"
        assert current_call().lease.state == "held"
        return {"done": sent(id)}

    try:
        assert slow("s-1") == {"done": 1}
        rec = record_of(sql, scope, "s-1")
        assert rec is not None and rec["state"] == "succeeded" and rec["fence"] is not None
    finally:
        other.close()


def test_a_lost_lease_reaches_the_function_and_nothing_is_recorded(store: Store, scope: str,
                                                                   sql) -> None:
    effects = Effects()

    @idempotent(store=store, scope=scope, key=lambda i: i["id"], lease=1)
    def charge(id: str, check: bool) -> dict:
        lease = current_call().lease
        # An operator forgets the running call: the next heartbeat is refused.
        sql.execute("SELECT idem_forget(%s, %s)", (scope, id))
        import time

        deadline = time.monotonic() + 30
        while not lease.is_lost and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lease.state == "lost"
        if check:
            lease.ensure()  # stops short of the effect
        return {"charged": effects(id)}

    with pytest.raises(pi.LeaseLost) as e:
        charge("c-1", True)
    assert e.value.sqlstate == "IK003" and effects.count == 0
    assert record_of(sql, scope, "c-1") is None, "released, not remembered as failed"
    with pytest.raises(pi.LeaseLost) as e:
        charge("c-2", False)
    assert e.value.response == {"charged": 1}, "the result is handed back, not recorded"
    assert record_of(sql, scope, "c-2") is None


def test_an_expired_result_is_claimed_afresh(store: Store, scope: str, sql) -> None:
    sent = Effects()

    @idempotent(store=store, scope=scope, key=lambda i: i["id"], ttl=1)
    def send(id: str) -> int:
        return sent(id)

    assert send("e-1") == send("e-1") == 1
    rec = record_of(sql, scope, "e-1")
    assert rec is not None
    until_server_passes(sql, rec["expires_at"], "the result's ttl")
    assert send("e-1") == 2
