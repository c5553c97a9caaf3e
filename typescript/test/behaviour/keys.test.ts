/**
 * Which call a key names: hashInput, explicit (a key function, named fields, the receiver's
 * idempotencyKeyFor), the fingerprint under explicit, and the members refused.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { currentCall, idempotent, InvalidArgument, KEY_WARNING, Mismatch } from "../../src/index.js";
import type { IdempotentOptions } from "../../src/index.js";
import { dbTest, Effects, recordOf, scopeFor, fileStore } from "../support/db.js";

const store = fileStore();

dbTest("a key function names the call", async () => {
  const scope = scopeFor("key-fn");
  const made = new Effects();
  const createIssue = idempotent(
    async (input: { title: string; body: string }) => Promise.resolve(made.add(input.title)),
    { store, scope, key: (i) => i.title.toLowerCase() },
  );
  // Same title, same issue: a body edit replays (no fingerprint under explicit).
  assert.equal(await createIssue({ title: "Crash", body: "first" }), 1);
  assert.equal(await createIssue({ title: "crash", body: "edited" }), 1);
  assert.equal(made.count, 1);
  assert.notEqual(await recordOf(scope, "crash"), undefined);
});

dbTest("named fields are dotted paths", async () => {
  const scope = scopeFor("fields");
  const charged = new Effects();
  type Charge = { order: { id: string; lines: number[] }; currency: string };
  const charge = idempotent(async (input: Charge) => Promise.resolve(charged.add(input.order.id)), {
    store,
    scope,
    keyFields: ["order.id", "currency"],
  });
  assert.equal(await charge({ order: { id: "o-1", lines: [1] }, currency: "EUR" }), 1);
  assert.equal(await charge({ order: { id: "o-1", lines: [2] }, currency: "EUR" }), 1);
  assert.equal(await charge({ order: { id: "o-1", lines: [1] }, currency: "USD" }), 2);
  assert.equal((await recordOf(scope, "o-1/USD"))?.state, "succeeded");
  const nope = idempotent(async (input: Charge) => Promise.resolve(input.currency), {
    store,
    scope,
    keyFields: ["order.nope"],
  });
  await assert.rejects(nope({ order: { id: "o-2", lines: [] }, currency: "EUR" }), /no field "order\.nope"/);
});

dbTest("array indexes are fields too, of an input of several arguments", async () => {
  const scope = scopeFor("index-fields");
  const sent = new Effects();
  const send = idempotent(async (to: { email: string }, subject: string) => Promise.resolve(sent.add([to, subject])), {
    store,
    scope,
    keyFields: "0.email",
  });
  assert.equal(await send({ email: "ann@example.com" }, "Hi"), 1);
  assert.equal(await send({ email: "ann@example.com" }, "Bye"), 1);
  assert.equal(sent.count, 1);
  assert.notEqual(await recordOf(scope, "ann@example.com"), undefined);
});

dbTest("one key field names the call by its value, as JSON unless it is text", async () => {
  const scope = scopeFor("one-field");
  const keys: string[] = [];
  const charge = idempotent(
    async (input: { orderId: number; note?: string }) => {
      keys.push(currentCall().key);
      return Promise.resolve(keys.length + input.orderId * 0);
    },
    { store, scope, keyFields: ["orderId"] },
  );
  const refund = idempotent(
    async (input: { orderId: string }) => {
      keys.push(currentCall().key);
      return Promise.resolve(keys.length + input.orderId.length * 0);
    },
    { store, scope: `${scope}_text`, keyFields: ["orderId"] },
  );
  assert.equal(await charge({ orderId: 7 }), 1);
  assert.equal(await charge({ orderId: 7, note: "again" }), 1);
  assert.equal(await charge({ orderId: 8 }), 2);
  assert.equal(await refund({ orderId: "7" }), 3);
  assert.equal(await refund({ orderId: "7" }), 3);
  assert.deepEqual(keys, ["7", "8", "7"]);
});

for (const key of ["", "   ", null, 42]) {
  dbTest(`a blank key is an error and runs nothing: ${JSON.stringify(key)}`, async () => {
    const scope = scopeFor("blank-key");
    const ran = new Effects();
    const f = idempotent(async (input: { x: number }) => Promise.resolve(ran.add(input.x)), {
      store,
      scope,
      key: () => key as string,
    });
    await assert.rejects(f({ x: 1 }), (e: unknown) => {
      assert.ok(e instanceof InvalidArgument);
      assert.equal(e.sqlstate, "22023");
      assert.ok(e.hint && e.detail);
      return true;
    });
    assert.equal(ran.count, 0);
  });
}

dbTest("the fingerprint under explicit rejects another body", async () => {
  const scope = scopeFor("fingerprint");
  const made = new Effects();
  const createIssue = idempotent(
    async (input: { title: string; body: string; labels?: string[] }) => Promise.resolve(made.add(input.title)),
    { store, scope, keyFields: "title", fingerprint: ["body"] },
  );
  assert.equal(await createIssue({ title: "a", body: "x" }), 1);
  assert.equal(await createIssue({ title: "a", body: "x", labels: ["bug"] }), 1);
  await assert.rejects(createIssue({ title: "a", body: "y" }), (e: unknown) => {
    assert.ok(e instanceof Mismatch);
    assert.equal(e.sqlstate, "IK001");
    assert.ok(e.detail);
    return true;
  });
  assert.equal(made.count, 1);
  const whole = idempotent(async (input: { title: string; body: string }) => Promise.resolve(input.body), {
    store,
    scope: `${scope}-input`,
    keyFields: "title",
    fingerprint: "input",
  });
  assert.equal(await whole({ title: "a", body: "x" }), "x");
  await assert.rejects(whole({ title: "a", body: "y" }), Mismatch);
});

dbTest("explicit without a key says what to add", async () => {
  const f = idempotent(async (input: { x: number }) => Promise.resolve(input.x), {
    store,
    scope: scopeFor("no-key"),
    strategy: "explicit",
  });
  await assert.rejects(f({ x: 1 }), (e: unknown) => e instanceof InvalidArgument && /idempotencyKeyFor/.test(e.hint ?? ""));
});

test("members that cannot work are refused where the function is wrapped", () => {
  const f = async (input: { x: number }): Promise<number> => Promise.resolve(input.x);
  const refused: [IdempotentOptions<{ x: number }>, RegExp][] = [
    [{ tll: 60 } as IdempotentOptions<{ x: number }>, /unknown member/],
    [{ onCacheHit: "sometimes" as "failFast" }, /onCacheHit must be one of/],
    [{ ttl: "1 day" as unknown as number }, /ttl must be a number of milliseconds/],
    [{ fingerprint: "input" }, /explicit/],
    [{ strategy: "uuid", keyFields: ["x"] }, /explicit/],
    [{ key: (i) => String(i.x), keyFields: ["x"] }, /not both/],
    [{ keyFields: [] }, /dotted paths/],
    [{ key: "x" as unknown as () => string }, /key must be a function/],
    [{ onUnknownOutcome: "sometimes" as "refuse" }, /onUnknownOutcome/],
    [{ scope: " " }, /scope/],
  ];
  for (const [options, message] of refused) {
    assert.throws(
      () => idempotent(f, { scope: "s", ...options }),
      (e: unknown) => e instanceof InvalidArgument && message.test(e.message),
      JSON.stringify(options),
    );
  }
});

dbTest("an explicit key that looks like a per-turn tool-call id is warned about, once per scope", async () => {
  const scope = scopeFor("tool-call-id");
  const seen: Error[] = [];
  const listener = (w: Error): void => {
    if (w.name === KEY_WARNING) seen.push(w);
  };
  process.on("warning", listener);
  try {
    const send = idempotent(async (input: { callId: string }) => Promise.resolve(input.callId), {
      store,
      scope,
      keyFields: ["callId"],
    });
    await send({ callId: "call_Ab12Cd34Ef56Gh78Ij90Kl12" });
    await send({ callId: "call_Zz98Yy76Xx54Ww32Vv10Uu98" });
    await send({ callId: "order-42" });
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    process.off("warning", listener);
  }
  assert.equal(seen.length, 1);
  assert.match(seen[0]?.message ?? "", /call_Ab12Cd34Ef56Gh78Ij90Kl12.*the key fields \["callId"\].*agentKey/s);
});
