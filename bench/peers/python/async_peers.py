"""The asyncio rows of the Python side of the peers benchmark, each over asyncpg:

- pkg-asyncpg: pg-idempotency's `@idempotent` on an `async def`, its `AsyncStore` over an
  asyncpg pool (`asyncpg.create_pool`, its defaults), as docs/python.md shows it;
- sql-asyncpg: pg_idempotency's SQL API called by hand with asyncpg, one connection per
  caller (as the psycopg `sql` row does it), the floor the package is measured against;
- idemkit: idemkit's `@idempotent` on an `async def` over its `PostgresBackend`
  (`PostgresBackend.from_url`, its defaults: an asyncpg pool, a table it creates with its
  own `init_pg`), on the same server.

The cases are driver.py's (new, replay, hot, failure), the same timing, on one event loop:
a hot key's duplicates are tasks released together by one asyncio.Event.
"""

import asyncio
import json
import itertools
import time

from common import REPLAY_KEYS, Failed, fresh

SCOPE = "bench_py_async"
# A replay reads the stored result and returns it, as a caller must (driver.py's BEGIN).
BEGIN = "SELECT outcome, fence, succeeded, response::text FROM idem_begin($1, $2)"
COMPLETE = "SELECT state FROM idem_complete($1, $2, $3, $4::jsonb, $5, $6)"


def dsn(spec):
    return f"postgresql://{spec['user']}@{spec['host']}:{spec['port']}/{spec['dbname']}"


# Which call ran the body: a replay returns the stored result, made by another call.
CALLERS = itertools.count()


class Row:
    """One row: `call(key)` answers an outcome word; `prepare(n)` readies n callers."""

    async def prepare(self, callers):
        pass

    async def call(self, key, caller=0):
        raise NotImplementedError

    async def close(self):
        pass


class Ours(Row):
    def __init__(self, spec, body):
        self.spec, self.body = spec, body

    async def open(self):
        import asyncpg

        from pg_idempotency import AsyncStore, InProgress, ToolFailed, idempotent

        self.pool = await asyncpg.create_pool(dsn(self.spec))
        self.store = AsyncStore(self.pool)
        self.refused = {InProgress: "in_progress", ToolFailed: "failed"}
        body = self.body

        # The key names the call (EXPLICIT, as the SQL rows pass it); `caller` tells who ran
        # the body and is left out of the input. A failure is remembered, as the SQL rows
        # ask with cache_failure.
        @idempotent(store=self.store, scope=SCOPE, key_fields=["key"], exclude=["caller"],
                    cache_failures=True)
        async def work(key: str, caller: int) -> dict:
            return {**body.run(key), "by": caller}

        self.work = work
        return self

    async def call(self, key, caller=0):
        me = next(CALLERS)
        try:
            result = await self.work(key=key, caller=me)
        except Failed:
            return "failed"
        except tuple(self.refused) as e:
            return self.refused[type(e)]
        return "ok" if result["by"] == me else "replay"

    async def close(self):
        await self.store.close()
        await self.pool.close()


class Sql(Row):
    """The SQL API by hand: begin, the body, complete; one connection per caller."""

    def __init__(self, spec, body):
        self.spec, self.body, self.conns = spec, body, []

    async def open(self):
        await self.prepare(1)
        return self

    async def prepare(self, callers):
        import asyncpg

        while len(self.conns) < callers:
            self.conns.append(await asyncpg.connect(dsn(self.spec)))

    async def call(self, key, caller=0):

        c = self.conns[caller]
        outcome, fence, succeeded, response = await c.fetchrow(BEGIN, SCOPE, key)
        if outcome == "in_progress":
            return "in_progress"
        if outcome == "replay":
            json.loads(response)  # the result a caller gets back
            return "replay" if succeeded else "failed"
        try:
            result = self.body.run(key)
        except Failed as e:
            await c.fetchrow(COMPLETE, SCOPE, key, fence, json.dumps({"error": str(e)}), False,
                             True)
            return "failed"
        await c.fetchrow(COMPLETE, SCOPE, key, fence, json.dumps(result), True, None)
        return "ok"

    async def close(self):
        for c in self.conns:
            await c.close()


class Idemkit(Row):
    def __init__(self, spec, body):
        self.spec, self.body = spec, body

    async def open(self):
        from idemkit import IdempotencyConflict, MethodConfig, PostgresBackend, idempotent
        from idemkit.backends.postgres import init_pg

        # Its documented setup: `idemkit init-pg <url>` makes the table (IF NOT EXISTS).
        await init_pg(dsn(self.spec))
        self.backend = PostgresBackend.from_url(dsn(self.spec))
        self.conflict = IdempotencyConflict
        body = self.body

        # key_fields, its documented default way to name a call; a failure is remembered
        # (cache_exceptions), as ours is asked to.
        @idempotent(backend=self.backend,
                    config=MethodConfig(key_fields=["key"], cache_exceptions=(Failed,)))
        async def work(key: str, caller: int) -> dict:
            return {**body.run(key), "by": caller}

        self.work = work
        return self

    async def call(self, key, caller=0):
        me = next(CALLERS)
        try:
            result = await self.work(key=key, caller=me)
        except Failed:
            return "failed"
        except self.conflict:
            return "in_progress"
        except Exception as e:  # a replayed failure comes back rebuilt, maybe as another type
            if "Failed" in type(e).__name__ or "Failed" in str(e):
                return "failed"
            raise
        return "ok" if result["by"] == me else "replay"

    async def close(self):
        await self.backend.aclose()


ROWS = {"pkg-asyncpg": Ours, "sql-asyncpg": Sql, "idemkit": Idemkit}


async def timed_loop(row, keys, warmup_s, duration_s, calls, body):
    """driver.py's timed_loop, awaited."""
    latencies = []
    if calls is not None:
        await row.call(keys())
        before = body.executions
        start = time.perf_counter()
        for _ in range(calls):
            t = time.perf_counter_ns()
            await row.call(keys())
            latencies.append(time.perf_counter_ns() - t)
        return latencies, time.perf_counter() - start, body.executions - before
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        await row.call(keys())
    before = body.executions
    start = time.perf_counter()
    end = start + duration_s
    while time.perf_counter() < end:
        t = time.perf_counter_ns()
        await row.call(keys())
        latencies.append(time.perf_counter_ns() - t)
    return latencies, time.perf_counter() - start, body.executions - before


async def hot(row, concurrency, rounds):
    """`concurrency` tasks call one new key at the same moment, `rounds` times."""
    await row.prepare(concurrency)
    latencies, outcomes = [], {}
    started = time.perf_counter()
    for _ in range(rounds):
        key, go = fresh("hot"), asyncio.Event()

        async def one(caller, key, go):
            await go.wait()
            t = time.perf_counter_ns()
            try:
                o = await row.call(key, caller)
            except Exception as e:  # a peer's own refusal under contention is an outcome
                o = type(e).__name__
            latencies.append(time.perf_counter_ns() - t)
            outcomes[o] = outcomes.get(o, 0) + 1

        tasks = [asyncio.create_task(one(i, key, go)) for i in range(concurrency)]
        await asyncio.sleep(0)  # every task is waiting on `go` now
        go.set()
        await asyncio.gather(*tasks)
    return latencies, time.perf_counter() - started, outcomes


async def failure(row, rounds, retries):
    latencies, outcomes = [], {}
    started = time.perf_counter()
    for _ in range(rounds):
        key = fresh("fail")
        for i in range(retries + 1):
            t = time.perf_counter_ns()
            o = await row.call(key)
            if i > 0:
                latencies.append(time.perf_counter_ns() - t)
                outcomes[o] = outcomes.get(o, 0) + 1
    return latencies, time.perf_counter() - started, outcomes


async def run_case(case, row, body):
    outcomes = {}
    kind = case["case"]
    calls = case.get("calls")
    warmup, duration = case.get("warmup_s", 0.0), case.get("duration_s", 0.0)
    before = body.executions
    executions = None
    if kind == "new":
        latencies, seconds, executions = await timed_loop(
            row, lambda: fresh("new"), warmup, duration, calls, body)
        keys = len(latencies)
    elif kind == "replay":
        stored = [fresh("replay") for _ in range(REPLAY_KEYS)]
        for k in stored:
            await row.call(k)
        n = itertools.count()
        latencies, seconds, executions = await timed_loop(
            row, lambda: stored[next(n) % REPLAY_KEYS], warmup, duration, calls, body)
        keys = 0
    elif kind == "hot":
        latencies, seconds, outcomes = await hot(row, case["concurrency"], case["rounds"])
        keys = case["rounds"]
    elif kind == "failure":
        latencies, seconds, outcomes = await failure(row, case["rounds"], case["retries"])
        keys = case["rounds"]
    else:
        raise ValueError(f"unknown case {kind}")
    return {
        "case": kind,
        "latencies_ns": latencies,
        "seconds": seconds,
        "executions": body.executions - before if executions is None else executions,
        "keys": keys,
        "outcomes": outcomes,
    }


async def run(spec, body):
    row = await ROWS[spec["peer"]](spec, body).open()
    try:
        return [await run_case(case, row, body) for case in spec["cases"]]
    finally:
        await row.close()
