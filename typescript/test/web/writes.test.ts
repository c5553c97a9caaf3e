/**
 * Requests that change something: sent once, with one Idempotency-Key, however often the
 * call is made; replayed from the record (status and body) afterwards.
 */

import assert from "node:assert/strict";

import { Actions, callInfo } from "../../src/index.js";
import type { CallInfo } from "../../src/index.js";
import { dbTest, fileStore } from "../support/db.js";
import { Upstream } from "../support/upstream.js";
import { inputKey, newPath, webRecord } from "../support/web.js";

const store = fileStore();
const upstream = await Upstream.start();
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

dbTest("three posts send one request with one key", async () => {
  const api = new Actions({ store, baseUrl: upstream.url });
  const path = newPath("three");
  const body = { to: "ann@example.com", subject: "Hi" };
  const answers: Response[] = [];
  for (let i = 0; i < 3; i++) answers.push(await api.post(path, { json: body, ttl: 86_400_000 }));

  const seen = upstream.seen(path);
  assert.equal(seen.length, 1, "three calls, one request");
  assert.equal(seen[0]?.method, "POST");
  assert.deepEqual(JSON.parse(seen[0].body.toString()), body);
  assert.equal(seen[0].headers["content-type"], "application/json");
  const sent = seen[0].key ?? "";
  assert.match(sent, UUID, "the record's uuid goes upstream");

  // The first answer as it came; the repeats rebuilt from the record: status and body.
  assert.deepEqual(answers.map((a) => a.status), [201, 201, 201]);
  assert.deepEqual(await Promise.all(answers.map((a) => a.json())), Array(3).fill({ path, n: 1 }));
  const infos = answers.map((a) => callInfo(a)).filter((i): i is CallInfo => i !== undefined);
  assert.deepEqual(infos.map((i) => i.replayed), [false, true, true]);
  assert.equal(new Set(infos.map((i) => i.key)).size, 1, "a replay names its record too");
  const first = infos[0];
  assert.equal(first?.upstreamKey, sent);
  assert.equal(infos[1]?.upstreamKey, undefined, "a replay sent nothing");
  assert.equal(first.scope, `POST ${upstream.host}${path}`);
  // The key is the server's hash of the method, the URL and the body: the Python package's.
  assert.equal(first.key, await inputKey("POST", upstream.url + path, body));

  const rec = await webRecord(first.scope, first.key);
  assert.equal(rec?.["state"], "succeeded");
  assert.equal(rec["attempt"], 1);
  assert.equal(rec["upstream_key"], sent);
  assert.deepEqual(rec["response"], { status: 201, body: { path, n: 1 } });
});

dbTest("the key is the request, not its spelling", async () => {
  const api = new Actions({ store, baseUrl: upstream.url });
  const path = newPath("spelling");
  await api.post(path, { json: { a: 1, b: [1, 2] } });
  await api.post(path, { json: { b: [1, 2], a: 1 } }); // the same JSON value
  await api.post(path, { json: { a: 2, b: [1, 2] } }); // another body: another call
  await api.post(`${path}?v=2`, { json: { a: 1, b: [1, 2] } }); // another URL
  const seen = upstream.seen(path);
  assert.deepEqual(
    seen.map((s) => JSON.parse(s.body.toString()) as unknown),
    [{ a: 1, b: [1, 2] }, { a: 2, b: [1, 2] }, { a: 1, b: [1, 2] }],
  );
  assert.equal(new Set(seen.map((s) => s.key)).size, 3);
});

dbTest("PUT, PATCH and DELETE carry the key too", async () => {
  const api = new Actions({ store, baseUrl: upstream.url });
  const path = newPath("methods");
  await api.put(path, { body: "x" });
  await api.patch(path, { body: new TextEncoder().encode("x") });
  await api.delete(path, { body: "x" });
  await api.put(path, { body: "x" });
  const seen = upstream.seen(path);
  assert.deepEqual(seen.map((s) => s.method), ["PUT", "PATCH", "DELETE"]);
  assert.ok(seen.every((s) => s.key !== undefined));
  assert.equal(new Set(seen.map((s) => s.key)).size, 3);
});

dbTest("a text answer is recorded as text and replays as text", async () => {
  const path = newPath("text");
  upstream.script(path, { status: 202, body: "queued" });
  const api = new Actions({ store, baseUrl: upstream.url });
  const first = await api.post(path, { body: new URLSearchParams({ a: "1" }) });
  const again = await api.post(path, { body: new URLSearchParams({ a: "1" }) });
  assert.deepEqual([first.status, await first.text()], [202, "queued"]);
  assert.deepEqual([again.status, await again.text()], [202, "queued"]);
  assert.equal(upstream.seen(path).length, 1);
  const info = callInfo(first);
  assert.ok(info !== undefined);
  assert.deepEqual((await webRecord(info.scope, info.key))?.["response"], { status: 202, body: "queued", text: true });
});

dbTest("a record in the Python package's shape replays here, and one that is not is a 200", async () => {
  const api = new Actions({ store, baseUrl: upstream.url });
  const path = newPath("shared");
  const scope = `POST ${upstream.host}${path}`;
  // Records another client wrote: the Python package's (text), and a bare value (Rust's).
  for (const [key, response] of [
    ["py", { status: 202, body: '"queued"', text: true }],
    ["rust", { id: "em_1" }],
  ] as const) {
    const claim = await store.begin(scope, key);
    assert.ok(claim.fence !== null);
    await store.complete(scope, key, claim.fence, response);
  }
  const py = await api.post(path, { json: {}, key: "py" });
  assert.deepEqual([py.status, await py.text(), py.headers.get("content-type")], [202, '"queued"', "text/plain; charset=utf-8"]);
  const rust = await api.post(path, { json: {}, key: "rust" });
  assert.deepEqual([rust.status, await rust.json()], [200, { id: "em_1" }]);
  assert.equal(upstream.seen(path).length, 0);
});

dbTest("an explicit key names the call", async () => {
  const api = new Actions({ store, baseUrl: upstream.url });
  const path = newPath("explicit");
  const order = `order-${Date.now().toString(36)}`;
  const first = await api.post(path, { json: { n: 1 }, key: order });
  const again = await api.post(path, { json: { n: 2 }, key: order }); // the key alone names it
  const info = callInfo(first);
  assert.equal(info?.key, order);
  assert.deepEqual(await again.json(), await first.json());
  assert.equal(upstream.seen(path).length, 1);
  assert.equal((await webRecord(info.scope, order))?.["upstream_key"], upstream.seen(path)[0]?.key);
  // keyFields name it by what the call sends: here the body's order id.
  const byField = newPath("fields");
  await api.post(byField, { json: { order: "o-1", n: 1 }, keyFields: "json.order" });
  const same = await api.post(byField, { json: { order: "o-1", n: 2 }, keyFields: "json.order" });
  assert.equal(callInfo(same)?.key, "o-1");
  assert.equal(upstream.seen(byField).length, 1);
});

dbTest('upstreamKey "call" sends the call\'s key', async () => {
  const api = new Actions({ store, baseUrl: upstream.url, upstreamKey: "call" });
  const path = newPath("call-key");
  const order = `order-${Date.now().toString(36)}`;
  await api.post(path, { json: {}, key: order });
  await api.post(`${path}/hashed`, { json: { x: 1 } });
  assert.equal(upstream.seen(path)[0]?.key, order);
  // Keyed by the input's hash: the server's key (64 hex digits) goes upstream.
  assert.match(upstream.seen(`${path}/hashed`)[0]?.key ?? "", /^[0-9a-f]{64}$/);
});

dbTest("two endpoints with one key send two keys", async () => {
  const api = new Actions({ store, baseUrl: upstream.url });
  const path = newPath("endpoints");
  await api.post(`${path}/create`, { json: {}, key: "o-1" });
  await api.delete(`${path}/cancel`, { key: "o-1" });
  const [create, cancel] = [upstream.seen(`${path}/create`), upstream.seen(`${path}/cancel`)];
  assert.deepEqual([create.length, cancel.length], [1, 1], "each endpoint is a scope of its own");
  assert.notEqual(create[0]?.key, cancel[0]?.key);
});

dbTest("a method it does not know needs sideEffect", async () => {
  const api = new Actions({ store, baseUrl: upstream.url });
  const path = newPath("purge");
  await assert.rejects(api.request("PURGE", path), /sideEffect: true/);
  await api.request("PURGE", path, { sideEffect: true });
  await api.request("PURGE", path, { sideEffect: true });
  await api.request("PURGE", path, { sideEffect: false });
  const seen = upstream.seen(path);
  assert.equal(seen.length, 2);
  assert.ok(seen[0]?.key !== undefined);
  assert.equal(seen[1]?.key, undefined);
});

dbTest('strategy "uuid" sends a fresh key every time and records nothing', async () => {
  const api = new Actions({ store, baseUrl: upstream.url, strategy: "uuid" });
  const path = newPath("uuid");
  const first = await api.post(path, { json: {} });
  await api.post(path, { json: {} });
  const seen = upstream.seen(path);
  assert.equal(seen.length, 2);
  assert.notEqual(seen[0]?.key, seen[1]?.key);
  const info = callInfo(first);
  assert.deepEqual([info?.key, info?.upstreamKey, info?.replayed], [seen[0]?.key, seen[0]?.key, false]);
  assert.equal(await webRecord(info?.scope ?? "", info?.key ?? ""), undefined);
});
