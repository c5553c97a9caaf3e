"""The Python side of the peers benchmark: one peer, some cases, one JSON document on stdout.

    driver.py '<spec as JSON>'

The spec names the peer and where its store listens (the benchmark passes the delay
forwarder's port, never the server's own), and the cases to run in order:

    {"peer": "powertools" | "sql" | "naive" | "pkg-psycopg"           (threads, below)
             | "pkg-asyncpg" | "sql-asyncpg" | "idemkit",          (asyncio: async_peers.py)
     "host": "127.0.0.1", "port": 5432,
     "dbname": "...", "user": "...",                      (PostgreSQL peers)
     "cases": [{"case": "new" | "replay" | "hot" | "failure", ...}, ...]}

Each case answers {"case", "latencies_ns": [...], "seconds", "executions", "keys",
"outcomes": {...}}: how many times the function body actually ran is counted here, in the
body, never inferred. `{"peer": "versions"}` prints the versions of what is installed.

The peers:
- powertools: AWS Powertools for Lambda's `@idempotent_function` over its Redis
  persistence layer (`RedisCachePersistenceLayer`), the client given to it on the port we
  name;
- sql: pg_idempotency's SQL API called directly with psycopg 3 (`idem_begin`, the body,
  `idem_complete`), as a Python service would use it;
- pkg-psycopg: the pg-idempotency package's `@idempotent` on a `def`, its `Store` over a
  psycopg `ConnectionPool` of autocommit connections, the key named (EXPLICIT) as the `sql`
  row passes it; beside `sql`, the same driver by hand;
- naive: the hand-written pattern (SELECT, then INSERT, then UPDATE) on a table of the
  records' shape (`bench_floor`, made by the benchmark), as bench/src/workloads/calls.rs
  does it in Rust.

The asyncio rows over asyncpg (the package's `AsyncStore`, the SQL API by hand, idemkit)
are in async_peers.py.
"""

import json
import sys
import threading
import time
import warnings

# Powertools warns on every call that it runs outside a Lambda (no remaining time to read).
warnings.simplefilter("ignore")

from common import REPLAY_KEYS, Body, Failed, fresh


def powertools_peer(spec, body):
    import redis
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
    )

    with warnings.catch_warnings():
        # RedisCachePersistenceLayer is deprecated in favour of CachePersistenceLayer, its
        # alias: the same class.
        warnings.simplefilter("ignore")
        from aws_lambda_powertools.utilities.idempotency.persistence.redis import (
            RedisCachePersistenceLayer,
        )

        client = redis.Redis(host=spec["host"], port=spec["port"], decode_responses=True)
        layer = RedisCachePersistenceLayer(client=client)
    config = IdempotencyConfig(expires_after_seconds=3600)

    @idempotent_function(data_keyword_argument="order", persistence_store=layer, config=config)
    def work(order):
        return body.run(order["key"])

    def call(key):
        try:
            work(order={"key": key})
            return "ok"
        except IdempotencyAlreadyInProgressError:
            return "in_progress"
        except Failed:
            return "failed"

    return call


def connect_pg(spec):
    import psycopg

    # prepare_threshold=0: every statement is prepared at its first use, as the Rust rows
    # and node-postgres (named statements) do: one round trip per statement.
    return psycopg.connect(
        host=spec["host"],
        port=spec["port"],
        dbname=spec["dbname"],
        user=spec["user"],
        autocommit=True,
        prepare_threshold=0,
    )


# A replay reads the stored result and returns it, as a caller must (the package's rows,
# Powertools and idemkit return it too).
BEGIN = "SELECT outcome, fence, succeeded, response::text FROM idem_begin(%s, %s)"
COMPLETE = "SELECT state FROM idem_complete(%s, %s, %s, %s::jsonb, %s, %s)"


def sql_peer(spec, body):
    local = threading.local()

    def conn():
        if not hasattr(local, "c"):
            local.c = connect_pg(spec)
        return local.c

    def call(key):
        c = conn()
        outcome, fence, succeeded, response = c.execute(BEGIN, ("bench_py", key)).fetchone()
        if outcome == "in_progress":
            return "in_progress"
        if outcome == "replay":
            json.loads(response)  # the result a caller gets back
            return "replay" if succeeded else "failed"
        try:
            result = body.run(key)
        except Failed as e:
            error = json.dumps({"error": str(e)})
            c.execute(COMPLETE, ("bench_py", key, fence, error, False, True))
            return "failed"
        c.execute(COMPLETE, ("bench_py", key, fence, json.dumps(result), True, None))
        return "ok"

    return call, conn


def pkg_psycopg_peer(spec, body):
    import itertools

    from psycopg_pool import ConnectionPool

    from pg_idempotency import InProgress, Store, ToolFailed, idempotent

    # A pool as a service would open one: autocommit connections, grown on demand up to a
    # hot key's 64 duplicates (the `sql` row has one connection per thread).
    pool = ConnectionPool(
        f"host={spec['host']} port={spec['port']} dbname={spec['dbname']} user={spec['user']}",
        kwargs={"autocommit": True}, min_size=1, max_size=64, open=True,
    )
    pool.wait()
    store = Store(pool)
    callers = itertools.count()

    # The key names the call (EXPLICIT, as the `sql` row passes it); `caller` tells who ran
    # the body and is left out of the input; a failure is remembered, as `sql` asks.
    @idempotent(store=store, scope="bench_py_pkg", key_fields=["key"], exclude=["caller"],
                cache_failures=True)
    def work(key: str, caller: int) -> dict:
        return {**body.run(key), "by": caller}

    def call(key):
        me = next(callers)
        try:
            result = work(key=key, caller=me)
        except Failed:
            return "failed"
        except InProgress:
            return "in_progress"
        except ToolFailed:
            return "failed"
        return "ok" if result["by"] == me else "replay"

    return call


# The same statements as the Rust naive client (bench/src/workloads/calls.rs).
NAIVE_SELECT = "SELECT state, response FROM bench_floor WHERE scope = %s AND key = %s"
NAIVE_INSERT = (
    "INSERT INTO bench_floor (scope, key, state, fence, attempt, upstream_key, created_at, "
    "lease_until, expires_at, ttl, owner) VALUES (%s, %s, 'in_progress', 0, 1, gen_random_uuid(), "
    "now(), now() + interval '1 minute', now() + interval '1 hour', interval '1 hour', "
    "current_user::regrole) ON CONFLICT DO NOTHING"
)
NAIVE_UPDATE = (
    "UPDATE bench_floor SET state = 'succeeded', response = %s::jsonb, completed_at = now(), "
    "lease_until = NULL, expires_at = now() + interval '1 hour' WHERE scope = %s AND key = %s"
)


def naive_peer(spec, body):
    local = threading.local()

    def conn():
        if not hasattr(local, "c"):
            local.c = connect_pg(spec)
        return local.c

    def call(key):
        c = conn()
        if c.execute(NAIVE_SELECT, ("naive_py", key)).fetchone() is not None:
            return "replay"
        c.execute(NAIVE_INSERT, ("naive_py", key))
        result = body.run(key)
        c.execute(NAIVE_UPDATE, (json.dumps(result), "naive_py", key))
        return "ok"

    return call, conn


def timed_loop(call, keys, warmup_s, duration_s, calls, body):
    """Calls one after another: for `calls` calls when given (round-trip counting), else for
    `duration_s` after `warmup_s`. `keys()` gives the next call's key. Returns the measured
    calls' latencies, their seconds and the body's executions during them."""
    latencies = []
    if calls is not None:
        # One call first, so that a client connecting lazily (redis-py) has connected
        # before the count: the benchmark subtracts a run of 0 calls from a run of N.
        call(keys())
        before = body.executions
        start = time.perf_counter()
        for _ in range(calls):
            t = time.perf_counter_ns()
            call(keys())
            latencies.append(time.perf_counter_ns() - t)
        return latencies, time.perf_counter() - start, body.executions - before
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        call(keys())
    before = body.executions
    start = time.perf_counter()
    end = start + duration_s
    while time.perf_counter() < end:
        t = time.perf_counter_ns()
        call(keys())
        latencies.append(time.perf_counter_ns() - t)
    return latencies, time.perf_counter() - start, body.executions - before


def run_case(case, call, body, prepare):
    outcomes = {}
    kind = case["case"]
    calls = case.get("calls")
    warmup, duration = case.get("warmup_s", 0.0), case.get("duration_s", 0.0)
    before = body.executions
    executions = None
    if kind == "new":
        latencies, seconds, executions = timed_loop(
            call, lambda: fresh("new"), warmup, duration, calls, body
        )
        keys = len(latencies)
    elif kind == "replay":
        stored = [fresh("replay") for _ in range(REPLAY_KEYS)]
        for k in stored:
            call(k)
        n = iter(range(1 << 62))
        latencies, seconds, executions = timed_loop(
            call, lambda: stored[next(n) % REPLAY_KEYS], warmup, duration, calls, body
        )
        keys = 0
    elif kind == "hot":
        latencies, seconds, outcomes = hot(call, case["concurrency"], case["rounds"], prepare)
        keys = case["rounds"]
    elif kind == "failure":
        latencies, seconds, outcomes = failure(call, case["rounds"], case["retries"])
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


# A hot key releases every duplicate at once from one barrier; nothing here sleeps to order
# calls.
def hot(call, concurrency, rounds, prepare):
    """`concurrency` threads call one new key at the same moment, `rounds` times."""
    start_line = threading.Barrier(concurrency + 1)
    finish_line = threading.Barrier(concurrency + 1)
    key = [None]
    latencies, outcomes, lock = [], {}, threading.Lock()
    errors = []

    def worker():
        prepare()  # the thread's own connection, made before the first round
        for _ in range(rounds):
            start_line.wait()
            t = time.perf_counter_ns()
            try:
                o = call(key[0])
            except Exception as e:  # a peer's own refusal under contention is an outcome
                o = type(e).__name__
                errors.append(repr(e))
            took = time.perf_counter_ns() - t
            with lock:
                latencies.append(took)
                outcomes[o] = outcomes.get(o, 0) + 1
            finish_line.wait()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    started = time.perf_counter()
    for _ in range(rounds):
        key[0] = fresh("hot")
        start_line.wait()
        finish_line.wait()
    seconds = time.perf_counter() - started
    for t in threads:
        t.join()
    if errors:
        print(f"hot key: {len(errors)} calls raised, e.g. {errors[0]}", file=sys.stderr)
    return latencies, seconds, outcomes


def failure(call, rounds, retries):
    """A call whose body raises, then `retries` retries of the same key."""
    latencies, outcomes = [], {}
    started = time.perf_counter()
    for _ in range(rounds):
        key = fresh("fail")
        for i in range(retries + 1):
            t = time.perf_counter_ns()
            o = call(key)
            if i > 0:
                latencies.append(time.perf_counter_ns() - t)
                outcomes[o] = outcomes.get(o, 0) + 1
    return latencies, time.perf_counter() - started, outcomes


def versions():
    from importlib.metadata import version

    names = ["aws-lambda-powertools", "boto3", "redis", "psycopg", "psycopg-binary",
             "psycopg-pool", "asyncpg", "idemkit", "pg-idempotency"]
    out = {n: version(n) for n in names}
    out["python"] = sys.version.split()[0]
    return out


def main():
    spec = json.loads(sys.argv[1])
    if spec["peer"] == "versions":
        print(json.dumps(versions()))
        return
    body = Body()
    if spec["peer"] in ("pkg-asyncpg", "sql-asyncpg", "idemkit"):
        import asyncio

        from async_peers import run

        print(json.dumps({"results": asyncio.run(run(spec, body))}))
        return
    prepare = lambda: None  # noqa: E731
    if spec["peer"] == "powertools":
        call = powertools_peer(spec, body)
    elif spec["peer"] == "sql":
        call, prepare = sql_peer(spec, body)
    elif spec["peer"] == "pkg-psycopg":
        call = pkg_psycopg_peer(spec, body)
    elif spec["peer"] == "naive":
        call, prepare = naive_peer(spec, body)
    else:
        raise ValueError(f"unknown peer {spec['peer']}")
    prepare()
    results = [run_case(case, call, body, prepare) for case in spec["cases"]]
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
