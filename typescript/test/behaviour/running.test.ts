/**
 * While a call runs: duplicates are told it runs (or wait for its result), the heartbeat
 * keeps its lease past the lease's length, and a lost lease reaches the function.
 */

import assert from "node:assert/strict";

import { currentCall, idempotent, InProgress, LeaseLost, Store } from "../../src/index.js";
import {
  DSN,
  dbTest,
  dsnWith,
  Effects,
  Gate,
  one,
  recordOf,
  scopeFor,
  until,
  untilServerPasses,
  fileStore,
} from "../support/db.js";

const store = fileStore();

/** The duplicate's session is inside idem_begin (seen by the server). */
async function untilWaitingInBegin(applicationName: string): Promise<void> {
  await until(async () => {
    const row = await one<{ n: string }>(
      "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 " +
        "AND state = 'active' AND query LIKE '%idem_begin%'",
      [applicationName],
    );
    return row?.n !== "0";
  }, "the duplicate waiting inside idem_begin");
}

dbTest("a duplicate is told it runs, and with wait gets the result", async () => {
  const scope = scopeFor("duplicate");
  const started = new Gate();
  const finish = new Gate();
  const sent = new Effects();
  const body = async (input: { to: string }): Promise<{ emailId: number }> => {
    started.open();
    await finish.promise;
    return { emailId: sent.add(input.to) };
  };
  const send = idempotent(body, { store, scope });
  const other = new Store(dsnWith("application_name", "ts_duplicate")); // another process, as it were
  try {
    const sendElsewhere = idempotent(body, { store: other, scope });
    const sendWaiting = idempotent(body, { store: other, scope, wait: 30_000 });
    const first = send({ to: "ann" });
    await started.promise;
    await assert.rejects(sendElsewhere({ to: "ann" }), (e: unknown) => {
      assert.ok(e instanceof InProgress);
      assert.ok(e.retryAfterMs !== undefined && e.retryAfterMs > 0, String(e.retryAfterMs));
      assert.match(e.hint ?? "", /wait/);
      return true;
    });
    const waited = sendWaiting({ to: "ann" });
    await untilWaitingInBegin("ts_duplicate");
    finish.open();
    assert.deepEqual(await first, { emailId: 1 });
    assert.deepEqual(await waited, { emailId: 1 });
    assert.equal(sent.count, 1);
  } finally {
    finish.open();
    await other.close();
  }
});

dbTest("a retry in the same process joins its holder", async () => {
  const scope = scopeFor("join");
  const started = new Gate();
  const finish = new Gate();
  const sent = new Effects();
  const body = async (input: { to: string }): Promise<{ emailId: number }> => {
    started.open();
    await finish.promise;
    return { emailId: sent.add(input.to) };
  };
  const send = idempotent(body, { store, scope, wait: 30_000 });
  const sendNow = idempotent(body, { store, scope });
  const first = send({ to: "ann" });
  await started.promise;
  // Answered by the holder in this process, not by the store.
  await assert.rejects(sendNow({ to: "ann" }), (e: unknown) => e instanceof InProgress && /in this process/.test(e.message));
  const joined = send({ to: "ann" });
  finish.open();
  assert.deepEqual(await first, { emailId: 1 });
  assert.deepEqual(await joined, { emailId: 1 });
  assert.equal(sent.count, 1);
});

dbTest("concurrent calls of one input run once", async () => {
  const scope = scopeFor("concurrent");
  const sent = new Effects();
  const entered = new Gate();
  const release = new Gate();
  const send = idempotent(
    async (input: { to: string }) => {
      entered.open();
      await release.promise;
      return { emailId: sent.add(input.to) };
    },
    { store, scope, wait: 30_000 },
  );
  const calls = Array.from({ length: 5 }, () => send({ to: "ann" }));
  await entered.promise; // one holds the call; the others join it or wait in the database
  release.open();
  assert.deepEqual(await Promise.all(calls), Array.from({ length: 5 }, () => ({ emailId: 1 })));
  assert.equal(sent.count, 1);
});

dbTest("the heartbeat keeps the lease past its length", async () => {
  const scope = scopeFor("heartbeat");
  const sent = new Effects();
  const other = new Store(DSN);
  // A lease of 3 s, renewed every second: a beat late by up to 2 s on a loaded machine
  // still keeps it.
  const slow = idempotent(
    async (input: { id: string }) => {
      const rec = await recordOf(scope, input.id);
      assert.ok(rec?.lease_until);
      // Run well past the first lease's end, as the server tells time.
      await untilServerPasses(new Date(rec.lease_until.getTime() + 1_000), "the first lease and a second");
      // Another process is still told it runs: the lease was extended, not lapsed.
      assert.equal((await other.begin(scope, input.id)).outcome, "inProgress");
      assert.equal(currentCall().lease.state, "held");
      assert.equal(currentCall().lease.signal.aborted, false);
      return { done: sent.add(input.id) };
    },
    { store, scope, key: (i) => i.id, lease: 3_000 },
  );
  try {
    assert.deepEqual(await slow({ id: "s-1" }), { done: 1 });
    const rec = await recordOf(scope, "s-1");
    assert.equal(rec?.state, "succeeded");
  } finally {
    await other.close();
  }
});

dbTest("a lost lease reaches the function, and nothing is recorded", async () => {
  const scope = scopeFor("lost");
  const effects = new Effects();
  const charge = idempotent(
    async (input: { id: string; check: boolean }) => {
      const lease = currentCall().lease;
      const aborted = new Promise<unknown>((resolve) => {
        lease.signal.addEventListener("abort", () => {
          resolve(lease.signal.reason);
        });
      });
      // An operator forgets the running call: the next heartbeat is refused.
      await one("SELECT idem_forget($1, $2)", [scope, input.id]);
      const reason = await aborted;
      assert.equal(lease.state, "lost");
      assert.ok(reason instanceof LeaseLost);
      if (input.check) lease.ensure(); // stops short of the effect
      return { charged: effects.add(input.id) };
    },
    { store, scope, key: (i) => i.id, lease: 1_000 },
  );
  await assert.rejects(charge({ id: "c-1", check: true }), (e: unknown) => e instanceof LeaseLost && e.sqlstate === "IK003");
  assert.equal(effects.count, 0);
  assert.equal(await recordOf(scope, "c-1"), undefined, "released, not remembered as failed");
  await assert.rejects(charge({ id: "c-2", check: false }), (e: unknown) => {
    assert.ok(e instanceof LeaseLost);
    assert.deepEqual(e.response, { charged: 1 }, "the result is handed back, not recorded");
    return true;
  });
  assert.equal(await recordOf(scope, "c-2"), undefined);
});

dbTest("an expired result is claimed afresh", async () => {
  const scope = scopeFor("expiry");
  const sent = new Effects();
  const send = idempotent(async (input: { id: string }) => Promise.resolve(sent.add(input.id)), {
    store,
    scope,
    key: (i) => i.id,
    ttl: 1_000,
  });
  assert.equal(await send({ id: "e-1" }), 1);
  assert.equal(await send({ id: "e-1" }), 1);
  const rec = await recordOf(scope, "e-1");
  assert.ok(rec !== undefined);
  await untilServerPasses(rec.expires_at, "the result's ttl");
  assert.equal(await send({ id: "e-1" }), 2);
});
