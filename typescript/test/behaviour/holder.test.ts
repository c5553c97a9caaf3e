/**
 * After the function ran, its result is never thrown away: a completion the store did not
 * take is retried under the fence, a retry in the same process joins its holder, and the
 * function never runs twice (docs/client.md, "After the tool ran").
 */

import assert from "node:assert/strict";

import { idempotent, Store, Unrecorded } from "../../src/index.js";
import { DSN, dbTest, Effects, recordOf, scopeFor, until, fileStore } from "../support/db.js";
import { Forwarder } from "../support/forwarder.js";

const store = fileStore();

dbTest("a store out of reach after the run records once it is back", async () => {
  const scope = scopeFor("cut");
  const link = await Forwarder.open(DSN);
  const cutStore = new Store(link.dsn, { poolOptions: { connectionTimeoutMillis: 1_000 } });
  const sent = new Effects();
  const send = idempotent(
    async (input: { id: string }) => {
      const n = sent.add(input.id);
      link.cut(); // the network fails right after the effect
      return Promise.resolve({ emailId: n });
    },
    { store: cutStore, scope, key: (i) => i.id, lease: 1_000 },
  );
  try {
    await assert.rejects(send({ id: "h-1" }), (e: unknown) => {
      assert.ok(e instanceof Unrecorded, String(e));
      assert.deepEqual([e.response, e.replayed], [{ emailId: 1 }, false]);
      return true;
    });
    // A retry in this process while the store is still out of reach joins the holder: it
    // is told the result exists, and nothing runs (no takeover once the lease lapsed).
    await assert.rejects(send({ id: "h-1" }), (e: unknown) => {
      assert.ok(e instanceof Unrecorded, String(e));
      assert.deepEqual([e.response, e.replayed], [{ emailId: 1 }, true]);
      return true;
    });
    link.restore();
    // The holder records the result under its fence once the store is back.
    await until(async () => (await recordOf(scope, "h-1"))?.state === "succeeded", "the recording");
    assert.deepEqual(await send({ id: "h-1" }), { emailId: 1 });
    const rec = await recordOf(scope, "h-1");
    assert.equal(rec?.attempt, 1);
    assert.equal(sent.count, 1);
  } finally {
    link.restore();
    await cutStore.close();
    await link.close();
  }
});

dbTest("a result too large is marked, and every retry says so", async () => {
  const scope = scopeFor("large");
  const sent = new Effects();
  const exportBlob = idempotent(
    async (input: { id: string; size: number }) => {
      sent.add(input.id);
      return Promise.resolve({ blob: "x".repeat(input.size) });
    },
    { store, scope, key: (i) => i.id },
  );
  const big = 3 << 20; // above max_response_bytes, 1 MB by default on both backends
  await assert.rejects(exportBlob({ id: "big-1", size: big }), (e: unknown) => {
    assert.ok(e instanceof Unrecorded);
    assert.equal((e.response as { blob: string }).blob.length, big);
    assert.equal(e.replayed, false);
    return true;
  });
  await assert.rejects(exportBlob({ id: "big-1", size: big }), (e: unknown) => e instanceof Unrecorded && e.replayed);
  assert.equal(sent.count, 1);
  const rec = await recordOf(scope, "big-1");
  assert.equal(typeof (rec?.response as { pg_idempotency: { unrecorded?: string } }).pg_idempotency.unrecorded, "string");
});

dbTest("a result that is not JSON is marked and handed back", async () => {
  const scope = scopeFor("not-json");
  const value = { id: 1n };
  const f = idempotent(async (input: { id: string }) => Promise.resolve(input.id ? value : value), {
    store,
    scope,
    key: (i) => i.id,
  });
  await assert.rejects(f({ id: "nj-1" }), (e: unknown) => {
    assert.ok(e instanceof Unrecorded);
    assert.equal(e.response, value);
    assert.match(e.hint ?? "", /JSON/);
    return true;
  });
  const rec = await recordOf(scope, "nj-1");
  assert.equal(typeof (rec?.response as { pg_idempotency: { unrecorded?: string } }).pg_idempotency.unrecorded, "string");
  await assert.rejects(f({ id: "nj-1" }), (e: unknown) => e instanceof Unrecorded && e.replayed);
});

dbTest("a result holding U+0000 is marked", async () => {
  const scope = scopeFor("nul");
  const runs = new Effects();
  const f = idempotent(async (input: { id: string }) => Promise.resolve(`a\0${String(runs.add(input.id))}`), {
    store,
    scope,
    key: (i) => i.id,
  });
  await assert.rejects(f({ id: "n-1" }), (e: unknown) => e instanceof Unrecorded && e.response === "a\u00001");
  await assert.rejects(f({ id: "n-1" }), (e: unknown) => e instanceof Unrecorded && e.replayed);
  assert.equal(runs.count, 1);
});
