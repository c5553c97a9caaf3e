/**
 * TypeScript 5's standard decorators: `@idempotent.method(options)` on a method, and
 * `@idempotent.class(options)` whose options apply to the methods without their own (a
 * method's own win whole).
 */

import assert from "node:assert/strict";

import { currentCall, idempotent, RepeatRefused } from "../../src/index.js";
import { dbTest, Effects, recordOf, scopeFor, fileStore } from "../support/db.js";

const store = fileStore();

dbTest("a decorated method runs once per input; its receiver is not part of it", async () => {
  const scope = scopeFor("method");
  const sent = new Effects();

  class Mailer {
    constructor(private readonly from: string) {}

    @idempotent.method({ store, scope })
    async sendEmail(input: { to: string }): Promise<{ id: number; from: string }> {
      return Promise.resolve({ id: sent.add(input.to), from: this.from });
    }
  }

  const first = await new Mailer("a@example.com").sendEmail({ to: "ann" });
  assert.deepEqual(first, { id: 1, from: "a@example.com" }, "this is the instance");
  // Another instance, the same input: the same call.
  assert.deepEqual(await new Mailer("b@example.com").sendEmail({ to: "ann" }), first);
  assert.equal(sent.count, 1);
  assert.equal(Mailer.prototype.sendEmail.name, "sendEmail");
});

dbTest("a method's scope defaults to its name", async () => {
  const key = `k-${scopeFor("method-scope")}`;
  class Tools {
    @idempotent.method<{ id: string }>({ store, key: (i) => i.id })
    async ts_method_scope_default(input: { id: string }): Promise<string> {
      return Promise.resolve(`${currentCall().scope}${input.id.length}`);
    }
  }
  assert.equal(await new Tools().ts_method_scope_default({ id: key }), `ts_method_scope_default${key.length}`);
  assert.notEqual(await recordOf("ts_method_scope_default", key), undefined);
  await store.forget("ts_method_scope_default", key);
});

dbTest("class options apply to its methods, and a method's own win whole", async () => {
  const scope = scopeFor("class");
  const made = new Effects();

  @idempotent.class({ store, strategy: "explicit", ttl: 86_400_000, scope })
  class IssueTools {
    async createIssue(input: { title: string; body: string }): Promise<number> {
      return Promise.resolve(made.add(["issue", input.title]));
    }

    // Its own options win whole: hashInput here, not the class's explicit.
    @idempotent.method({ store, scope: `${scope}-orders`, cacheFailures: true, onCacheHit: "failFast" })
    async placeOrder(input: { sku: string; quantity: number }): Promise<number> {
      return Promise.resolve(made.add(["order", input.sku]));
    }

    // No protection, said explicitly: the class's options do not apply.
    @idempotent.method({ strategy: "none" })
    async search(input: { q: string }): Promise<number> {
      return Promise.resolve(made.add(["search", input.q]));
    }

    idempotencyKeyFor(input: { title: string }): string {
      return input.title.toLowerCase();
    }

    async _helper(): Promise<number> {
      return Promise.resolve(made.add("helper"));
    }

    get count(): number {
      return made.count;
    }
  }

  const tools = new IssueTools();
  assert.equal(await tools.createIssue({ title: "Crash", body: "a" }), 1);
  assert.equal(await tools.createIssue({ title: "CRASH", body: "b" }), 1);
  assert.equal((await recordOf(scope, "crash"))?.state, "succeeded");
  assert.equal(await tools.placeOrder({ sku: "sku-1", quantity: 2 }), 2);
  await assert.rejects(tools.placeOrder({ sku: "sku-1", quantity: 2 }), RepeatRefused);
  assert.equal(await tools.search({ q: "x" }), 3);
  assert.equal(await tools.search({ q: "x" }), 4);
  assert.equal(await tools._helper(), 5, "names starting with _ are not calls");
  assert.equal(await tools._helper(), 6);
  assert.equal(tools.count, 6, "a getter is left alone");
});
