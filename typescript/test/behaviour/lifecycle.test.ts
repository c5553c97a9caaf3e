/**
 * Claim, run once, replay: the wrapper over the store.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";

import {
  configure,
  currentCall,
  idempotent,
  InvalidArgument,
  maybeCurrentCall,
} from "../../src/index.js";
import type { CallContext } from "../../src/index.js";
import { resetDefaultStore } from "../../src/idempotent.js";
import { DSN, dbTest, Effects, one, recordOf, scopeFor, serverKey, fileStore } from "../support/db.js";
import { Forwarder } from "../support/forwarder.js";

const store = fileStore();

dbTest("three calls run once and replay the first result", async () => {
  const scope = scopeFor("three");
  const sent = new Effects();
  const sendEmail = idempotent(
    async function sendEmail(input: { to: string; subject: string }) {
      return { emailId: sent.add(input.to), upstream: currentCall().upstreamKey };
    },
    { store, scope, ttl: 60_000 },
  );
  const first = await sendEmail({ to: "ann@example.com", subject: "Hi" });
  assert.deepEqual(
    [await sendEmail({ to: "ann@example.com", subject: "Hi" }), await sendEmail({ subject: "Hi", to: "ann@example.com" })],
    [first, first],
  );
  assert.equal(sent.count, 1);
  const other = await sendEmail({ to: "bob@example.com", subject: "Hi" });
  assert.equal(other.emailId, 2);
  // The server derived the key (hashInput) from the input: the same as Python's for
  // send_email(to="ann@example.com", subject="Hi").
  const key = await serverKey({ to: "ann@example.com", subject: "Hi" });
  const rec = await recordOf(scope, key);
  assert.equal(rec?.state, "succeeded");
  assert.deepEqual(rec.response, first);
  assert.equal(first.upstream, rec.upstream_key);
});

dbTest("the wrapper keeps the function's name, length and type", async () => {
  async function send(to: string, subject = "Hi"): Promise<string> {
    return Promise.resolve(`${to}:${subject}`);
  }
  const wrapped: typeof send = idempotent(send, { store, scope: scopeFor("name") });
  assert.equal(wrapped.name, "send");
  assert.equal(wrapped.length, send.length);
  assert.equal(await wrapped("ann"), "ann:Hi");
});

dbTest("a function of several parameters has the array of its arguments as its input", async () => {
  const scope = scopeFor("several");
  const sent = new Effects();
  const send = idempotent(
    async (_to: string, _subject: string) => {
      const c = currentCall();
      sent.add(c.input);
      return c.key;
    },
    { store, scope },
  );
  const key = await send("ann", "Hi");
  assert.equal(await send("ann", "Hi"), key);
  assert.deepEqual(sent.runs, [["ann", "Hi"]]);
  assert.equal(key, await serverKey(["ann", "Hi"]));
  assert.notEqual(await send("ann", "Bye"), key);
});

dbTest("arguments past a one-parameter function's input are not part of it", async () => {
  const scope = scopeFor("context-arg");
  const sent = new Effects();
  // A framework passes a tool its input, then a context of its own (a per-turn call id).
  const tool = idempotent(async (input: { to: string }) => sent.add(input.to), { store, scope });
  const call = tool as (input: { to: string }, ctx: { toolCallId: string }) => Promise<number>;
  assert.equal(await call({ to: "ann" }, { toolCallId: "call_1" }), 1);
  assert.equal(await call({ to: "ann" }, { toolCallId: "call_2" }), 1);
  assert.equal(sent.count, 1);
});

dbTest("a function of no parameters has {} as its input", async () => {
  const scope = scopeFor("none");
  const seen: CallContext[] = [];
  const tick = idempotent(
    async () => {
      seen.push(currentCall());
      return seen.length;
    },
    { store, scope },
  );
  assert.equal(await tick(), 1);
  assert.equal(await tick(), 1);
  const [c] = seen;
  assert.ok(c !== undefined);
  assert.deepEqual(c.input, {});
  assert.equal(c.key, await serverKey({}));
});

dbTest("another scope is another call", async () => {
  const scope = scopeFor("scopes");
  const sent = new Effects();
  const a = idempotent(async (x: number) => sent.add(x), { store, scope: `${scope}-a` });
  const b = idempotent(async (x: number) => sent.add(x), { store, scope: `${scope}-b` });
  assert.deepEqual([await a(1), await b(1), await a(1), await b(1)], [1, 2, 1, 2]);
});

dbTest("the scope defaults to the function's name", async () => {
  const key = `k-${scopeFor("default")}`;
  const tsScopeDefaultName = idempotent(
    async function ts_scope_default_name(input: { id: string }) {
      return Promise.resolve(input.id.length);
    },
    { store, key: (i) => i.id },
  );
  assert.equal(await tsScopeDefaultName({ id: key }), key.length);
  assert.notEqual(await recordOf("ts_scope_default_name", key), undefined);
  await one("SELECT idem_forget('ts_scope_default_name', $1)", [key]);
});

test("an anonymous function without a scope is refused, saying to give one", () => {
  assert.throws(
    () => idempotent(async (x: number) => Promise.resolve(x)),
    (e: unknown) => e instanceof InvalidArgument && /scope/.test(`${e.message} ${e.hint ?? ""}`),
  );
});

dbTest("the context is the call's", async () => {
  const scope = scopeFor("context");
  const seen: CallContext[] = [];
  const tool = idempotent(
    async (input: { x: number }) => {
      const c = currentCall();
      seen.push(c);
      c.lease.ensure();
      await Promise.resolve();
      assert.equal(currentCall(), c, "kept across awaits");
      return input.x;
    },
    { store, scope, lease: 30_000 },
  );
  await Promise.all([tool({ x: 1 }), tool({ x: 2 })]);
  assert.equal(seen.length, 2);
  const c = seen.find((s) => (s.input as { x: number }).x === 1);
  assert.ok(c !== undefined);
  assert.deepEqual([c.scope, c.attempt, c.recovered, c.lease.state, c.lease.signal.aborted], [scope, 1, false, "held", false]);
  assert.ok(typeof c.fence === "number" && c.key.length === 64);
  assert.deepEqual(c.input, { x: 1 });
  assert.throws(() => currentCall(), /currentCall\(\) is available inside a function/);
  assert.equal(maybeCurrentCall(), undefined);
});

dbTest("no wrapper, no protection; strategy none runs every time", async () => {
  const scope = scopeFor("none-strategy");
  const sent = new Effects();
  const plain = async (x: number): Promise<number> => Promise.resolve(sent.add(x));
  const unprotected = idempotent(plain, { store, scope, strategy: "none" });
  assert.deepEqual([await plain(1), await plain(1), await unprotected(1), await unprotected(1)], [1, 2, 3, 4]);
});

dbTest("uuid keys are fresh per call and reach the function", async () => {
  const scope = scopeFor("uuid");
  const keys: string[] = [];
  const callUpstream = idempotent(
    async () => {
      const c = currentCall();
      keys.push(c.upstreamKey);
      assert.deepEqual([c.fence, c.attempt, c.key], [null, 1, c.upstreamKey]);
      return Promise.resolve(c.upstreamKey);
    },
    { store, scope, strategy: "uuid" },
  );
  assert.notEqual(await callUpstream(), await callUpstream());
  assert.equal(new Set(keys).size, 2);
  const n = await one<{ n: string }>("SELECT count(*) AS n FROM idem_metrics() WHERE scope = $1", [scope]);
  assert.equal(n?.n, "0", "nothing deduplicated here: no record");
});

test("without a store the error says how to configure", async () => {
  await resetDefaultStore();
  const f = idempotent(async (x: number) => Promise.resolve(x), { scope: "ts-no-store" });
  await assert.rejects(f(1), (e: unknown) => e instanceof InvalidArgument && /configure/.test(e.hint ?? ""));
});

dbTest("configure serves every function without a store of its own", async () => {
  const scope = scopeFor("configure");
  const sent = new Effects();
  configure(DSN);
  try {
    const f = idempotent(async (x: number) => Promise.resolve(sent.add(x)), { scope });
    const g = idempotent(async (x: number) => Promise.resolve(sent.add(x)), { scope });
    assert.equal(await f(1), 1);
    assert.equal(await g(1), 1, "the same call from another function of the scope replays");
    assert.equal(sent.count, 1);
    await resetDefaultStore(); // closes the pool opened for the connection string
    configure(store);
    assert.equal(await f(1), 1);
    assert.equal(sent.count, 1);
  } finally {
    await resetDefaultStore();
  }
});

dbTest("a connection string given as store opens one pool", async () => {
  const scope = scopeFor("conninfo");
  const link = await Forwarder.open(DSN);
  try {
    const f = idempotent(async (x: number) => Promise.resolve(x), { store: link.dsn, scope });
    for (let i = 0; i < 10; i++) assert.equal(await f(i), i);
    // One pool, of a connection or two as it warms up; a pool per call would open ten.
    assert.ok(link.accepted >= 1 && link.accepted <= 2, String(link.accepted));
  } finally {
    await link.close();
  }
});

dbTest("a replay gives back the stored JSON value", async () => {
  const scope = scopeFor("json");
  const f = idempotent(
    async (id: string) => Promise.resolve({ id, at: new Date(0), tags: new Set(["a"]), n: 1.5, none: undefined }),
    { store, scope },
  );
  const first = await f("x");
  assert.ok(first.at instanceof Date, "the first call gets the function's own value");
  assert.deepEqual(await f("x"), { id: "x", at: "1970-01-01T00:00:00.000Z", tags: ["a"], n: 1.5 });
});

dbTest("a script ends when its calls are done, without closing anything", async () => {
  const index = new URL("../../src/index.js", import.meta.url).href;
  const script = `
    import { configure, idempotent } from ${JSON.stringify(index)};
    // Idle connections kept a minute: only the pool's allowExitOnIdle lets the script end.
    configure(process.argv[1], { poolOptions: { idleTimeoutMillis: 60000 } });
    const f = idempotent(async function tsScriptEnds(input) { return input.n; },
                         { scope: process.argv[2], lease: 60000 });
    for (let n = 0; n < 3; n++) if ((await f({ n })) !== n) process.exit(3);
    console.log("ok");
  `;
  const started = Date.now();
  const child = spawn(process.execPath, ["--input-type=module", "-e", script, DSN, scopeFor("script")], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (b: Buffer) => (output += b.toString()));
  child.stderr.on("data", (b: Buffer) => (output += b.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
  assert.equal(code, 0, output);
  assert.equal(output.trim(), "ok");
  // The heartbeat's timer (a lease of a minute) and the pool's idle connections let it go.
  assert.ok(Date.now() - started < 30_000, `the script took ${Date.now() - started} ms to end`);
});
