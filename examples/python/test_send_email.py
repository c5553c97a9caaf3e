"""The send_email example against a real database with the SQL API installed.

PGIDEM_DSN: a libpq connection string, e.g. "host=/tmp port=5432 user=postgres dbname=x"
(scripts/test-examples.sh sets it).
PGIDEM_STATEMENTS=unnamed: the DSN is a pooler in transaction mode (PgBouncer): every
connection is opened with prepare_threshold=None, as docs/scaling.md tells users to.
"""

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool

from send_email import (COMPLETE, Jsonb, begin, complete, deliver, send_email,
                        send_email_by_content, send_email_in_transaction)

DSN = os.environ.get("PGIDEM_DSN") or pytest.exit("set PGIDEM_DSN to a libpq conninfo", 2)

# psycopg prepares a statement server-side once a connection has run it 5 times; a pooler
# in transaction mode then lends another server connection, which lacks it or has another
# client's of the same name ("prepared statement "_pg3_0" already exists").
# prepare_threshold=None never prepares.
CONNECT = {"autocommit": True}
if os.environ.get("PGIDEM_STATEMENTS") == "unnamed":
    CONNECT["prepare_threshold"] = None


@pytest.fixture(scope="session", autouse=True)
def outbox():
    with psycopg.connect(DSN, **CONNECT) as conn:
        conn.execute("""CREATE TABLE IF NOT EXISTS outbox (
            id serial PRIMARY KEY, recipient text NOT NULL, upstream_key uuid NOT NULL,
            sent_at timestamptz NOT NULL DEFAULT clock_timestamp())""")


@pytest.fixture
def connect():
    """Opens autocommit connections (each one a session), closed after the test."""
    conns = []
    def open_one():
        conns.append(psycopg.connect(DSN, **CONNECT))
        return conns[-1]
    yield open_one
    for c in conns:
        c.close()


@pytest.fixture
def pool():
    with ConnectionPool(DSN, min_size=1, max_size=4, kwargs=CONNECT) as p:
        yield p


@pytest.fixture
def call():
    return f"call-{uuid.uuid4()}"


@pytest.fixture
def to(call):
    return f"{call}@example.com"  # one recipient per test: emails() counts this test's


@pytest.fixture
def two_roles(call):
    """Two login roles of their own (unique names, members of idempotency_user), one
    autocommit session as each: (name, conn) pairs. Afterwards their records of `call` are
    forgotten, their grants revoked and the roles dropped."""
    suffix = uuid.uuid4().hex[:12]
    names = [f"pidem_ex_{suffix}_a", f"pidem_ex_{suffix}_b"]
    password = uuid.uuid4().hex  # unused where local connections are trusted
    admin = psycopg.connect(DSN, **CONNECT)
    sessions = []
    try:
        for name in names:
            # A name is an identifier, not a value: psycopg.sql quotes it.
            role = sql.Identifier(name)
            admin.execute(sql.SQL(
                "CREATE ROLE {} LOGIN PASSWORD {} IN ROLE idempotency_user").format(
                    role, sql.Literal(password)))
            admin.execute(sql.SQL(
                "GRANT SELECT, INSERT ON outbox TO {0}; GRANT USAGE ON SEQUENCE outbox_id_seq TO {0}"
            ).format(role))
            # The same database as DSN, logged in as the role.
            sessions.append(psycopg.connect(make_conninfo(DSN, user=name, password=password),
                                            **CONNECT))
        yield list(zip(names, sessions))
    finally:
        for conn in sessions:
            conn.close()
        for name in names:
            if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
                admin.execute("SELECT public.idem_forget('send_email', %s, owner => quote_ident(%s)::regrole)",
                              (call, name))
                role = sql.Identifier(name)
                admin.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(role))
        admin.close()


def emails(conn, to):
    return conn.execute("SELECT count(*) FROM outbox WHERE recipient = %s", (to,)).fetchone()[0]


def lookup(conn, call):
    return conn.execute("SELECT state, fence FROM public.idem_lookup('send_email', %s)", (call,)).fetchone()


def test_three_retries_send_one_email(connect, call, to):
    conn = connect()
    results = [send_email(conn, call, to) for _ in range(3)]
    assert [r.outcome for r in results] == ["sent", "replay", "replay"]
    assert emails(conn, to) == 1
    assert results[1].response == results[2].response == results[0].response
    assert lookup(conn, call)[0] == "succeeded"


def test_replay_returns_the_stored_response(connect, call, to):
    first, other = connect(), connect()
    sent = send_email(first, call, to)
    replay = begin(other, call, to)  # another session, as a retry from another process
    assert replay.outcome == "replay"
    assert replay.fence is None  # a duplicate never learns a fence
    assert replay.attempt == 1
    assert replay.response == sent.response == {"email_id": sent.response["email_id"]}
    assert isinstance(sent.response["email_id"], int)


WAITING = """
    SELECT wait_event FROM pg_stat_activity
    WHERE pid = %s AND state = 'active' AND query LIKE '%%idem_begin%%'
      AND wait_event IN ('Extension', 'PgSleep')"""


def test_in_progress_then_wait_replays_the_holders_result(connect, call, to):
    holder, duplicate, waiter, monitor = connect(), connect(), connect(), connect()
    waiter_pid = waiter.execute("SELECT pg_backend_pid()").fetchone()[0]
    seen = {}

    def slow_provider(conn, to_, upstream_key):
        # While the holder sends: a duplicate without wait is told in_progress ...
        seen["plain"] = send_email(duplicate, call, to)
        # ... and one with wait stays inside idem_begin until the holder completes.
        seen["waited"] = threads.submit(send_email, waiter, call, to, wait="1 minute")
        deadline = time.monotonic() + 30
        # The extension waits on a latch (wait_event Extension); the portable variant
        # naps in pg_sleep (PgSleep) and shows no wait_event between naps: poll.
        while monitor.execute(WAITING, (waiter_pid,)).fetchone() is None:
            assert not seen["waited"].done(), seen["waited"].result()
            assert time.monotonic() < deadline, "the waiter never waited"
        return deliver(conn, to_, upstream_key)

    with ThreadPoolExecutor(1) as threads:
        sent = send_email(holder, call, to, lease="1 minute", effect=slow_provider)
        waited = seen["waited"].result(timeout=60)
    assert sent.outcome == "sent"
    plain = seen["plain"]
    assert plain.outcome == "in_progress" and plain.response is None
    assert isinstance(plain.retry_after, timedelta)  # interval arrives as a timedelta
    assert timedelta(0) < plain.retry_after <= timedelta(minutes=1)
    assert waited.outcome == "replay"
    assert waited.response == sent.response
    assert emails(monitor, to) == 1


def test_transaction_claims_writes_and_completes_at_once(pool, connect, call, to):
    other = connect()

    def effect_in_the_transaction(conn, to_, upstream_key):
        assert lookup(other, call) is None  # the claim is not committed yet
        return deliver(conn, to_, upstream_key)

    sent = send_email_in_transaction(pool, call, to, effect=effect_in_the_transaction)
    assert sent.outcome == "sent"
    again = send_email_in_transaction(pool, call, to)
    assert again.outcome == "replay" and again.response == sent.response
    assert lookup(other, call)[0] == "succeeded"
    assert emails(other, to) == 1


def test_rolled_back_transaction_leaves_no_claim_and_no_email(pool, connect, call, to):
    conn = connect()

    def crash_after_insert(conn_, to_, upstream_key):
        deliver(conn_, to_, upstream_key)
        raise RuntimeError("crashed before completing")

    with pytest.raises(RuntimeError):
        send_email_in_transaction(pool, call, to, effect=crash_after_insert)
    assert lookup(conn, call) is None
    assert emails(conn, to) == 0
    retry = begin(conn, call, to)
    assert (retry.outcome, retry.attempt, retry.recovered) == ("claimed", 1, False)


def take_over(conn, call, to):
    """Retries idem_begin until the lapsed lease is taken over (observable state, no sleep)."""
    deadline = time.monotonic() + 30
    while (claim := begin(conn, call, to)).outcome == "in_progress":
        assert time.monotonic() < deadline, "the lease never lapsed"
    return claim


def test_stale_fence_raises_ik003(connect, call, to):
    a, b = connect(), connect()
    old = begin(a, call, to, lease="20 milliseconds")  # ttl stays the default hour
    assert old.outcome == "claimed" and isinstance(old.fence, int)
    new = take_over(b, call, to)
    assert (new.outcome, new.recovered, new.attempt) == ("claimed", True, 2)
    assert new.fence > old.fence
    assert new.upstream_key == old.upstream_key
    with pytest.raises(psycopg.Error) as raised:
        a.execute(COMPLETE, {"key": call, "fence": old.fence, "response": Jsonb({})})
    assert raised.value.sqlstate == "IK003"
    assert raised.value.diag.sqlstate == "IK003"
    assert complete(a, call, old.fence, {"email_id": -1}) is False  # the example's handling
    assert lookup(a, call) == ("in_progress", new.fence)  # an error changes nothing
    assert complete(b, call, new.fence, {"email_id": 2}) is True
    assert begin(a, call, to).response == {"email_id": 2}


def test_lease_lost_is_reported_and_the_effect_not_retried(connect, call, to):
    a, b = connect(), connect()
    seen = {"a_sends": 0}

    def slow_provider(conn, to_, upstream_key):
        seen["a_sends"] += 1
        sent = deliver(conn, to_, upstream_key)
        # The provider is slow: A's lease lapses, and a retry (B) takes the call over.
        seen["b"] = take_over_with(b)
        return sent

    def take_over_with(conn):
        deadline = time.monotonic() + 30
        while (r := send_email(conn, call, to)).outcome == "in_progress":
            assert time.monotonic() < deadline, "the lease never lapsed"
        return r

    result = send_email(a, call, to, lease="20 milliseconds", effect=slow_provider)
    assert result.outcome == "lease_lost"
    assert seen["a_sends"] == 1
    assert (seen["b"].outcome, seen["b"].recovered) == ("sent", True)
    # B resent (A's outcome was unknown to it) with the same upstream key: a provider that
    # honours Idempotency-Key sends one email; B's result is the call's.
    assert a.execute("SELECT count(*), count(DISTINCT upstream_key) FROM outbox WHERE recipient = %s",
                     (to,)).fetchone() == (2, 1)
    assert send_email(a, call, to).response == seen["b"].response != result.response
    expires_at = a.execute("SELECT expires_at FROM public.idem_lookup('send_email', %s)", (call,)).fetchone()[0]
    assert isinstance(expires_at, datetime) and expires_at.tzinfo is not None


def test_the_email_is_its_own_key(connect, to):
    conn = connect()
    # One email, three spellings: key order and whitespace differ, the content does not.
    spellings = [f'{{"to": "{to}", "subject": "Welcome"}}',
                 f'{{"subject":"Welcome","to":"{to}"}}',
                 f'{{\n  "subject" :  "Welcome" ,\n\t"to" : "{to}"\n}}']
    results = [send_email_by_content(conn, email) for email in spellings]
    assert [r.outcome for r in results] == ["sent", "replay", "replay"]
    assert emails(conn, to) == 1
    assert results[1].response == results[2].response == results[0].response
    # The key the server derived, as idem_hash computes it (no hashing in Python).
    derived = conn.execute("SELECT encode(public.idem_hash(%s::jsonb), 'hex')", (spellings[1],)).fetchone()[0]
    assert [r.key for r in results] == [derived] * 3
    assert lookup(conn, derived)[0] == "succeeded"  # completed under that key
    # Another email is another call, with another key.
    other = send_email_by_content(conn, {"to": to, "subject": "Welcome back"})
    assert other.outcome == "sent" and other.key != derived
    assert other.response != results[0].response
    assert emails(conn, to) == 2


def test_each_role_has_its_own_key_space(two_roles, connect, call, to):
    (name_a, a), (name_b, b) = two_roles
    sent_a = send_email(a, call, to)
    sent_b = send_email(b, call, to)  # the same call id, another role: another call
    assert (sent_a.outcome, sent_b.outcome) == ("sent", "sent")
    assert sent_a.response != sent_b.response
    assert emails(connect(), to) == 2
    # Each role replays its own result, and owns its own record.
    replay_a, replay_b = send_email(a, call, to), send_email(b, call, to)
    assert (replay_a.outcome, replay_a.response) == ("replay", sent_a.response)
    assert (replay_b.outcome, replay_b.response) == ("replay", sent_b.response)
    owner = "SELECT owner::text FROM public.idem_lookup('send_email', %s)"
    assert a.execute(owner, (call,)).fetchone() == (name_a,)
    assert b.execute(owner, (call,)).fetchone() == (name_b,)
    assert lookup(connect(), call) is None  # nor is it the connecting role's call
    assert emails(connect(), to) == 2
