"""An agent's tools in Python with pg-idempotency (scripts/python-demo.sh runs it):

1. send_email, retried three times by the agent's loop, sends one email: the claim, the
   outbox row and the result commit in one transaction on the caller's connection.
2. charge_card's process charges the card and dies before it records the result. The
   retry takes the call over once the lease lapsed and asks the payment provider, by the
   call's upstream key, whether the dead attempt charged: it did, so the charge is recorded,
   not made again.

    python agent_tools.py "<libpq conninfo of a database with pg_idempotency installed>"
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time

import psycopg

import pg_idempotency
from pg_idempotency import current_call, idempotent


def setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS outbox, charges")
        c.execute("CREATE TABLE outbox (id serial PRIMARY KEY, recipient text, subject text)")
        # The payment provider's own ledger, which it keeps by Idempotency-Key.
        c.execute("CREATE TABLE charges (id serial PRIMARY KEY, idempotency_key uuid UNIQUE, "
                  "cents int)")
        # A run starts afresh: the calls an earlier run recorded are forgotten.
        c.execute("SELECT idem_forget('charge_card', 'order-7'), idem_forget('send_email', "
                  "encode(idem_hash(%s::jsonb), 'hex'))", (EMAIL,))


EMAIL = '{"to": "ann@example.com", "subject": "Your order"}'


# 1. Exactly once: the email is a row in this database's outbox.
@idempotent(ttl=86_400, exactly_once="conn")
def send_email(conn: psycopg.Connection, to: str, subject: str) -> dict:
    row = conn.execute("INSERT INTO outbox (recipient, subject) VALUES (%s, %s) RETURNING id",
                       (to, subject)).fetchone()
    assert row is not None
    return {"email_id": row[0]}


# 2. A charge at a provider that deduplicates on the key it is sent.
def provider_charge(dsn: str, key: str, cents: int) -> dict:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute("INSERT INTO charges (idempotency_key, cents) VALUES (%s, %s) "
                        "RETURNING id", (key, cents)).fetchone()
        assert row is not None
        return {"charge_id": row[0]}


def provider_find(dsn: str, key: str) -> dict | None:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute("SELECT id FROM charges WHERE idempotency_key = %s", (key,)).fetchone()
        return None if row is None else {"charge_id": row[0]}


DSN = ""


def find_charge(call: pg_idempotency.Reconcile) -> object:
    found = provider_find(DSN, call.upstream_key)
    print(f"    the takeover asks the provider for key {call.upstream_key}: "
          f"{'found ' + str(found) if found else 'nothing'}")
    return found if found is not None else pg_idempotency.NOT_FOUND


@idempotent(key_fields=["order_id"], lease=2, on_unknown_outcome=find_charge)
def charge_card(order_id: str, cents: int, crash: bool = False) -> dict:
    charge = provider_charge(DSN, current_call().upstream_key, cents)
    if crash:
        print(f"    the process charged {charge} and dies before recording it")
        os._exit(1)
    return charge


def crashing_process(dsn: str) -> None:
    global DSN
    DSN = dsn
    pg_idempotency.configure(dsn)
    charge_card("order-7", 1999, crash=True)


def main(dsn: str) -> None:
    global DSN
    DSN = dsn
    setup(dsn)
    pg_idempotency.configure(dsn)

    print("1. The agent calls send_email; its retry loop calls it twice more.")
    with psycopg.connect(dsn) as conn:
        for attempt in (1, 2, 3):
            print(f"  call {attempt}: {send_email(conn, 'ann@example.com', 'Your order')}")
        emails = conn.execute("SELECT count(*) FROM outbox").fetchone()
    print(f"  emails in the outbox: {emails[0] if emails else '?'}   <- three calls, one email")

    print("2. charge_card's process crashes right after charging.")
    child = multiprocessing.get_context("spawn").Process(target=crashing_process, args=(dsn,))
    child.start()
    child.join()
    print(f"  the process exited with {child.exitcode}; the agent retries:")
    asked = 0
    while True:
        try:
            result = charge_card("order-7", 1999)
            break
        except pg_idempotency.InProgress as e:
            # The crashed attempt's lease still runs: ask again when the server says.
            asked += 1
            if asked == 1:
                print("    InProgress: the dead attempt's lease still runs; asking again as "
                      "the server says (retry_after)")
            time.sleep(e.retry_after.total_seconds() if e.retry_after else 0.5)
    print(f"    {result}")
    print(f"  and again: {charge_card('order-7', 1999)}")
    with psycopg.connect(dsn) as c:
        n = c.execute("SELECT count(*) FROM charges").fetchone()
    print(f"  charges at the provider: {n[0] if n else '?'}   <- one charge, recorded once")


if __name__ == "__main__":
    main(sys.argv[1])
