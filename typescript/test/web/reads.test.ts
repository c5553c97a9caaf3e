/**
 * Reads (GET, HEAD, OPTIONS): no Idempotency-Key ever; run every time unless the call gives
 * settings of its own (then a repeat is replayed); the Actions' settings never deduplicate
 * them.
 */

import assert from "node:assert/strict";

import { Actions, callInfo } from "../../src/index.js";
import { dbTest, fileStore } from "../support/db.js";
import { Upstream } from "../support/upstream.js";
import { newPath } from "../support/web.js";

const store = fileStore();
const upstream = await Upstream.start();

dbTest("a GET without settings runs every time, with no key", async () => {
  const api = new Actions({ store, baseUrl: upstream.url, ttl: 86_400_000, cacheFailures: true }); // not for reads
  const path = newPath("get");
  const answers: Response[] = [];
  for (let i = 0; i < 3; i++) answers.push(await api.get(`${path}?q=x`));
  const seen = upstream.seen(path);
  assert.deepEqual(seen.map((s) => s.method), ["GET", "GET", "GET"]);
  assert.deepEqual(seen.map((s) => s.key), [undefined, undefined, undefined]);
  assert.deepEqual(await Promise.all(answers.map(async (a) => ((await a.json()) as { n: number }).n)), [1, 2, 3]);
  assert.ok(answers.every((a) => callInfo(a) === undefined));
  for (const method of ["HEAD", "OPTIONS"]) {
    await api.request(method, path);
    await api.request(method, path);
  }
  assert.deepEqual(upstream.seen(path).map((s) => s.key), Array(7).fill(undefined));
});

dbTest("a GET with settings of its own is replayed, without a key", async () => {
  const api = new Actions({ store, baseUrl: upstream.url });
  const path = newPath("get-ttl");
  const answers: Response[] = [];
  for (let i = 0; i < 3; i++) answers.push(await api.get(`${path}?q=x`, { ttl: 60_000 }));
  const seen = upstream.seen(path);
  assert.equal(seen.length, 1);
  assert.equal(seen[0]?.key, undefined);
  assert.equal(seen[0]?.query, "q=x");
  assert.deepEqual(await Promise.all(answers.map(async (a) => ((await a.json()) as { n: number }).n)), [1, 1, 1]);
  const infos = answers.map((a) => callInfo(a));
  assert.deepEqual(infos.map((i) => i?.replayed), [false, true, true]);
  assert.equal(infos[0]?.upstreamKey, undefined);
});
