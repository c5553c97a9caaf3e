"""Reads (GET, HEAD, OPTIONS, TRACE): no Idempotency-Key ever; run every time unless the
call gives settings of its own (then a repeat is replayed); the Actions' settings never
deduplicate them."""

from __future__ import annotations

from http_upstream import Upstream

from pg_idempotency.http import call_info


async def test_a_get_without_settings_runs_every_time_with_no_key(web, upstream: Upstream,
                                                                  path: str) -> None:
    api = web(ttl=86_400, cache_failures=True)  # the Actions' settings: not for reads
    answers = [await api.get(path, params={"q": "x"}) for _ in range(3)]
    seen = upstream.seen(path)
    assert [s.method for s in seen] == ["GET"] * 3
    assert [s.key for s in seen] == [None] * 3
    assert [a.json()["n"] for a in answers] == [1, 2, 3]
    assert all(call_info(a) is None for a in answers)
    for method in ("HEAD", "OPTIONS", "TRACE"):
        await api.call(method, path)
        await api.call(method, path)
    assert [s.key for s in upstream.seen(path)] == [None] * 9


async def test_a_get_with_settings_of_its_own_is_replayed_without_a_key(
        web, upstream: Upstream, path: str) -> None:
    api = web()
    answers = [await api.get(path, params={"q": "x"}, ttl=60) for _ in range(3)]
    seen = upstream.seen(path)
    assert len(seen) == 1 and seen[0].key is None and seen[0].query == "q=x"
    assert [a.json()["n"] for a in answers] == [1, 1, 1]
    infos = [call_info(a) for a in answers]
    assert [i.replayed for i in infos if i] == [False, True, True]
    assert infos[0] is not None and infos[0].upstream_key is None
