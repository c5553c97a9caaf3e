/**
 * A claim whose holder died: once its lease lapsed, a retry takes the call over
 * (`recovered`, the next attempt, the same upstream key), and onUnknownOutcome decides
 * (rerun, refuse, or a reconcile read).
 */

import assert from "node:assert/strict";

import { currentCall, idempotent, NOT_FOUND, OutcomeUnknown, UNKNOWN } from "../../src/index.js";
import type { Begin, IdempotentOptions, Reconcile } from "../../src/index.js";
import { dbTest, Effects, one, recordOf, scopeFor, untilServerPasses, fileStore } from "../support/db.js";

const store = fileStore();

/** A holder that claimed and died before it recorded anything: its lease lapses. */
async function crashedClaim(scope: string, key: string): Promise<Begin> {
  const dead = await store.begin(scope, key, null, { lease: 1_000 });
  assert.equal(dead.outcome, "claimed");
  assert.ok(dead.leaseUntil !== null);
  await untilServerPasses(dead.leaseUntil, "the dead holder's lease");
  return dead;
}

type Charge = { id: string };

function tool(scope: string, runs: Effects, members: IdempotentOptions<Charge> = {}) {
  return idempotent(
    async function charge(input: Charge) {
      const c = currentCall();
      runs.add([c.attempt, c.recovered, c.upstreamKey]);
      return Promise.resolve({ charged: input.id });
    },
    { store, scope, key: (i) => i.id, ...members },
  );
}

dbTest("rerun takes over with the same upstream key, the attempt counted", async () => {
  const scope = scopeFor("rerun");
  const dead = await crashedClaim(scope, "c-1");
  const runs = new Effects();
  const charge = tool(scope, runs);
  assert.deepEqual(await charge({ id: "c-1" }), { charged: "c-1" });
  assert.deepEqual(runs.runs, [[2, true, dead.upstreamKey]]);
  assert.deepEqual(await charge({ id: "c-1" }), { charged: "c-1" });
  assert.equal(runs.count, 1);
  const rec = await recordOf(scope, "c-1");
  assert.deepEqual([rec?.attempt, rec?.upstream_key, rec?.state], [2, dead.upstreamKey, "succeeded"]);
});

dbTest("refuse records a mark, and every retry is refused", async () => {
  const scope = scopeFor("refuse");
  await crashedClaim(scope, "c-1");
  const runs = new Effects();
  const charge = tool(scope, runs, { onUnknownOutcome: "refuse" });
  for (let i = 0; i < 2; i++) {
    await assert.rejects(charge({ id: "c-1" }), (e: unknown) => {
      assert.ok(e instanceof OutcomeUnknown);
      assert.match(e.detail ?? "", /attempt 2/);
      assert.match(e.hint ?? "", /idem_unresolved/);
      return true;
    });
  }
  assert.equal(runs.count, 0);
  const rec = await recordOf(scope, "c-1");
  assert.ok(typeof (rec?.response as { pg_idempotency?: { outcome_unknown?: string } }).pg_idempotency?.outcome_unknown === "string");
  // The operator's listing shows it.
  const why = await one<{ why: string }>("SELECT why FROM idem_unresolved() WHERE scope = $1", [scope]);
  assert.equal(why?.why, "outcome_unknown");
});

for (const finding of ["found", "notFound", "unknown", "throws"] as const) {
  dbTest(`a reconcile read decides: ${finding}`, async () => {
    const scope = scopeFor(`reconcile-${finding}`);
    const dead = await crashedClaim(scope, "c-1");
    const asked: Reconcile<Charge>[] = [];
    const read = async (call: Reconcile<Charge>): Promise<unknown> => {
      asked.push(call);
      await Promise.resolve();
      if (finding === "throws") throw new Error("provider down");
      return { found: { charged: "elsewhere" }, notFound: NOT_FOUND, unknown: UNKNOWN }[finding];
    };
    const runs = new Effects();
    const charge = tool(scope, runs, { onUnknownOutcome: read });
    if (finding === "found") {
      assert.deepEqual(await charge({ id: "c-1" }), { charged: "elsewhere" });
      assert.deepEqual(await charge({ id: "c-1" }), { charged: "elsewhere" });
      assert.equal(runs.count, 0);
    } else if (finding === "notFound") {
      assert.deepEqual(await charge({ id: "c-1" }), { charged: "c-1" });
      assert.equal(runs.count, 1);
    } else {
      await assert.rejects(charge({ id: "c-1" }), (e: unknown) => {
        assert.ok(e instanceof OutcomeUnknown);
        assert.match(e.detail ?? "", finding === "throws" ? /failed: provider down/ : /could not tell/);
        return true;
      });
      assert.equal(runs.count, 0);
    }
    assert.equal(asked.length, 1);
    const call = asked[0];
    assert.deepEqual([call?.key, call?.upstreamKey, call?.attempt, call?.input, call?.scope], ["c-1", dead.upstreamKey, 2, { id: "c-1" }, scope]);
  });
}
