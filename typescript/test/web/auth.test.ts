/**
 * The caller's credentials (the Actions' headers, the call's) reach the provider, and are
 * neither in the record nor in what names the call: a repeat with another token is the
 * same call.
 */

import assert from "node:assert/strict";

import { Actions, callInfo, InvalidArgument } from "../../src/index.js";
import { dbTest, fileStore } from "../support/db.js";
import { Upstream } from "../support/upstream.js";
import { inputKey, newPath, webRecord } from "../support/web.js";

const store = fileStore();
const upstream = await Upstream.start();

dbTest("credentials reach the server and not the record", async () => {
  const path = newPath("auth");
  const api = new Actions({ store, baseUrl: upstream.url, headers: { authorization: "Bearer secret-client-1" } });
  const first = await api.post(path, {
    json: { to: "ann" },
    headers: { "x-api-key": "secret-call-1", cookie: "session=secret-cookie-1" },
  });
  const seen = upstream.seen(path);
  assert.equal(seen[0]?.headers["authorization"], "Bearer secret-client-1");
  assert.equal(seen[0].headers["x-api-key"], "secret-call-1");
  assert.equal(seen[0].headers["cookie"], "session=secret-cookie-1");

  // A refreshed token, another key and cookie: the same call, replayed.
  const other = new Actions({ store, baseUrl: upstream.url, headers: [["Authorization", "Bearer secret-client-2"]] });
  const again = await other.post(path, {
    json: { to: "ann" },
    headers: new Headers({ "x-api-key": "secret-call-2", cookie: "session=secret-cookie-2" }),
  });
  assert.equal(upstream.seen(path).length, 1);
  assert.deepEqual(await again.json(), await first.json());

  const info = callInfo(first);
  assert.ok(info !== undefined);
  const rec = await webRecord(info.scope, info.key);
  assert.equal(rec?.["state"], "succeeded");
  const whole = JSON.stringify(rec);
  assert.doesNotMatch(whole, /secret/);
  assert.deepEqual(rec["response"], { status: 201, body: { path, n: 1 } });
  // What names the call is the method, the URL and the body: the server's own hash of it.
  assert.equal(info.key, await inputKey("POST", upstream.url + path, { to: "ann" }));
});

dbTest("an Idempotency-Key header is refused before anything is sent", async () => {
  const path = newPath("own-key");
  const api = new Actions({ store, baseUrl: upstream.url });
  await assert.rejects(api.post(path, { json: {}, headers: { "idempotency-key": "mine" } }), (e: unknown) => {
    assert.ok(e instanceof InvalidArgument);
    assert.match(e.hint ?? "", /key/);
    return true;
  });
  await assert.rejects(
    new Actions({ store, baseUrl: upstream.url, headers: { "Idempotency-Key": "mine" } }).get(path),
    InvalidArgument,
  );
  assert.deepEqual(upstream.seen(path), []);
});
