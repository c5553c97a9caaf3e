/**
 * A request sent and never answered (the client's timeout) leaves its claim to lapse; the
 * attempt that takes the call over sends the provider the same Idempotency-Key, so that the
 * provider can recognise it. A request that never left is released.
 */

import assert from "node:assert/strict";

import { Actions, callInfo, InProgress, OutcomeUnknown, StatusError } from "../../src/index.js";
import { dbTest, fileStore, Gate, one, until } from "../support/db.js";
import { readTimeout, Upstream } from "../support/upstream.js";
import { inputKey, newPath, untilLapsed, webRecord } from "../support/web.js";

const store = fileStore();
const upstream = await Upstream.start();

const timedOut = (e: unknown): boolean => e instanceof Error && e.name === "TimeoutError";

dbTest("a takeover after a lapsed lease sends the same upstream key", async () => {
  const path = newPath("takeover");
  // The provider holds the first request past the client's timeout.
  const release = new Gate();
  const arrived = new Gate();
  upstream.script(path, { status: 201, body: { id: "em_1" }, hold: release, arrived });
  const api = new Actions({ store, baseUrl: upstream.url, lease: 1_000 });
  try {
    await assert.rejects(api.post(path, { json: { to: "ann" }, signal: readTimeout(arrived, 200) }), timedOut);
  } finally {
    release.open();
  }
  const first = upstream.seen(path)[0];
  assert.ok(first?.key !== undefined);
  const scope = `POST ${upstream.host}${path}`;
  const key = await inputKey("POST", upstream.url + path, { to: "ann" });
  const left = await webRecord(scope, key);
  assert.deepEqual([left?.["state"], left?.["upstream_key"]], ["in_progress", first.key]);

  await untilLapsed(scope, key);
  const taken = await api.post(path, { json: { to: "ann" } });
  const second = upstream.seen(path)[1];
  assert.equal(second?.key, first.key, "the takeover sends the same Idempotency-Key");
  const info = callInfo(taken);
  assert.deepEqual([info?.upstreamKey, info?.replayed], [first.key, false]);
  const rec = await webRecord(scope, key);
  assert.deepEqual([rec?.["state"], rec?.["attempt"], rec?.["upstream_key"]], ["succeeded", 2, first.key]);

  const again = await api.post(path, { json: { to: "ann" } });
  assert.deepEqual(await again.json(), await taken.json());
  assert.equal(upstream.seen(path).length, 2);
});

dbTest("a 409 takeover sends the same key, and is then replayed", async () => {
  const path = newPath("409-takeover");
  upstream.script(path, { status: 409, body: { error: "running" } });
  const api = new Actions({ store, baseUrl: upstream.url, lease: 1_000 });
  const failed = await api.post(path, { json: { n: 1 } }).then(
    () => assert.fail("a 409 is a StatusError"),
    (e: unknown) => e,
  );
  assert.ok(failed instanceof StatusError);
  const info = callInfo(failed.response);
  assert.ok(info !== undefined);
  await untilLapsed(info.scope, info.key);
  await api.post(path, { json: { n: 1 } });
  const [first, second] = upstream.seen(path);
  assert.equal(second?.key, first?.key);
  await api.post(path, { json: { n: 1 } });
  assert.equal(upstream.seen(path).length, 2);
});

dbTest("a takeover can refuse to send again", async () => {
  const path = newPath("refuse");
  const release = new Gate();
  const arrived = new Gate();
  upstream.script(path, { hold: release, arrived });
  const api = new Actions({ store, baseUrl: upstream.url, lease: 1_000, onUnknownOutcome: "refuse" });
  try {
    await assert.rejects(api.post(path, { json: {}, key: "refusing", signal: readTimeout(arrived, 200) }), timedOut);
  } finally {
    release.open();
  }
  await untilLapsed(`POST ${upstream.host}${path}`, "refusing");
  await assert.rejects(api.post(path, { json: {}, key: "refusing" }), OutcomeUnknown);
  assert.equal(upstream.seen(path).length, 1);
});

dbTest("a request that never left (connection refused) is released", async () => {
  // Nobody listens on the port any more: the connection is refused, nothing was sent.
  const gone = await Upstream.start();
  const url = gone.url;
  await gone.stop();
  const path = newPath("refused");
  const api = new Actions({ store });
  await assert.rejects(api.post(url + path, { json: {}, key: "never-sent" }), (e: unknown) => {
    assert.ok(e instanceof TypeError);
    return true;
  });
  assert.equal(await webRecord(`POST ${url.slice("http://".length)}${path}`, "never-sent"), undefined);
});

dbTest("a signal aborted before the request left releases the claim", async () => {
  const path = newPath("aborted");
  const api = new Actions({ store, baseUrl: upstream.url });
  await assert.rejects(api.post(path, { json: {}, key: "k", signal: AbortSignal.abort() }), (e: unknown) => {
    assert.ok(e instanceof Error && e.name === "AbortError");
    return true;
  });
  assert.equal(await webRecord(`POST ${upstream.host}${path}`, "k"), undefined);
  assert.equal(upstream.seen(path).length, 0);
});

dbTest("the heartbeat keeps the lease while the request runs", async () => {
  const path = newPath("heartbeat");
  const release = new Gate();
  const arrived = new Gate();
  upstream.script(path, { hold: release, arrived });
  // A lease of 3 s, renewed every second: a heartbeat late by up to 2 s on a loaded machine
  // still keeps it.
  const api = new Actions({ store, baseUrl: upstream.url, lease: 3_000 });
  const first = api.post(path, { json: { n: 1 } });
  const scope = `POST ${upstream.host}${path}`;
  const key = await inputKey("POST", upstream.url + path, { n: 1 });
  try {
    await arrived.promise;
    // Past the first lease's end (as the server's clock says), the call is still held.
    let held: { state: string; live: boolean } | undefined;
    await until(async () => {
      held = await one<{ state: string; live: boolean }>(
        "SELECT state, lease_until > clock_timestamp() AS live FROM idem_lookup($1, $2) " +
          "WHERE clock_timestamp() > created_at + interval '4 s'",
        [scope, key],
      );
      return held !== undefined;
    }, "the server's clock passing the first lease");
    assert.deepEqual(held, { state: "in_progress", live: true });
    await assert.rejects(api.post(path, { json: { n: 1 } }), InProgress);
  } finally {
    release.open();
  }
  assert.equal((await first).status, 201);
  const rec = await webRecord(scope, key);
  assert.deepEqual([rec?.["state"], rec?.["attempt"]], ["succeeded", 1]);
  assert.equal(upstream.seen(path).length, 1);
});
