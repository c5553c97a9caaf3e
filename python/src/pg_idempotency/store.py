"""The store: the SQL API's calls over any supported connection (drivers/). `Store` for
blocking code, `AsyncStore` for asyncio; the same methods, one statement each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _sql
from .answers import BatchBegin, BatchCompletion, BatchItem, Begin, Record
from .drivers import AsyncExecutor, SyncExecutor, async_executor, sync_executor
from .errors import IdempotencyError, InvalidArgument, LeaseLost, Mismatch, RepeatRefused
from .settings import Seconds, as_seconds

# A batch answers these refusals as items' outcomes (docs/errors.md).
_ITEM_REFUSALS = {
    "mismatch": (Mismatch, "idempotency key reused with a different request"),
    "refused": (RepeatRefused, "the call was already made and on_cache_hit is fail_fast"),
    "lease_lost": (LeaseLost, "the fence no longer holds the record"),
}
MAX_BATCH_ITEMS = 1000


def _word(value: Any) -> str | None:
    return None if value is None else getattr(value, "value", value)


class _Calls:
    """What Store and AsyncStore share: statements and their parameters."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.sql = _sql.Statements.in_schema(schema)

    def begin_params(self, scope: str, key: str | None, request: Any, ttl: Any, lease: Any,
                     on_cache_hit: Any, on_mismatch: Any, wait: Any, claim_token: Any,
                     unresolved_ttl: Any, request_json: str | None = None) -> Sequence[Any]:
        _sql.check_text(scope, "scope")
        _sql.check_text(key, "key")
        if request_json is None and request is not None:
            request_json = _sql.dumps(request)
        return (scope, key, request_json, as_seconds(ttl, "ttl"), as_seconds(lease, "lease"),
                _word(on_cache_hit), _word(on_mismatch), as_seconds(wait, "wait"),
                None if claim_token is None else str(claim_token),
                as_seconds(unresolved_ttl, "unresolved_ttl"))

    @staticmethod
    def sent(ttl: Any, lease: Any, on_cache_hit: Any, on_mismatch: Any, wait: Any,
             unresolved_ttl: Any) -> tuple[Any, ...]:
        """The settings' part of idem_begin's parameters, for claim_params."""
        return (as_seconds(ttl, "ttl"), as_seconds(lease, "lease"), _word(on_cache_hit),
                _word(on_mismatch), as_seconds(wait, "wait"),
                as_seconds(unresolved_ttl, "unresolved_ttl"))

    @staticmethod
    def claim_params(scope: str, key: str | None, request_json: str | None,
                     sent: Sequence[Any]) -> Sequence[Any]:
        _sql.check_text(scope, "scope")
        _sql.check_text(key, "key")
        ttl, lease, on_cache_hit, on_mismatch, wait, unresolved_ttl = sent
        return (scope, key, request_json, ttl, lease, on_cache_hit, on_mismatch, wait, None,
                unresolved_ttl)

    def complete_params(self, scope: str, key: str, fence: int, response: Any,
                        succeeded: bool, cache_failure: bool | None) -> Sequence[Any]:
        _sql.check_text(scope, "scope")
        _sql.check_text(key, "key")
        return (scope, key, fence, _sql.dumps(response), succeeded, cache_failure)

    def batch_params(self, scope: str, items: Sequence[BatchItem | str], ttl: Any,
                     lease: Any, on_cache_hit: Any, on_mismatch: Any) -> Sequence[Any]:
        _check_batch(items)
        norm = [BatchItem(key=i) if isinstance(i, str) else i for i in items]
        for i in norm:
            _sql.check_text(i.key, "key")
        keys = [i.key for i in norm]
        requests = [None if i.request is None else _sql.dumps(i.request) for i in norm]
        tokens = [None if i.claim_token is None else str(i.claim_token) for i in norm]
        return (scope, keys, requests if any(r is not None for r in requests) else None,
                as_seconds(ttl, "ttl"), as_seconds(lease, "lease"), _word(on_cache_hit),
                _word(on_mismatch), tokens if any(t is not None for t in tokens) else None)

    def complete_batch_params(self, scope: str,
                              items: Sequence[BatchCompletion]) -> Sequence[Any]:
        _check_batch(items)
        return (scope, [i.key for i in items], [i.fence for i in items],
                [_sql.dumps(i.response) for i in items], [i.succeeded for i in items],
                [i.cache_failure for i in items])

    @staticmethod
    def batch_answers(rows: Sequence[tuple[Any, ...]], scope: str) -> list[BatchBegin]:
        out: list[BatchBegin] = []
        for row in rows:
            outcome = row[1]
            if outcome in _ITEM_REFUSALS:
                cls, msg = _ITEM_REFUSALS[outcome]
                out.append(cls(msg, detail=f"Item {row[0]} of the batch of scope {scope!r}, "
                                            f"key {row[11]!r}."))
            else:
                out.append(Begin.from_row(tuple(row[1:])))
        return out

    @staticmethod
    def complete_batch_answers(rows: Sequence[tuple[Any, ...]],
                               items: Sequence[BatchCompletion]) -> list[str | LeaseLost]:
        out: list[str | LeaseLost] = []
        for item, outcome, state in rows:
            if outcome == "lease_lost":
                key = items[item - 1].key
                out.append(LeaseLost("the fence no longer holds the record",
                                     detail=f"Item {item} of the batch, key {key!r}."))
            else:
                out.append(state)
        return out

    @staticmethod
    def record(row: tuple[Any, ...] | None) -> Record | None:
        if row is None:
            return None
        (state, fence, attempt, upstream_key, response, created_at, completed_at,
         lease_until, expires_at) = row
        return Record(state, fence, attempt, upstream_key, _sql.loads(response), created_at,
                      completed_at, lease_until, expires_at)


def _check_batch(items: Sequence[Any]) -> None:
    if len(items) > MAX_BATCH_ITEMS:
        raise InvalidArgument(
            f"a batch holds at most {MAX_BATCH_ITEMS} items",
            detail=f"The batch has {len(items)} items.",
            hint="split it into batches of 1000 or fewer",
        )


class Store:
    """The SQL API over a blocking connection: a psycopg `ConnectionPool` or `Connection`, a
    conninfo string (a pool of autocommit connections is opened for it), or a SQLAlchemy
    `Engine`, `Connection` or `Session`. A connection inside a transaction runs the calls in
    that transaction (exactly-once with the caller's writes); an idle one commits each.

    `schema` is where the API's functions are (`public` after CREATE EXTENSION); `prepare`
    False behind a pooler in transaction mode (PgBouncer); `pool_options` go to the
    psycopg_pool pool opened for a conninfo (min_size 1, max_size 20 unless given)."""

    def __init__(self, connection: Any, *, schema: str = "public", prepare: bool = True,
                 pool_options: dict[str, Any] | None = None) -> None:
        self._calls = _Calls(schema)
        self._x: SyncExecutor = sync_executor(connection, prepare=prepare,
                                              pool_options=pool_options)
        self.identity: object = self._x.identity

    @property
    def schema(self) -> str:
        return self._calls.schema

    def _one(self, stmt: _sql.Statement, p: Sequence[Any]) -> tuple[Any, ...] | None:
        rows = self._x.fetch(stmt, p)
        return rows[0] if rows else None

    def begin(self, scope: str, key: str | None, request: Any = None, *,
              ttl: Seconds | None = None, lease: Seconds | None = None,
              on_cache_hit: Any = None, on_mismatch: Any = None,
              wait: Seconds | None = None, claim_token: Any = None,
              unresolved_ttl: Seconds | None = None) -> Begin:
        """Claim the call, or learn its result (replay) or that it runs (in_progress)."""
        return self._begin_json(scope, key, None if request is None else _sql.dumps(request),
                                ttl=ttl, lease=lease, on_cache_hit=on_cache_hit,
                                on_mismatch=on_mismatch, wait=wait, claim_token=claim_token,
                                unresolved_ttl=unresolved_ttl)

    def _begin_json(self, scope: str, key: str | None, request_json: str | None, *,
                    ttl: Any = None, lease: Any = None, on_cache_hit: Any = None,
                    on_mismatch: Any = None, wait: Any = None, claim_token: Any = None,
                    unresolved_ttl: Any = None) -> Begin:
        p = self._calls.begin_params(scope, key, None, ttl, lease, on_cache_hit,
                                     on_mismatch, wait, claim_token, unresolved_ttl,
                                     request_json=request_json)
        row = self._one(self._calls.sql.begin, p)
        assert row is not None  # idem_begin answers one row or raises
        return Begin.from_row(row)

    def _claim(self, scope: str, key: str | None, request_json: str | None,
               sent: Sequence[Any]) -> tuple[Any, ...]:
        """The decorator's begin: `sent` is its settings' parameters, made once (Plan.sent);
        the answer is Begin's row (its lease_until and expires_at None), for _plan.replayed
        to read a replay from without building a Begin."""
        row = self._one(self._calls.sql.begin_call, self._calls.claim_params(
            scope, key, request_json, sent))
        assert row is not None
        return row

    def _complete_json(self, scope: str, key: str, fence: int, response_json: str,
                       succeeded: bool = True, cache_failure: bool | None = None) -> str:
        row = self._one(self._calls.sql.complete_call,
                        (scope, key, fence, response_json, succeeded, cache_failure))
        assert row is not None
        return str(row[0])

    def complete(self, scope: str, key: str, fence: int, response: Any, *,
                 succeeded: bool = True, cache_failure: bool | None = None) -> str:
        """Record the result under the claim's fence; the record's state is answered."""
        p = self._calls.complete_params(scope, key, fence, response, succeeded, cache_failure)
        row = self._one(self._calls.sql.complete, p)
        assert row is not None
        return str(row[0])

    def release(self, scope: str, key: str, fence: int) -> None:
        """Give the claim up: the next call runs afresh."""
        self._x.fetch(self._calls.sql.release, (scope, key, fence))

    def extend(self, scope: str, key: str, fence: int, lease: Seconds | None = None) -> Any:
        """Renew the lease (a heartbeat); answers the new lease_until."""
        row = self._one(self._calls.sql.extend, (scope, key, fence, as_seconds(lease, "lease")))
        return None if row is None else row[0]

    def lookup(self, scope: str, key: str) -> Record | None:
        return self._calls.record(self._one(self._calls.sql.lookup, (scope, key)))

    def forget(self, scope: str, key: str) -> bool:
        row = self._one(self._calls.sql.forget, (scope, key))
        return bool(row and row[0])

    def purge_expired(self) -> int:
        row = self._one(self._calls.sql.purge, ())
        return int(row[0]) if row else 0

    def begin_batch(self, scope: str, items: Sequence[BatchItem | str], *,
                    ttl: Seconds | None = None, lease: Seconds | None = None,
                    on_cache_hit: Any = None, on_mismatch: Any = None) -> list[BatchBegin]:
        """Claim many calls of one scope in one statement; per item, in the order given, its
        Begin or its refusal (Mismatch, RepeatRefused) as a value."""
        p = self._calls.batch_params(scope, items, ttl, lease, on_cache_hit, on_mismatch)
        return self._calls.batch_answers(self._x.fetch(self._calls.sql.begin_batch, p), scope)

    def complete_batch(self, scope: str,
                       items: Sequence[BatchCompletion]) -> list[str | LeaseLost]:
        """Complete many claims in one statement; per item its state or LeaseLost."""
        p = self._calls.complete_batch_params(scope, items)
        rows = self._x.fetch(self._calls.sql.complete_batch, p)
        return self._calls.complete_batch_answers(rows, items)

    def check_installed(self) -> None:
        """Raise NotInstalled unless the API is installed in `schema` here."""
        _check_installed(self._one(self._calls.sql.installed, (_signature(self.schema),)),
                         self.schema)

    def close(self) -> None:
        """Close the pool this store opened (a conninfo given); others are the caller's."""
        self._x.close()


class AsyncStore:
    """The SQL API over an asyncio connection: a psycopg `AsyncConnectionPool` or
    `AsyncConnection`, a conninfo string (an async pool of autocommit connections), an
    asyncpg `Pool` or `Connection`, or a SQLAlchemy `AsyncEngine`, `AsyncConnection` or
    `AsyncSession`. The same calls as `Store`, awaited."""

    def __init__(self, connection: Any, *, schema: str = "public", prepare: bool = True,
                 pool_options: dict[str, Any] | None = None) -> None:
        self._calls = _Calls(schema)
        self._x: AsyncExecutor = async_executor(connection, prepare=prepare,
                                                pool_options=pool_options)
        self.identity: object = self._x.identity

    @property
    def schema(self) -> str:
        return self._calls.schema

    async def _one(self, stmt: _sql.Statement, p: Sequence[Any]) -> tuple[Any, ...] | None:
        rows = await self._x.fetch(stmt, p)
        return rows[0] if rows else None

    async def begin(self, scope: str, key: str | None, request: Any = None, *,
                    ttl: Seconds | None = None, lease: Seconds | None = None,
                    on_cache_hit: Any = None, on_mismatch: Any = None,
                    wait: Seconds | None = None, claim_token: Any = None,
                    unresolved_ttl: Seconds | None = None) -> Begin:
        return await self._begin_json(
            scope, key, None if request is None else _sql.dumps(request), ttl=ttl, lease=lease,
            on_cache_hit=on_cache_hit, on_mismatch=on_mismatch, wait=wait,
            claim_token=claim_token, unresolved_ttl=unresolved_ttl)

    async def _begin_json(self, scope: str, key: str | None, request_json: str | None, *,
                          ttl: Any = None, lease: Any = None, on_cache_hit: Any = None,
                          on_mismatch: Any = None, wait: Any = None, claim_token: Any = None,
                          unresolved_ttl: Any = None) -> Begin:
        p = self._calls.begin_params(scope, key, None, ttl, lease, on_cache_hit,
                                     on_mismatch, wait, claim_token, unresolved_ttl,
                                     request_json=request_json)
        row = await self._one(self._calls.sql.begin, p)
        assert row is not None
        return Begin.from_row(row)

    async def _claim(self, scope: str, key: str | None, request_json: str | None,
                     sent: Sequence[Any]) -> tuple[Any, ...]:
        row = await self._one(self._calls.sql.begin_call, self._calls.claim_params(
            scope, key, request_json, sent))
        assert row is not None
        return row

    async def _complete_json(self, scope: str, key: str, fence: int, response_json: str,
                             succeeded: bool = True, cache_failure: bool | None = None) -> str:
        row = await self._one(self._calls.sql.complete_call,
                              (scope, key, fence, response_json, succeeded, cache_failure))
        assert row is not None
        return str(row[0])

    async def complete(self, scope: str, key: str, fence: int, response: Any, *,
                       succeeded: bool = True, cache_failure: bool | None = None) -> str:
        p = self._calls.complete_params(scope, key, fence, response, succeeded, cache_failure)
        row = await self._one(self._calls.sql.complete, p)
        assert row is not None
        return str(row[0])

    async def release(self, scope: str, key: str, fence: int) -> None:
        await self._x.fetch(self._calls.sql.release, (scope, key, fence))

    async def extend(self, scope: str, key: str, fence: int,
                     lease: Seconds | None = None) -> Any:
        row = await self._one(self._calls.sql.extend,
                              (scope, key, fence, as_seconds(lease, "lease")))
        return None if row is None else row[0]

    async def lookup(self, scope: str, key: str) -> Record | None:
        return self._calls.record(await self._one(self._calls.sql.lookup, (scope, key)))

    async def forget(self, scope: str, key: str) -> bool:
        row = await self._one(self._calls.sql.forget, (scope, key))
        return bool(row and row[0])

    async def purge_expired(self) -> int:
        row = await self._one(self._calls.sql.purge, ())
        return int(row[0]) if row else 0

    async def begin_batch(self, scope: str, items: Sequence[BatchItem | str], *,
                          ttl: Seconds | None = None, lease: Seconds | None = None,
                          on_cache_hit: Any = None,
                          on_mismatch: Any = None) -> list[BatchBegin]:
        p = self._calls.batch_params(scope, items, ttl, lease, on_cache_hit, on_mismatch)
        rows = await self._x.fetch(self._calls.sql.begin_batch, p)
        return self._calls.batch_answers(rows, scope)

    async def complete_batch(self, scope: str,
                             items: Sequence[BatchCompletion]) -> list[str | LeaseLost]:
        p = self._calls.complete_batch_params(scope, items)
        rows = await self._x.fetch(self._calls.sql.complete_batch, p)
        return self._calls.complete_batch_answers(rows, items)

    async def check_installed(self) -> None:
        _check_installed(await self._one(self._calls.sql.installed, (_signature(self.schema),)),
                         self.schema)

    async def close(self) -> None:
        await self._x.close()


def _signature(schema: str) -> str:
    return (f"{_sql.quoted_schema(schema)}.idem_begin(text, text, jsonb, interval, interval, "
            "text, text, interval, uuid, interval)")


def _check_installed(row: tuple[Any, ...] | None, schema: str) -> None:
    from .errors import NotInstalled

    if not (row and row[0]):
        raise NotInstalled(
            f"pg_idempotency's SQL API is not installed in schema {schema!r} of this database",
            hint="CREATE EXTENSION pg_idempotency (or install the portable SQL: "
            "docs/installation.md), or name the schema the API is in: schema=...",
        )


__all__ = ["AsyncStore", "IdempotencyError", "Store"]
