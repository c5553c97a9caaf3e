"""An idempotent send_email in Python (psycopg 3) on pg_idempotency's SQL API.

Three retries of send_email(conn, "call-1", "ann@example.com") send one email: the first
claims the call, sends, and records the result; the others replay that result. Without a
call id, send_email_by_content(conn, email) makes the email itself the key (HASH_INPUT).

`conn` must be in autocommit mode (psycopg.connect(dsn, autocommit=True)): otherwise
psycopg opens a transaction implicitly, and the claim stays invisible to other sessions
(which block on its row) until you commit. Behind a pooler in transaction mode (PgBouncer,
Supavisor, Neon's pooler) open it with prepare_threshold=None too: psycopg prepares a
statement server-side after 5 executions, and the pooler's next server connection does
not have it. For a side effect that is a write to the same
database, use send_email_in_transaction: claim, write and completion in one transaction.
"""

from dataclasses import dataclass
from datetime import timedelta

import json

import psycopg
from psycopg.rows import namedtuple_row
from psycopg.types.json import Jsonb

# Named arguments say what each value is; the casts tell the server each parameter's type
# (psycopg sends a str as "unknown" and None without a type). The functions are named with
# their schema (public, where CREATE EXTENSION puts them; yours if you installed elsewhere):
# an unqualified call would run whatever idem_begin a schema earlier on the search_path
# holds (docs/security.md).
BEGIN = """
    SELECT outcome, fence, attempt, recovered, upstream_key, response, retry_after
    FROM public.idem_begin(scope => 'send_email', key => %(key)s, request => %(request)s::jsonb,
                    lease => %(lease)s::interval, wait => %(wait)s::interval)"""
COMPLETE = """
    SELECT state FROM public.idem_complete(scope => 'send_email', key => %(key)s,
                                    fence => %(fence)s::bigint, response => %(response)s::jsonb)"""

# HASH_INPUT: key NULL, and the server derives the key from the request's canonical JSON;
# the `key` column hands it back for idem_complete (COMPLETE above takes it as it is).
BEGIN_BY_CONTENT = """
    SELECT outcome, fence, attempt, recovered, upstream_key, response, retry_after, key
    FROM public.idem_begin(scope => 'send_email', key => NULL, request => %(request)s::jsonb,
                    lease => %(lease)s::interval, wait => %(wait)s::interval)"""

LEASE_LOST = "IK003"  # SQLSTATEs: docs/errors.md


@dataclass
class Result:
    outcome: str  # sent | replay | in_progress | lease_lost
    response: dict | None = None  # jsonb arrives as a dict
    retry_after: timedelta | None = None  # in_progress: when to ask again (the running call's estimated time left, never past the holder's lease)
    recovered: bool = False  # sent after taking over a lapsed claim
    key: str | None = None  # send_email_by_content: the key the server derived


def deliver(conn, to, upstream_key):
    """The side effect: hand the email to the provider (here: a row in the outbox table).
    upstream_key (a uuid.UUID) is the same on every attempt, a takeover included: send it
    to the provider as its Idempotency-Key."""
    cur = conn.execute(
        "INSERT INTO outbox (recipient, upstream_key) VALUES (%s, %s) RETURNING id",
        (to, upstream_key))
    return {"email_id": cur.fetchone()[0]}


def begin(conn, call_id, to, lease=None, wait=None):
    """idem_begin: lease and wait are intervals ('20 milliseconds', or a timedelta)."""
    params = {"key": call_id, "lease": lease, "wait": wait,
              # psycopg adapts a dict to json only when wrapped: Jsonb(...)
              "request": Jsonb({"to": to})}
    return conn.cursor(row_factory=namedtuple_row).execute(BEGIN, params).fetchone()


def complete(conn, call_id, fence, response):
    """idem_complete. False when the fence is stale (IK003, lease lost): the lease lapsed
    and another worker took the call over; it owns the call and records its result."""
    try:
        conn.execute(COMPLETE, {"key": call_id, "fence": fence, "response": Jsonb(response)})
        return True
    except psycopg.Error as e:
        if e.sqlstate == LEASE_LOST:  # e.diag.message_detail and .message_hint say more
            return False
        raise


def send_email(conn, call_id, to, *, lease=None, wait=None, effect=deliver):
    """One call of the send_email tool. If `effect` raises, the claim stays until its lease
    lapses; a retry after that takes it over (recovered=True) with the same upstream key."""
    claim = begin(conn, call_id, to, lease, wait)
    if claim.outcome == "replay":
        return Result("replay", claim.response)
    if claim.outcome == "in_progress":  # retry after retry_after, or pass wait
        return Result("in_progress", retry_after=claim.retry_after)
    response = effect(conn, to, claim.upstream_key)
    if not complete(conn, call_id, claim.fence, response):
        # Someone else owns this call now: do not retry the effect, do not overwrite
        # their result. Report it; a later retry of the call replays their result.
        return Result("lease_lost", response, recovered=claim.recovered)
    return Result("sent", response, recovered=claim.recovered)


def send_email_by_content(conn, email, *, lease=None, wait=None, effect=deliver):
    """One call of the send_email tool keyed by what it sends (HASH_INPUT): `email` is a dict,
    or JSON text as it arrived (an HTTP body, say), with at least "to". The server parses
    and canonicalises it, so the same email spelled with other key order or whitespace is
    the same call; there is nothing to hash here, and no canonical JSON to get right: the
    key idem_begin derived comes back in its `key` column, and idem_complete gets that."""
    request = email if isinstance(email, str) else Jsonb(email)  # text: cast to jsonb in SQL
    to = (json.loads(email) if isinstance(email, str) else email)["to"]
    claim = conn.cursor(row_factory=namedtuple_row).execute(
        BEGIN_BY_CONTENT, {"request": request, "lease": lease, "wait": wait}).fetchone()
    if claim.outcome == "replay":
        return Result("replay", claim.response, key=claim.key)
    if claim.outcome == "in_progress":
        return Result("in_progress", retry_after=claim.retry_after, key=claim.key)
    response = effect(conn, to, claim.upstream_key)
    if not complete(conn, claim.key, claim.fence, response):
        return Result("lease_lost", response, recovered=claim.recovered, key=claim.key)
    return Result("sent", response, recovered=claim.recovered, key=claim.key)


def send_email_in_transaction(pool, call_id, to, *, effect=deliver):
    """Exactly-once when the effect is a write to this database: idem_begin, the write and
    idem_complete in ONE transaction on ONE pooled connection. If anything raises, the
    transaction rolls back, and the claim vanishes with the outbox row."""
    with pool.connection() as conn, conn.transaction():
        claim = begin(conn, call_id, to)
        if claim.outcome != "claimed":
            return Result(claim.outcome, claim.response, claim.retry_after)
        response = effect(conn, to, claim.upstream_key)
        # No IK003 here: until we commit, a duplicate waits on our row, then replays.
        conn.execute(COMPLETE, {"key": call_id, "fence": claim.fence,
                                "response": Jsonb(response)})
        return Result("sent", response)
