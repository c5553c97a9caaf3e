/**
 * Exactly once (`transaction`): the claim, the function's own writes and the completion are
 * one transaction, over a pg PoolClient or Client in BEGIN, an idle pg Client (the call's
 * own transaction) and postgres.js's sql.begin. Commit keeps the write and the record,
 * rollback neither; a failure undoes the writes and is remembered or not; a process that
 * dies inside the transaction leaves nothing; a duplicate waits on the row (READ COMMITTED)
 * and replays, or gets Contention (REPEATABLE READ).
 */

import assert from "node:assert/strict";
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { before } from "node:test";

import { Contention, idempotent, InvalidArgument, ToolFailed } from "../../src/index.js";
import type { TransactionClient } from "../../src/index.js";
import { exec, TX_KINDS } from "../support/connections.js";
import { DSN, Effects, Gate, dbTest, one, recordOf, scopeFor, serverKey, until } from "../support/db.js";

before(async () => {
  if (DSN) await one("CREATE TABLE IF NOT EXISTS ts_tx_orders (id text PRIMARY KEY)");
});

const orderId = (scope: string): string => `${scope}-order`;

async function rows(id: string): Promise<number> {
  return Number((await one<{ n: string }>("SELECT count(*) AS n FROM ts_tx_orders WHERE id = $1", [id]))?.n);
}

/** The function under test: writes an order with the caller's client; `fail` makes it throw
 * after the write. */
function placeOrderFor(scope: string, effects: Effects, options: { cacheFailures?: boolean; fail?: boolean } = {}) {
  return idempotent(
    async function placeOrder(client: TransactionClient, order: { id: string }) {
      effects.add(order.id);
      await exec(client, "INSERT INTO ts_tx_orders (id) VALUES ($1)", [order.id]);
      if (options.fail === true) throw new Error("declined");
      return { placed: order.id };
    },
    { scope, transaction: (client) => client, ...(options.cacheFailures === undefined ? {} : { cacheFailures: options.cacheFailures }) },
  );
}

for (const kind of TX_KINDS) {
  dbTest(`${kind.name}: commit keeps the write and the record; a repeat replays`, async () => {
    const scope = scopeFor("commit");
    const effects = new Effects();
    const placeOrder = placeOrderFor(scope, effects);
    const id = orderId(scope);
    assert.deepEqual(await kind.within((client) => placeOrder(client, { id })), { placed: id });
    assert.equal(await rows(id), 1);
    // The client is not part of the input: the key is the hash of the order alone.
    assert.equal((await recordOf(scope, await serverKey({ id })))?.state, "succeeded");
    assert.deepEqual(await kind.within((client) => placeOrder(client, { id })), { placed: id });
    assert.equal(effects.count, 1, "the repeat replayed");
  });

  if (kind.idle !== true) {
    dbTest(`${kind.name}: rollback keeps neither the write nor the claim`, async () => {
      const scope = scopeFor("rollback");
      const effects = new Effects();
      const placeOrder = placeOrderFor(scope, effects);
      const id = orderId(scope);
      await kind.within((client) => placeOrder(client, { id }), { commit: false });
      assert.equal(await rows(id), 0);
      assert.equal(await recordOf(scope, await serverKey({ id })), undefined);
      await kind.within((client) => placeOrder(client, { id }));
      assert.equal(effects.count, 2, "the retry ran");
      assert.equal(await rows(id), 1);
    });
  }

  dbTest(`${kind.name}: a failure not cached undoes the writes, keeps nothing, and the caller's transaction goes on`, async () => {
    const scope = scopeFor("fail");
    const effects = new Effects();
    const placeOrder = placeOrderFor(scope, effects, { fail: true });
    const id = orderId(scope);
    await kind.within(async (client) => {
      await assert.rejects(placeOrder(client, { id }), /declined/);
      await exec(client, "INSERT INTO ts_tx_orders (id) VALUES ($1)", [`${id}-after`]);
    });
    assert.equal(await rows(id), 0, "the function's write was undone");
    assert.equal(await rows(`${id}-after`), 1, "the caller's own write committed");
    assert.equal(await recordOf(scope, await serverKey({ id })), undefined, "nothing remembered");
    await kind.within((client) => assert.rejects(placeOrder(client, { id }), /declined/));
    assert.equal(effects.count, 2, "a retry runs again");
  });

  dbTest(`${kind.name}: a failure cached undoes the writes and is replayed`, async () => {
    const scope = scopeFor("cached");
    const effects = new Effects();
    const placeOrder = placeOrderFor(scope, effects, { fail: true, cacheFailures: true });
    const id = orderId(scope);
    await kind.within((client) => assert.rejects(placeOrder(client, { id }), /declined/));
    assert.equal(await rows(id), 0, "the function's write was undone");
    assert.equal((await recordOf(scope, await serverKey({ id })))?.state, "failed");
    await kind.within((client) => assert.rejects(placeOrder(client, { id }), ToolFailed));
    assert.equal(effects.count, 1, "the failure was replayed");
  });

  if (kind.idle === true) continue; // an idle client's call commits at once: nothing to wait on

  for (const isolation of ["READ COMMITTED", "REPEATABLE READ"]) {
    const expect = isolation === "READ COMMITTED" ? "waits on the row, then replays" : "gets Contention";
    dbTest(`${kind.name}: a duplicate under ${isolation} ${expect}`, async () => {
      const scope = scopeFor("duplicate");
      const effects = new Effects();
      const placeOrder = placeOrderFor(scope, effects);
      const id = orderId(scope);
      const claimed = new Gate();
      const commit = new Gate();
      const first = kind.within(async (client) => {
        const result = await placeOrder(client, { id });
        claimed.open();
        await commit.promise;
        return result;
      });
      await claimed.promise;
      let pid = 0;
      const second = kind.within(
        async (client) => {
          // The first statement takes a REPEATABLE READ transaction's snapshot.
          pid = Number(((await exec(client, "SELECT pg_backend_pid() AS pid")) as { pid: number }[])[0]?.pid);
          return placeOrder(client, { id });
        },
        { isolation },
      );
      second.catch(() => undefined);
      await until(
        async () =>
          pid !== 0 &&
          (await one<{ w: string | null }>("SELECT wait_event_type AS w FROM pg_stat_activity WHERE pid = $1", [pid]))?.w === "Lock",
        "the duplicate waiting on the call's row",
      );
      commit.open();
      assert.deepEqual(await first, { placed: id });
      if (isolation === "READ COMMITTED") {
        assert.deepEqual(await second, { placed: id });
      } else {
        await assert.rejects(second, Contention);
      }
      assert.equal(effects.count, 1);
      assert.equal(await rows(id), 1);
    });
  }
}

const CHILD = fileURLToPath(new URL("./child.js", import.meta.url));

for (const driver of ["pg", "postgres"] as const) {
  dbTest(`${driver}: a process that dies inside the transaction leaves nothing, and the retry runs once`, async () => {
    const scope = scopeFor(`killed-${driver}`);
    const id = orderId(scope);
    const child = fork(CHILD, [driver, DSN, scope, id], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
    const exited = new Promise<void>((resolve) => child.on("exit", () => { resolve(); }));
    const pid = await new Promise<number>((resolve, reject) => {
      child.on("message", (m: { written?: number }) => {
        if (typeof m.written === "number") resolve(m.written);
      });
      child.on("exit", (code) => { reject(new Error(`the child exited (${String(code)}) before its write`)); });
    });
    const state = await one<{ state: string }>("SELECT state FROM pg_stat_activity WHERE pid = $1", [pid]);
    assert.equal(state?.state, "idle in transaction", "the write and the claim are uncommitted");
    child.kill("SIGKILL");
    await exited;
    await until(
      async () => (await one("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [pid])) === undefined,
      "the dead process's backend ending",
    );
    assert.equal(await rows(id), 0, "no write");
    assert.equal(await recordOf(scope, await serverKey({ id })), undefined, "no claim");
    const effects = new Effects();
    const placeOrder = placeOrderFor(scope, effects);
    const kind = TX_KINDS.find((k) => k.name === (driver === "pg" ? "pg Client in BEGIN" : "postgres.js sql.begin"));
    assert.ok(kind);
    assert.deepEqual(await kind.within((client) => placeOrder(client, { id })), { placed: id });
    assert.deepEqual(await kind.within((client) => placeOrder(client, { id })), { placed: id });
    assert.equal(effects.count, 1, "the retry ran once");
    assert.equal(await rows(id), 1);
  });
}

dbTest("a pool, a postgres.js root sql or a connection string as the transaction is refused", async () => {
  const pg = (await import("pg")).default;
  const pool = new pg.Pool({ connectionString: DSN, max: 1 });
  const { postgresJs } = await import("../support/connections.js");
  const sql = postgresJs();
  try {
    const f = idempotent(async function f(_c: unknown, n: number) { return n; }, { scope: scopeFor("refused"), transaction: (c) => c as TransactionClient });
    await assert.rejects(f(pool, 1), (e: unknown) => e instanceof InvalidArgument && /one connection/.test(e.message));
    await assert.rejects(f(sql, 1), (e: unknown) => e instanceof InvalidArgument && /sql\.begin/.test(e.hint ?? ""));
    await assert.rejects(f("postgresql://x", 1), InvalidArgument);
  } finally {
    await pool.end();
    await sql.end();
  }
});

dbTest("postgres.js: a failed statement of the function's fails the caller's sql.begin, and nothing is kept", async () => {
  const { postgresJs } = await import("../support/connections.js");
  const scope = scopeFor("pgjs-failed-statement");
  const id = orderId(scope);
  await one("INSERT INTO ts_tx_orders (id) VALUES ($1)", [id]);
  const effects = new Effects();
  const placeOrder = placeOrderFor(scope, effects, { cacheFailures: true });
  const sql = postgresJs();
  try {
    // postgres.js's own rule: a statement that failed on tx fails sql.begin, caught or not.
    await assert.rejects(
      sql.begin(async (tx) => {
        await assert.rejects(placeOrder(tx, { id }), { code: "23505" });
      }),
      { code: "23505" },
    );
  } finally {
    await sql.end();
  }
  assert.equal(await recordOf(scope, await serverKey({ id })), undefined, "the cached failure went with the rollback");
});
