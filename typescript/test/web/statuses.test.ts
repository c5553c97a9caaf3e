/**
 * A status other than 2xx, as the Rust client's web executor and the Python package treat
 * it: a StatusError; worth retrying for a 5xx, a 429 and a keyed 409, with the provider's
 * Retry-After; released (the retry is sent again, with a new record uuid) unless failures
 * are remembered (then replayed as the same status and body, the provider not called); a
 * 409 to the record's key is left to lapse (the provider still runs it).
 */

import assert from "node:assert/strict";

import { Actions, callInfo, InProgress, StatusError } from "../../src/index.js";
import { dbTest, fileStore } from "../support/db.js";
import { Upstream } from "../support/upstream.js";
import { newPath, webRecord } from "../support/web.js";

const store = fileStore();
const upstream = await Upstream.start();

async function statusError(call: Promise<Response>): Promise<StatusError> {
  try {
    await call;
  } catch (e) {
    assert.ok(e instanceof StatusError, `a StatusError, not ${String(e)}`);
    return e;
  }
  assert.fail("the call did not fail");
}

dbTest("a 4xx is not worth retrying, and not remembered", async () => {
  const path = newPath("422");
  upstream.script(path, { status: 422, body: { error: "bad address" } });
  const api = new Actions({ store, baseUrl: upstream.url });
  const failed = await statusError(api.post(path, { json: { to: "x" } }));
  assert.equal(failed.status, 422);
  assert.equal(failed.response.status, 422);
  assert.deepEqual(await failed.response.json(), { error: "bad address" });
  assert.deepEqual([failed.retryable, failed.retryAfterMs, failed.replayed], [false, undefined, false]);
  const info = callInfo(failed.response);
  assert.ok(info !== undefined);
  assert.equal(await webRecord(info.scope, info.key), undefined, "released, not remembered");

  assert.equal((await api.post(path, { json: { to: "x" } })).status, 201);
  const [first, second] = upstream.seen(path);
  assert.ok(first?.key !== undefined && second?.key !== undefined);
  assert.notEqual(first.key, second.key, "a released call's retry is a new claim: a new record uuid");
});

dbTest("a 5xx is worth retrying after its Retry-After", async () => {
  const path = newPath("503");
  upstream.script(path, { status: 503, body: { error: "busy" }, headers: { "retry-after": "7" } });
  const api = new Actions({ store, baseUrl: upstream.url });
  const failed = await statusError(api.post(path, { json: {} }));
  assert.deepEqual([failed.retryable, failed.retryAfterMs], [true, 7000]);
  assert.match(failed.message, /503/);
  assert.equal((await api.post(path, { json: {} })).status, 201);
  assert.equal(upstream.seen(path).length, 2);
});

dbTest("a 429 takes an HTTP date; advice on an answer not worth retrying is ignored", async () => {
  const path = newPath("429");
  upstream.script(
    path,
    { status: 429, headers: { "retry-after": "Sun, 06 Nov 2094 08:49:37 GMT" } },
    { status: 400, headers: { "retry-after": "5" } },
  );
  const api = new Actions({ store, baseUrl: upstream.url });
  const first = await statusError(api.post(path, { json: {} }));
  assert.ok(first.retryable && (first.retryAfterMs ?? 0) > 365 * 60 * 86_400_000);
  const second = await statusError(api.post(path, { json: {} }));
  assert.deepEqual([second.retryable, second.retryAfterMs], [false, undefined]);
});

dbTest("a remembered failure is replayed without calling the provider", async () => {
  const path = newPath("500");
  upstream.script(path, { status: 500, body: { error: "boom" } });
  const api = new Actions({ store, baseUrl: upstream.url, cacheFailures: true });
  const first = await statusError(api.post(path, { json: {} }));
  assert.deepEqual([first.retryable, first.replayed], [true, false]);
  const again = await statusError(api.post(path, { json: {} }));
  assert.deepEqual([again.replayed, again.retryable, again.response.status], [true, false, 500]);
  assert.deepEqual(await again.response.json(), { error: "boom" });
  assert.equal(callInfo(again.response)?.replayed, true);
  assert.equal(upstream.seen(path).length, 1);
  const info = callInfo(first.response);
  assert.ok(info !== undefined);
  const rec = await webRecord(info.scope, info.key);
  assert.equal(rec?.["state"], "failed");
  assert.deepEqual(rec["response"], { status: 500, body: { error: "boom" } });
});

dbTest("a 409 to the record's key is left to lapse", async () => {
  const path = newPath("409");
  upstream.script(path, { status: 409, body: { error: "in use" } });
  const api = new Actions({ store, baseUrl: upstream.url, lease: 30_000 });
  const failed = await statusError(api.post(path, { json: {} }));
  assert.equal(failed.retryable, true, "the provider still runs the key: worth retrying");
  const info = callInfo(failed.response);
  assert.ok(info !== undefined);
  assert.equal((await webRecord(info.scope, info.key))?.["state"], "in_progress", "neither remembered nor released");
  await assert.rejects(api.post(path, { json: {} }), InProgress);
  assert.equal(upstream.seen(path).length, 1);
});

dbTest("a 409 to the call's key is released", async () => {
  const path = newPath("409-call");
  upstream.script(path, { status: 409 });
  const api = new Actions({ store, baseUrl: upstream.url, upstreamKey: "call" });
  const failed = await statusError(api.post(path, { json: {} }));
  assert.equal(failed.retryable, true);
  const info = callInfo(failed.response);
  assert.ok(info !== undefined);
  assert.equal(await webRecord(info.scope, info.key), undefined);
});

dbTest("a 204 is recorded with an empty text body and replays as a 204", async () => {
  const path = newPath("204");
  upstream.script(path, { status: 204 });
  const api = new Actions({ store, baseUrl: upstream.url });
  const first = await api.delete(path, { key: "d-1" });
  const again = await api.delete(path, { key: "d-1" });
  assert.deepEqual([first.status, again.status, await again.text()], [204, 204, ""]);
  assert.equal(upstream.seen(path).length, 1);
  const info = callInfo(first);
  assert.deepEqual((await webRecord(info?.scope ?? "", "d-1"))?.["response"], { status: 204, body: "", text: true });
});
