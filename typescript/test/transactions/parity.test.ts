/**
 * Driver parity: one script of the Store's calls over every kind of connection of both
 * drivers (node-postgres and postgres.js) answers alike, refusals included (class,
 * SQLSTATE, message, detail, hint); a lost postgres.js connection is StoreUnavailable.
 */

import assert from "node:assert/strict";

import postgres from "postgres";

import { IdempotencyError, Store, StoreUnavailable } from "../../src/index.js";
import type { Begin } from "../../src/index.js";
import { STORE_KINDS, postgresJs } from "../support/connections.js";
import { DSN, dbTest, scopeFor } from "../support/db.js";
import { Forwarder } from "../support/forwarder.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** An answer with what differs by run made stable: the scope, fences (by first sight),
 * uuids, dates and lease times. */
function normaliser(scope: string): (value: unknown) => unknown {
  const fences = new Map<unknown, string>();
  const norm = (value: unknown, name = ""): unknown => {
    if (value instanceof IdempotencyError) {
      return norm({ error: value.name, sqlstate: value.sqlstate, message: value.message, detail: value.detail, hint: value.hint });
    }
    if (value instanceof Date) return "<date>";
    if (typeof value === "string") return UUID.test(value) ? "<uuid>" : value.replaceAll(scope, "<scope>");
    if (name === "fence" && value !== null) {
      if (!fences.has(value)) fences.set(value, `<fence ${fences.size + 1}>`);
      return fences.get(value);
    }
    if ((name === "leaseLeftMs" || name === "retryAfterMs") && typeof value === "number") return value > 0 ? "<ms>" : value;
    if (Array.isArray(value)) return value.map((v) => norm(v));
    if (typeof value === "object" && value !== null) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, norm(v, k)]));
    }
    return value;
  };
  return norm;
}

/** The script: every call of the Store, answers and refusals in order. */
async function script(store: Store, scope: string, inTransaction: boolean): Promise<unknown[]> {
  const out: unknown[] = [];
  const step = async (what: string, call: (store: Store) => Promise<unknown>): Promise<unknown> => {
    let answer: unknown;
    try {
      // Inside the caller's transaction a refusal aborts it, as any SQL error does: each
      // step there runs in a savepoint (the store's own, as exactly-once uses it).
      answer = inTransaction ? await store.transaction((inside) => call(inside)) : await call(store);
    } catch (e) {
      if (!(e instanceof IdempotencyError)) throw e;
      answer = e;
    }
    out.push([what, answer]);
    return answer;
  };
  const fence = (c: unknown): number => {
    if (c instanceof Error) throw c;
    return (c as Begin).fence ?? 0;
  };
  const request = { to: "ann", n: 1.5, tags: ["a", "é", "😀"], nested: { deep: [null, true, 0] } };
  const c = await step("begin", (s) => s.begin(scope, "k", request, { ttl: 60_000, lease: 30_000 }));
  await step("begin in progress", (s) => s.begin(scope, "k", request));
  await step("complete", (s) => s.complete(scope, "k", fence(c), { id: 7, text: "x\"y\\z", list: [1, "2"] }));
  await step("replay", (s) => s.begin(scope, "k", request));
  await step("mismatch", (s) => s.begin(scope, "k", { other: true }));
  await step("fail fast", (s) => s.begin(scope, "k", request, { onCacheHit: "failFast" }));
  await step("lookup", (s) => s.lookup(scope, "k"));
  await step("stale fence", (s) => s.complete(scope, "k", fence(c) + 1000, "late"));
  const e = await step("claim e", (s) => s.begin(scope, "e", null, { lease: 10_000 }));
  await step("extend", (s) => s.extend(scope, "e", fence(e), 20_000));
  await step("release", (s) => s.release(scope, "e", fence(e)));
  await step("claim again", (s) => s.begin(scope, "e"));
  const f = await step("claim f", (s) => s.begin(scope, "f"));
  await step("failure kept", (s) => s.complete(scope, "f", fence(f), { error: "no" }, { succeeded: false, cacheFailure: true }));
  await step("failure replay", (s) => s.begin(scope, "f"));
  const g = await step("claim g", (s) => s.begin(scope, "g"));
  await step("failure dropped", (s) => s.complete(scope, "g", fence(g), { error: "no" }, { succeeded: false, cacheFailure: false }));
  await step("lookup absent", (s) => s.lookup(scope, "g"));
  await step("hashInput", (s) => s.begin(scope, null, { same: "input" }));
  const batch = (await step("batch", (s) =>
    s.beginBatch(scope, ["b1", { key: "b2", request: { n: 2 } }, { key: "k", request: { other: 1 } }, { key: null, request: { h: 1 } }]),
  )) as Begin[];
  await step("complete batch", (s) =>
    s.completeBatch(scope, [
      { key: "b1", fence: fence(batch[0]), response: 1 },
      { key: "b2", fence: fence(batch[1]) + 1000, response: 2 },
    ]),
  );
  await step("forget", (s) => s.forget(scope, "b1"));
  await step("forget absent", (s) => s.forget(scope, "b1"));
  await step("blank key", (s) => s.begin(scope, "  "));
  await step("long key", (s) => s.begin(scope, "x".repeat(5000)));
  await step("bad word", (s) => s.begin(scope, "w", null, { onCacheHit: "sometimes" as never }));
  await step("installed", (s) => s.checkInstalled());
  await step("purge", async (s) => typeof (await s.purgeExpired()));
  return out;
}

dbTest("the same script answers alike over every kind of connection of both drivers", async () => {
  let reference: unknown[] | undefined;
  for (const kind of STORE_KINDS) {
    const opened = await kind.open();
    const scope = scopeFor("parity");
    let answers: unknown[];
    try {
      answers = (await script(opened.store, scope, kind.inTransaction === true)).map(normaliser(scope));
    } catch (e) {
      throw new Error(`over ${kind.name}: ${String(e)}`, { cause: e });
    } finally {
      await opened.close();
    }
    if (reference === undefined) {
      reference = answers;
      // The script reaches the answers it means to (a refusal is a refusal).
      const [, mismatch] = answers[4] as [string, { error: string; sqlstate: string; detail: string }];
      assert.equal(mismatch.error, "Mismatch");
      assert.equal(mismatch.sqlstate, "IK001");
      assert.ok(mismatch.detail, "the server's detail is kept");
      continue;
    }
    assert.deepEqual(answers, reference, `${kind.name} answers as ${STORE_KINDS[0]?.name ?? ""}`);
  }
});

dbTest("a call inside postgres.js's transaction stays in it", async () => {
  const sql = postgresJs();
  const scope = scopeFor("pgjs-tx");
  const outside = new Store(sql);
  try {
    await assert.rejects(
      sql.begin(async (tx) => {
        const store = new Store(tx);
        await store.begin(scope, "k");
        assert.equal((await store.lookup(scope, "k"))?.state, "inProgress", "seen inside");
        assert.equal(await outside.lookup(scope, "k"), null, "invisible outside before the commit");
        throw new Error("roll back");
      }),
      /roll back/,
    );
    assert.equal(await outside.lookup(scope, "k"), null, "the rollback took the claim");
    await sql.begin(async (tx) => {
      await new Store(tx).begin(scope, "k");
    });
    assert.equal((await outside.lookup(scope, "k"))?.state, "inProgress", "the commit kept it");
  } finally {
    await sql.end();
  }
});

dbTest("a lost postgres.js connection is StoreUnavailable, with the driver's error as its cause", async () => {
  const link = await Forwarder.open(DSN);
  const viaLink = postgres(link.dsn, { max: 1, connect_timeout: 2, onnotice: () => undefined });
  const store = new Store(viaLink);
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
    await viaLink.end({ timeout: 0 });
    await link.close();
  }
});

dbTest("a transaction needs one connection: a pg Pool and a postgres.js root sql are refused", async () => {
  const sql = postgresJs();
  try {
    await assert.rejects(new Store(sql).transaction(() => Promise.resolve()), /sql\.begin/);
    const reserved = await sql.reserve();
    try {
      await assert.rejects(new Store(reserved).transaction(() => Promise.resolve()), /sql\.begin/);
    } finally {
      reserved.release();
    }
  } finally {
    await sql.end();
  }
  const store = new Store(DSN);
  try {
    await assert.rejects(store.transaction(() => Promise.resolve()), /one connection, not a pool/);
  } finally {
    await store.close();
  }
});
