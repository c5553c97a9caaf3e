/**
 * What a Store runs on: a node-postgres Pool (each call committed by itself), a Client or a
 * PoolClient (a call inside the caller's transaction stays in it), a connection string (a
 * pool of its own); a lost connection is StoreUnavailable.
 */

import assert from "node:assert/strict";

import pg from "pg";

import { InvalidArgument, Mismatch, Store, StoreUnavailable } from "../../src/index.js";
import { DSN, dbTest, recordOf, scopeFor } from "../support/db.js";
import { Forwarder } from "../support/forwarder.js";

dbTest("a call inside the caller's transaction rolled back leaves nothing", async () => {
  const scope = scopeFor("rollback");
  const client = new pg.Client({ connectionString: DSN });
  await client.connect();
  try {
    const store = new Store(client);
    await client.query("BEGIN");
    const c = await store.begin(scope, "k", { n: 1 });
    assert.equal(c.outcome, "claimed");
    await store.complete(scope, "k", c.fence ?? 0, { done: true });
    // Inside the transaction the record is there; outside, not yet.
    assert.equal((await store.lookup(scope, "k"))?.state, "succeeded");
    assert.equal(await recordOf(scope, "k"), undefined, "invisible before the commit");
    await client.query("ROLLBACK");
    assert.equal(await recordOf(scope, "k"), undefined, "the rollback took the claim and its result");
    assert.equal((await store.begin(scope, "k", { n: 1 })).outcome, "claimed", "a retry runs afresh");
  } finally {
    await client.end();
  }
});

dbTest("a call inside the caller's transaction commits with it", async () => {
  const scope = scopeFor("commit");
  const pool = new pg.Pool({ connectionString: DSN, max: 2 });
  const conn = await pool.connect();
  try {
    const store = new Store(conn);
    await conn.query("BEGIN");
    const c = await store.begin(scope, "k", { n: 1 });
    await store.complete(scope, "k", c.fence ?? 0, [1, "two"]);
    assert.equal(await recordOf(scope, "k"), undefined);
    await conn.query("COMMIT");
    assert.equal((await recordOf(scope, "k"))?.state, "succeeded");
    // A refusal aborts the caller's transaction, as any SQL error does.
    await conn.query("BEGIN");
    await assert.rejects(store.begin(scope, "k", { other: true }), Mismatch);
    await assert.rejects(conn.query("SELECT 1"), /current transaction is aborted/);
    await conn.query("ROLLBACK");
  } finally {
    conn.release();
    await pool.end();
  }
});

dbTest("a Pool runs each call on a connection of its own, committed by itself", async () => {
  const scope = scopeFor("pool");
  const pool = new pg.Pool({ connectionString: DSN, max: 3 });
  try {
    const store = new Store(pool);
    const c = await store.begin(scope, "k");
    assert.equal((await recordOf(scope, "k"))?.state, "in_progress", "committed at once");
    await store.complete(scope, "k", c.fence ?? 0, "done");
    assert.equal((await store.begin(scope, "k")).response, "done");
    await store.close();
    // The pool is the caller's: still open.
    assert.equal((await pool.query<{ one: number }>("SELECT 1 AS one")).rows[0]?.one, 1);
  } finally {
    await pool.end();
  }
});

dbTest("a connection string opens one pool, closed by close()", async () => {
  const scope = scopeFor("conninfo");
  const link = await Forwarder.open(DSN);
  const store = new Store(link.dsn);
  try {
    for (let i = 0; i < 10; i++) {
      const c = await store.begin(scope, `k${i}`);
      await store.complete(scope, `k${i}`, c.fence ?? 0, i);
    }
    assert.ok(link.accepted >= 1 && link.accepted <= 2, `one pool, not a connection per call: ${link.accepted}`);
  } finally {
    await store.close();
    await link.close();
  }
  await assert.rejects(store.begin(scope, "after"), StoreUnavailable);
});

dbTest("a lost connection is StoreUnavailable, with the driver's error as its cause", async () => {
  const link = await Forwarder.open(DSN);
  const client = new pg.Client({ connectionString: link.dsn });
  client.on("error", () => undefined);
  await client.connect();
  const store = new Store(client);
  try {
    await store.checkInstalled();
    link.cut();
    await assert.rejects(store.begin(scopeFor("lost"), "k"), (e: unknown) => {
      assert.ok(e instanceof StoreUnavailable, String(e));
      assert.equal(e.sqlstate, undefined);
      assert.ok(e.cause instanceof Error);
      assert.match(e.hint ?? "", /retried/);
      return true;
    });
  } finally {
    await client.end().catch(() => undefined);
    await link.close();
  }
});

dbTest("a pool that cannot connect is StoreUnavailable", async () => {
  const link = await Forwarder.open(DSN);
  link.cut();
  const store = new Store(link.dsn, { poolOptions: { connectionTimeoutMillis: 2_000 } });
  try {
    await assert.rejects(store.begin(scopeFor("down"), "k"), StoreUnavailable);
  } finally {
    await store.close();
    await link.close();
  }
});

dbTest("unprepared statements (behind a pooler) answer alike", async () => {
  const scope = scopeFor("unprepared");
  const store = new Store(DSN, { prepare: false });
  try {
    const c = await store.begin(scope, "k", { n: 1 });
    await store.complete(scope, "k", c.fence ?? 0, { ok: 1 });
    assert.deepEqual((await store.begin(scope, "k", { n: 1 })).response, { ok: 1 });
  } finally {
    await store.close();
  }
});

dbTest("what is not a connection is refused with a hint", () => {
  for (const source of [42, {}, null, () => undefined, ""]) {
    assert.throws(
      () => new Store(source as unknown as string),
      (e: unknown) => e instanceof InvalidArgument && /connection string|Pool/.test(e.hint ?? ""),
    );
  }
  return Promise.resolve();
});
