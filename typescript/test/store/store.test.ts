/**
 * The store's calls as the SQL API answers them: fences, claim tokens, mismatches, refusals
 * with their SQLSTATE, detail and hint (changing nothing), batches, lookup, forget, purge.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

import {
  InvalidArgument,
  LeaseLost,
  Mismatch,
  NotInstalled,
  Store,
} from "../../src/index.js";
import type { Begin } from "../../src/index.js";
import { DSN, dbTest, one, recordOf, scopeFor, serverKey, untilServerPasses, fileStore } from "../support/db.js";

const store = fileStore();

function fenceOf(c: Begin): number {
  assert.notEqual(c.fence, null, "a claim has a fence");
  return c.fence ?? 0;
}

dbTest("claim, complete, replay and the record", async () => {
  const scope = scopeFor("claim");
  const c = await store.begin(scope, "k", { to: "ann" }, { ttl: 60_000 });
  assert.deepEqual([c.outcome, c.attempt, c.recovered, c.key], ["claimed", 1, false, "k"]);
  assert.ok(c.upstreamKey && /^[0-9a-f-]{36}$/.test(c.upstreamKey));
  assert.ok(c.leaseLeftMs !== null && c.leaseLeftMs > 0 && c.leaseLeftMs <= 60_000);
  assert.ok(c.leaseUntil instanceof Date && c.expiresAt instanceof Date);
  assert.equal(typeof c.fence, "number");
  assert.equal(await store.complete(scope, "k", fenceOf(c), { id: 1 }), "succeeded");
  const r = await store.begin(scope, "k", { to: "ann" });
  assert.deepEqual([r.outcome, r.fence, r.response, r.succeeded], ["replay", null, { id: 1 }, true]);
  const rec = await store.lookup(scope, "k");
  assert.ok(rec !== null);
  assert.deepEqual([rec.state, rec.response, rec.attempt, rec.fence], ["succeeded", { id: 1 }, 1, c.fence]);
  assert.equal(rec.upstreamKey, c.upstreamKey);
  assert.ok(rec.createdAt instanceof Date && rec.completedAt instanceof Date);
  assert.equal(await store.forget(scope, "k"), true);
  assert.equal(await store.lookup(scope, "k"), null);
  assert.equal(await store.forget(scope, "k"), false);
});

dbTest("a claim in progress is told to a duplicate, with retryAfterMs", async () => {
  const scope = scopeFor("in-progress");
  const c = await store.begin(scope, "k", null, { lease: 30_000 });
  const d = await store.begin(scope, "k");
  assert.equal(c.outcome, "claimed");
  assert.deepEqual([d.outcome, d.fence], ["inProgress", null]);
  assert.ok(d.retryAfterMs !== null && d.retryAfterMs > 0 && d.retryAfterMs <= 30_000, String(d.retryAfterMs));
  const rec = await store.lookup(scope, "k");
  assert.equal(rec?.state, "inProgress");
});

dbTest("a completion repeated under its fence keeps the first", async () => {
  const scope = scopeFor("repeat");
  const c = await store.begin(scope, "k");
  await store.complete(scope, "k", fenceOf(c), { n: 1 });
  // The first reply may have been lost: the same fence again is answered, nothing written.
  assert.equal(await store.complete(scope, "k", fenceOf(c), { n: 2 }), "succeeded");
  assert.deepEqual((await store.begin(scope, "k")).response, { n: 1 });
});

dbTest("a failure is kept only with cacheFailure, and release gives the claim up", async () => {
  const scope = scopeFor("failure");
  const a = await store.begin(scope, "a");
  assert.equal(await store.complete(scope, "a", fenceOf(a), { error: "no" }, { succeeded: false }), "absent");
  assert.equal(await store.lookup(scope, "a"), null);
  const b = await store.begin(scope, "b");
  assert.equal(
    await store.complete(scope, "b", fenceOf(b), { error: "no" }, { succeeded: false, cacheFailure: true }),
    "failed",
  );
  const replay = await store.begin(scope, "b");
  assert.deepEqual([replay.outcome, replay.succeeded, replay.response], ["replay", false, { error: "no" }]);
  const c = await store.begin(scope, "c");
  await store.release(scope, "c", fenceOf(c));
  assert.equal(await store.lookup(scope, "c"), null);
  assert.equal((await store.begin(scope, "c")).outcome, "claimed");
});

dbTest("extend renews the lease under the fence", async () => {
  const scope = scopeFor("extend");
  const c = await store.begin(scope, "k", null, { lease: 2_000 });
  const until = await store.extend(scope, "k", fenceOf(c), 20_000);
  assert.ok(until instanceof Date && c.leaseUntil !== null && until > c.leaseUntil);
  const rec = await recordOf(scope, "k");
  assert.equal(rec?.lease_until?.getTime(), until.getTime());
});

dbTest("stale and unknown fences are refused as LeaseLost", async () => {
  const scope = scopeFor("fences");
  const old = await store.begin(scope, "k", null, { lease: 1_000 });
  assert.ok(old.leaseUntil !== null);
  await untilServerPasses(old.leaseUntil, "the lease");
  const taken = await store.begin(scope, "k");
  assert.deepEqual([taken.outcome, taken.recovered, taken.attempt], ["claimed", true, 2]);
  assert.equal(taken.upstreamKey, old.upstreamKey);
  assert.ok(fenceOf(taken) > fenceOf(old));
  const calls: (() => Promise<unknown>)[] = [
    () => store.complete(scope, "k", fenceOf(old), {}),
    () => store.extend(scope, "k", fenceOf(old)),
    () => store.release(scope, "k", fenceOf(old)),
    () => store.complete(scope, "nobody", 12345, {}),
  ];
  for (const call of calls) {
    await assert.rejects(call(), (e: unknown) => {
      assert.ok(e instanceof LeaseLost, String(e));
      assert.equal(e.sqlstate, "IK003");
      assert.ok(e.detail, "the server's detail");
      return true;
    });
  }
  assert.equal((await store.lookup(scope, "k"))?.fence, taken.fence);
});

dbTest("a repeat with the claim token gets the claim back", async () => {
  const scope = scopeFor("token");
  const token = randomUUID();
  const a = await store.begin(scope, "k", null, { claimToken: token });
  const b = await store.begin(scope, "k", null, { claimToken: token });
  assert.deepEqual([a.outcome, b.outcome, a.fence], ["claimed", "claimed", b.fence]);
  assert.equal((await store.begin(scope, "k", null, { claimToken: randomUUID() })).outcome, "inProgress");
});

dbTest("a different request is rejected unless ignored", async () => {
  const scope = scopeFor("mismatch");
  const c = await store.begin(scope, "k", { n: 1 });
  await store.complete(scope, "k", fenceOf(c), { ok: true });
  await assert.rejects(store.begin(scope, "k", { n: 2 }), (e: unknown) => {
    assert.ok(e instanceof Mismatch);
    assert.equal(e.sqlstate, "IK001");
    assert.match(e.message, /different request/);
    assert.ok(e.detail && e.hint, "the server's detail and hint");
    assert.equal(e.name, "Mismatch");
    return true;
  });
  const r = await store.begin(scope, "k", { n: 2 }, { onMismatch: "ignore" });
  assert.deepEqual([r.outcome, r.response], ["replay", { ok: true }]);
});

const refusals: Record<string, (s: string) => Promise<unknown>> = {
  "blank key": (s) => store.begin(s, "  "),
  "blank scope": () => store.begin("", "k"),
  "ttl 0": (s) => store.begin(s, "k", null, { ttl: 0 }),
  "lease above ttl": (s) => store.begin(s, "k", null, { ttl: 10_000, lease: 20_000 }),
  "unknown word": (s) => store.begin(s, "k", null, { onCacheHit: "sometimes" as "failFast" }),
  "NUL in key": (s) => store.begin(s, "k\0"),
  "U+0000 in response": (s) => store.complete(s, "k", 1, { a: "\0" }),
  "a bigint in the request": (s) => store.begin(s, "k", { n: 1n }),
  "a duration that is not a number": (s) => store.begin(s, "k", null, { ttl: "1 day" as unknown as number }),
};

for (const [name, call] of Object.entries(refusals)) {
  dbTest(`a refusal has its kind and changes nothing: ${name}`, async () => {
    const scope = scopeFor("refusal");
    await assert.rejects(call(scope), (e: unknown) => {
      assert.ok(e instanceof InvalidArgument, String(e));
      assert.equal(e.sqlstate, "22023");
      assert.ok(e.message);
      assert.ok(e.detail ?? e.hint, "a detail or a hint says what to do");
      return true;
    });
    assert.equal(await store.lookup(scope, "k"), null);
    const n = await one<{ n: string }>("SELECT count(*) AS n FROM idem_metrics() WHERE scope = $1", [scope]);
    assert.equal(n?.n, "0");
  });
}

dbTest("a batch answers each item as a single call", async () => {
  const scope = scopeFor("batch");
  const done = await store.begin(scope, "done", { n: 1 });
  await store.complete(scope, "done", fenceOf(done), { id: "done" });
  const [a, replay, mismatch, b] = await store.beginBatch(scope, [
    { key: "a" },
    { key: "done", request: { n: 1 } },
    { key: "done", request: { n: 2 } },
    "b",
  ]);
  assert.ok(a !== undefined && !(a instanceof Error) && a.outcome === "claimed" && a.key === "a");
  assert.ok(replay !== undefined && !(replay instanceof Error));
  assert.deepEqual(replay.response, { id: "done" });
  assert.ok(mismatch instanceof Mismatch && (mismatch.detail ?? "").includes("Item 3"));
  assert.ok(b !== undefined && !(b instanceof Error) && b.outcome === "claimed");
  const states = await store.completeBatch(scope, [
    { key: "a", fence: fenceOf(a), response: { id: "a" } },
    { key: "b", fence: 999_999_999, response: { id: "b" } },
  ]);
  assert.equal(states[0], "succeeded");
  assert.ok(states[1] instanceof LeaseLost && (states[1].detail ?? "").includes("Item 2"));
  assert.deepEqual((await store.begin(scope, "a")).response, { id: "a" });
});

dbTest("a batch of hashInput items and claim tokens", async () => {
  const scope = scopeFor("batch-hash");
  const token = randomUUID();
  const items = [{ request: { to: "ann" }, claimToken: token }, { request: { to: "bob" } }];
  const first = await store.beginBatch(scope, items, { lease: 30_000 });
  const again = await store.beginBatch(scope, items);
  const [a, b] = first;
  assert.ok(a !== undefined && !(a instanceof Error) && b !== undefined && !(b instanceof Error));
  assert.equal(a.key, await serverKey({ to: "ann" }));
  const [a2, b2] = again;
  assert.ok(a2 !== undefined && !(a2 instanceof Error) && b2 !== undefined && !(b2 instanceof Error));
  assert.deepEqual([a2.outcome, a2.fence], ["claimed", a.fence], "the token gets its claim back");
  assert.equal(b2.outcome, "inProgress");
});

dbTest("a bad item fails the batch and changes nothing", async () => {
  const scope = scopeFor("bad-batch");
  await assert.rejects(store.beginBatch(scope, ["a", "  "]), (e: unknown) => {
    assert.ok(e instanceof InvalidArgument);
    assert.match(`${e.message} ${e.detail ?? ""}`, /Item 2/);
    return true;
  });
  assert.equal(await store.lookup(scope, "a"), null);
  await assert.rejects(
    store.beginBatch(scope, Array.from({ length: 1001 }, (_, i) => String(i))),
    /at most 1000/,
  );
  await assert.rejects(
    store.completeBatch(scope, Array.from({ length: 1001 }, (_, i) => ({ key: String(i), fence: 1, response: null }))),
    InvalidArgument,
  );
});

dbTest("hashInput keys come from the server", async () => {
  const scope = scopeFor("hash");
  const c = await store.begin(scope, null, { b: [1, 2.5], a: "é" });
  assert.equal(c.key, await serverKey({ a: "é", b: [1, 2.5] }));
  assert.equal(c.key.length, 64);
});

dbTest("purge removes only expired records", async () => {
  const scope = scopeFor("purge");
  const gone = await store.begin(scope, "gone", null, { ttl: 1_000 });
  await store.complete(scope, "gone", fenceOf(gone), {});
  const live = await store.begin(scope, "live", null, { ttl: 600_000 });
  const rec = await recordOf(scope, "gone");
  assert.ok(rec !== undefined && live.outcome === "claimed");
  await untilServerPasses(rec.expires_at, "the ttl");
  assert.ok((await store.purgeExpired()) >= 1);
  assert.equal(await recordOf(scope, "gone"), undefined);
  assert.notEqual(await recordOf(scope, "live"), undefined);
});

dbTest("checkInstalled names what to do", async () => {
  await store.checkInstalled();
  const elsewhere = new Store(DSN, { schema: "no_such_schema" });
  try {
    await assert.rejects(elsewhere.checkInstalled(), (e: unknown) => {
      assert.ok(e instanceof NotInstalled);
      assert.match(e.hint ?? "", /CREATE EXTENSION/);
      return true;
    });
    // A call in a schema without the API: the server's refusal, with the package's hint;
    // again on the same connection (its prepared statement was never made).
    for (let i = 0; i < 2; i++) {
      await assert.rejects(elsewhere.begin("s", "k"), (e: unknown) => {
        assert.ok(e instanceof NotInstalled, String(e));
        assert.equal(e.sqlstate, "3F000");
        assert.match(e.hint ?? "", /schema/);
        return true;
      });
    }
  } finally {
    await elsewhere.close();
  }
});

dbTest("the statements name the API's schema, whatever the search_path holds", async () => {
  const scope = scopeFor("search-path");
  const pathStore = new Store(`${DSN}${DSN.includes("?") ? "&" : "?"}options=${encodeURIComponent("-c search_path=pg_catalog")}`);
  try {
    const c = await pathStore.begin(scope, "k");
    assert.equal(c.outcome, "claimed");
  } finally {
    await pathStore.close();
  }
});
