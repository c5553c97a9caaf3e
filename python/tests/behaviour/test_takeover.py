"""A claim whose holder died: once its lease lapsed, a retry takes the call over
(`recovered`, the next attempt, the same upstream key), and `on_unknown_outcome` decides
(rerun, refuse, or a reconcile read)."""

from __future__ import annotations

import pytest

import pg_idempotency as pi
from pg_idempotency import Store, current_call, idempotent

from .helpers import Effects, record_of, until_server_passes


def crashed_claim(store: Store, sql, scope: str, key: str) -> pi.Begin:
    """A holder that claimed and died before it recorded anything: its lease lapses."""
    dead = store.begin(scope, key, lease=1)
    assert dead.outcome == "claimed"
    assert dead.lease_until is not None
    until_server_passes(sql, dead.lease_until, "the dead holder's lease")
    return dead


def tool(store: Store, scope: str, runs: Effects, **members):
    @idempotent(store=store, scope=scope, key=lambda i: i["id"], **members)
    def charge(id: str) -> dict:
        c = current_call()
        runs((c.attempt, c.recovered, c.upstream_key))
        return {"charged": id}

    return charge


def test_rerun_takes_over_with_the_same_upstream_key(store: Store, scope: str, sql) -> None:
    dead = crashed_claim(store, sql, scope, "c-1")
    runs = Effects()
    charge = tool(store, scope, runs)
    assert charge("c-1") == {"charged": "c-1"}
    assert runs.runs == [(2, True, dead.upstream_key)]
    assert charge("c-1") == {"charged": "c-1"} and runs.count == 1


def test_refuse_records_a_mark_and_every_retry_is_refused(store: Store, scope: str,
                                                          sql) -> None:
    crashed_claim(store, sql, scope, "c-1")
    runs = Effects()
    charge = tool(store, scope, runs, on_unknown_outcome="refuse")
    for _ in range(2):
        with pytest.raises(pi.OutcomeUnknown) as e:
            charge("c-1")
        assert "attempt 2" in (e.value.detail or "") and "idem_unresolved" in (e.value.hint or "")
    assert runs.count == 0
    rec = record_of(sql, scope, "c-1")
    assert rec is not None and rec["response"]["pg_idempotency"]["outcome_unknown"]
    # The operator's listing shows it.
    why = sql.execute("SELECT why FROM idem_unresolved() WHERE scope = %s",
                      (scope,)).fetchone()
    assert why == ("outcome_unknown",)


@pytest.mark.parametrize("finding", ["found", "not_found", "unknown", "raises"])
def test_a_reconcile_read_decides(store: Store, scope: str, sql, finding: str) -> None:
    dead = crashed_claim(store, sql, scope, "c-1")
    asked: list[pi.Reconcile] = []

    def read(call: pi.Reconcile):
        asked.append(call)
        if finding == "raises":
            raise RuntimeError("provider down")
        return {"found": {"charged": "elsewhere"}, "not_found": pi.NOT_FOUND,
                "unknown": pi.UNKNOWN}[finding]

    runs = Effects()
    charge = tool(store, scope, runs, on_unknown_outcome=read)
    if finding == "found":
        assert charge("c-1") == {"charged": "elsewhere"} == charge("c-1")
        assert runs.count == 0
    elif finding == "not_found":
        assert charge("c-1") == {"charged": "c-1"} and runs.count == 1
    else:
        with pytest.raises(pi.OutcomeUnknown) as e:
            charge("c-1")
        assert ("failed: provider down" if finding == "raises" else "could not tell") in (
            e.value.detail or "")
        assert runs.count == 0
    (call,) = asked
    assert (call.key, call.upstream_key, call.attempt, call.input) == (
        "c-1", dead.upstream_key, 2, {"id": "c-1"})


async def test_async_takeover_refuses_alike(astore, store: Store, scope: str, sql) -> None:
    crashed_claim(store, sql, scope, "c-1")

    @idempotent(store=astore, scope=scope, key=lambda i: i["id"], on_unknown_outcome="refuse")
    async def charge(id: str) -> dict:
        raise AssertionError("must not run")

    with pytest.raises(pi.OutcomeUnknown):
        await charge("c-1")
