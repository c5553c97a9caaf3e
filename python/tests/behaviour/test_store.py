"""The store's calls as the SQL API answers them: fences, claim tokens, mismatches,
refusals with their SQLSTATE, detail and hint (changing nothing), batches, lookup, forget,
purge."""

from __future__ import annotations

import uuid

import pytest

import pg_idempotency as pi
from pg_idempotency import BatchCompletion, BatchItem, Store

from .helpers import record_of, until_server_passes


def test_claim_complete_replay_and_the_record(store: Store, scope: str) -> None:
    c = store.begin(scope, "k", {"to": "ann"}, ttl=60)
    assert (c.outcome, c.attempt, c.recovered, c.key) == ("claimed", 1, False, "k")
    assert c.fence is not None and c.upstream_key and c.lease_left and c.lease_left > 0
    assert store.complete(scope, "k", c.fence, {"id": 1}) == "succeeded"
    r = store.begin(scope, "k", {"to": "ann"})
    assert (r.outcome, r.fence, r.response, r.succeeded) == ("replay", None, {"id": 1}, True)
    rec = store.lookup(scope, "k")
    assert rec is not None and (rec.state, rec.response, rec.attempt) == ("succeeded",
                                                                          {"id": 1}, 1)
    assert store.forget(scope, "k") and store.lookup(scope, "k") is None
    assert not store.forget(scope, "k")


def test_a_completion_repeated_under_its_fence_keeps_the_first(store: Store,
                                                                scope: str) -> None:
    c = store.begin(scope, "k")
    assert c.fence is not None
    store.complete(scope, "k", c.fence, {"n": 1})
    # The first reply may have been lost: the same fence again is answered, nothing written.
    assert store.complete(scope, "k", c.fence, {"n": 2}) == "succeeded"
    assert store.begin(scope, "k").response == {"n": 1}


def test_stale_and_unknown_fences_are_refused(store: Store, scope: str, sql) -> None:
    old = store.begin(scope, "k", lease=1)
    assert old.fence is not None and old.lease_until is not None
    until_server_passes(sql, old.lease_until, "the lease")
    new = store.begin(scope, "k")
    assert (new.outcome, new.recovered, new.attempt) == ("claimed", True, 2)
    assert new.upstream_key == old.upstream_key
    for call in (lambda: store.complete(scope, "k", old.fence, {}),
                 lambda: store.extend(scope, "k", old.fence),
                 lambda: store.release(scope, "k", old.fence),
                 lambda: store.complete(scope, "nobody", 12345, {})):
        with pytest.raises(pi.LeaseLost) as e:
            call()
        assert e.value.sqlstate == "IK003" and e.value.detail
    assert store.lookup(scope, "k").fence == new.fence  # type: ignore[union-attr]


def test_a_repeat_with_the_claim_token_gets_the_claim_back(store: Store, scope: str) -> None:
    token = uuid.uuid4()
    a = store.begin(scope, "k", claim_token=token)
    b = store.begin(scope, "k", claim_token=token)
    assert a.outcome == b.outcome == "claimed" and a.fence == b.fence
    assert store.begin(scope, "k", claim_token=uuid.uuid4()).outcome == "in_progress"


def test_a_different_request_is_rejected_unless_ignored(store: Store, scope: str) -> None:
    c = store.begin(scope, "k", {"n": 1})
    assert c.fence is not None
    store.complete(scope, "k", c.fence, {"ok": True})
    with pytest.raises(pi.Mismatch) as e:
        store.begin(scope, "k", {"n": 2})
    assert e.value.sqlstate == "IK001" and e.value.detail and e.value.hint
    r = store.begin(scope, "k", {"n": 2}, on_mismatch=pi.OnMismatch.IGNORE)
    assert r.outcome == "replay" and r.response == {"ok": True}


@pytest.mark.parametrize("case", ["blank key", "blank scope", "ttl 0", "lease above ttl",
                                  "unknown word", "NUL in key", "U+0000 in response"])
def test_every_refusal_has_its_kind_and_changes_nothing(store: Store, scope: str, sql,
                                                        case: str) -> None:
    calls = {
        "blank key": lambda: store.begin(scope, "  "),
        "blank scope": lambda: store.begin("", "k"),
        "ttl 0": lambda: store.begin(scope, "k", ttl=0),
        "lease above ttl": lambda: store.begin(scope, "k", ttl=10, lease=20),
        "unknown word": lambda: store.begin(scope, "k", on_cache_hit="sometimes"),
        "NUL in key": lambda: store.begin(scope, "k\x00"),
        "U+0000 in response": lambda: store.complete(scope, "k", 1, {"a": "\x00"}),
    }
    with pytest.raises(pi.InvalidArgument) as e:
        calls[case]()
    assert e.value.sqlstate == "22023" and e.value.message
    if case not in ("NUL in key", "U+0000 in response"):  # refused before anything is sent
        assert e.value.detail or e.value.hint
    assert store.lookup(scope, "k") is None
    n = sql.execute("SELECT count(*) FROM idem_metrics() WHERE scope = %s", (scope,)).fetchone()
    assert n == (0,)


def test_a_batch_answers_each_item_as_a_single_call(store: Store, scope: str) -> None:
    done = store.begin(scope, "done", {"n": 1})
    assert done.fence is not None
    store.complete(scope, "done", done.fence, {"id": "done"})
    answers = store.begin_batch(scope, [BatchItem("a"), BatchItem("done", {"n": 1}),
                                        BatchItem("done", {"n": 2}), "b"])
    a, replay, mismatch, b = answers
    assert isinstance(a, pi.Begin) and a.outcome == "claimed" and a.key == "a"
    assert isinstance(replay, pi.Begin) and replay.response == {"id": "done"}
    assert isinstance(mismatch, pi.Mismatch) and "Item 3" in (mismatch.detail or "")
    assert isinstance(b, pi.Begin) and b.outcome == "claimed"
    assert a.fence is not None and b.fence is not None
    states = store.complete_batch(scope, [BatchCompletion("a", a.fence, {"id": "a"}),
                                          BatchCompletion("b", 999_999, {"id": "b"})])
    assert states[0] == "succeeded" and isinstance(states[1], pi.LeaseLost)
    assert store.begin(scope, "a").response == {"id": "a"}


def test_a_bad_item_fails_the_batch_and_changes_nothing(store: Store, scope: str) -> None:
    with pytest.raises(pi.InvalidArgument) as e:
        store.begin_batch(scope, ["a", "  "])
    assert "Item 2" in (e.value.detail or "") or "Item 2" in e.value.message
    assert store.lookup(scope, "a") is None
    with pytest.raises(pi.InvalidArgument, match="at most 1000"):
        store.begin_batch(scope, [str(i) for i in range(1001)])


def test_hash_input_keys_come_from_the_server(store: Store, scope: str, sql) -> None:
    c = store.begin(scope, None, {"b": [1, 2.50], "a": "é"})
    expected = sql.execute("SELECT encode(idem_hash(%s::jsonb), 'hex')",
                           ('{"a": "é", "b": [1, 2.5]}',)).fetchone()[0]
    assert c.key == expected


def test_purge_removes_only_expired_records(store: Store, scope: str, sql) -> None:
    gone = store.begin(scope, "gone", ttl=1)
    assert gone.fence is not None
    store.complete(scope, "gone", gone.fence, {})
    live = store.begin(scope, "live", ttl=600)
    rec = record_of(sql, scope, "gone")
    assert rec is not None and live.outcome == "claimed"
    until_server_passes(sql, rec["expires_at"], "the ttl")
    assert store.purge_expired() >= 1
    assert record_of(sql, scope, "gone") is None and record_of(sql, scope, "live") is not None


def test_check_installed_names_what_to_do(store: Store, dsn: str) -> None:
    store.check_installed()
    elsewhere = Store(dsn, schema="no_such_schema")
    try:
        with pytest.raises(pi.NotInstalled) as e:
            elsewhere.check_installed()
        assert "CREATE EXTENSION" in (e.value.hint or "")
    finally:
        elsewhere.close()


async def test_the_async_store_answers_alike(astore, scope: str) -> None:
    c = await astore.begin(scope, "k", {"n": 1})
    assert c.outcome == "claimed" and c.fence is not None
    assert await astore.complete(scope, "k", c.fence, [1, "two"]) == "succeeded"
    assert (await astore.begin(scope, "k", {"n": 1})).response == [1, "two"]
    with pytest.raises(pi.Mismatch):
        await astore.begin(scope, "k", {"n": 2})
    (a,) = await astore.begin_batch(scope, ["x"])
    assert isinstance(a, pi.Begin) and a.fence is not None
    assert await astore.complete_batch(scope, [BatchCompletion("x", a.fence, 1)]) == [
        "succeeded"]
