// agentKey, and the KeyWarning for EXPLICIT keys that look like per-turn tool-call ids.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import {
  KEY_WARNING,
  MAX_KEY_BYTES,
  agentKey,
  toolCallIdIn,
  warnIfToolCallId,
} from "../../src/agent-keys.js";
import { inputHash } from "../../src/canonical.js";
import { InvalidArgument, Uncanonicalizable } from "../../src/errors.js";

const RECOGNISED: [key: string, part: string, looksLike: string][] = [
  ["call_Jja7J89XsjrOLA5rMEOWSL7x", "call_Jja7J89XsjrOLA5rMEOWSL7x", "an OpenAI tool-call id"],
  ["call_0_3b5e2c4d-8f1a-4b6c-9d2e-7f8a9b0c1d2e", "call_0_3b5e2c4d-8f1a-4b6c-9d2e-7f8a9b0c1d2e",
    "an OpenAI tool-call id"], // DeepSeek
  ["fc_67ca09c5efe0819096d0511c92b8c890096610f474011cc0",
    "fc_67ca09c5efe0819096d0511c92b8c890096610f474011cc0",
    "an OpenAI Responses function-call item id"],
  ["toolu_01A09q90qw90lq917835lq9", "toolu_01A09q90qw90lq917835lq9", "an Anthropic tool-use id"],
  ["toolu_vrtx_01XyZabcDEF123", "toolu_vrtx_01XyZabcDEF123", "an Anthropic tool-use id"],
  ["srvtoolu_014hJH82Qum7Td6UV8gDXThB", "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
    "an Anthropic tool-use id"],
  ["tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
    "an Amazon Bedrock tool-use id"],
  ["pyd_ai_5f0c3c5e0e7b4b3f9c1d2e3f4a5b6c7d", "pyd_ai_5f0c3c5e0e7b4b3f9c1d2e3f4a5b6c7d",
    "a Pydantic AI tool-call id"],
  ["pyd_ai_retry", "pyd_ai_retry", "a Pydantic AI tool-call id"], // need not look random
  // A part of the key, split at : / | # @ , ; = . and white space.
  ["order-42:call_Jja7J89XsjrOLA5rMEOWSL7x", "call_Jja7J89XsjrOLA5rMEOWSL7x",
    "an OpenAI tool-call id"],
  ["run-7/send_email/toolu_01A09q90qw90lq917835lq9", "toolu_01A09q90qw90lq917835lq9",
    "an Anthropic tool-use id"],
  ["a|b#c@d,e;f=g.call_ABCDEFGH1", "call_ABCDEFGH1", "an OpenAI tool-call id"],
  ["order 42\tcall_ABCDEFGH1", "call_ABCDEFGH1", "an OpenAI tool-call id"],
  // Python's white space: U+00A0 and U+001C separate, as there.
  ["order\u00a0call_ABCDEFGH1", "call_ABCDEFGH1", "an OpenAI tool-call id"],
  ["order\x1ccall_ABCDEFGH1", "call_ABCDEFGH1", "an OpenAI tool-call id"],
];

const NOT_RECOGNISED = [
  "order-42", "call_center", "call_center_department", "recall_Jja7J89XsjrOLA5r",
  randomUUID(), `run-1:send_email:${"a".repeat(64)}`, "toolu_", "fc_abc", "42",
  "ann@example.com/Welcome", "call_ABC1234", // 7 id characters: fewer than 8
  "fc_0123456789abcde", // 15: fewer than 16
  "call_ABCDEFGH1!", "CALL_ABCDEFGH1", "call_ALLUPPERCASE", "toolu_onlylowercase",
  "order\ufeffcall_ABCDEFGH1", // U+FEFF is JavaScript's white space, not Python's
  "", // no part at all
];

test("tool-call ids of every provider's format are recognised", () => {
  for (const [key, part, looksLike] of RECOGNISED) {
    assert.deepEqual(toolCallIdIn(key), { part, looksLike }, key);
  }
});

test("keys that only resemble them are not", () => {
  for (const key of NOT_RECOGNISED) assert.equal(toolCallIdIn(key), undefined, key);
});

/** The KeyWarnings emitted while `fn` runs (process.emitWarning emits on the next tick). */
async function keyWarnings(fn: () => void): Promise<Error[]> {
  const seen: Error[] = [];
  const listener = (w: Error): void => {
    if (w.name === KEY_WARNING) seen.push(w);
  };
  process.on("warning", listener);
  try {
    fn();
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    process.off("warning", listener);
  }
  return seen;
}

test("a key that looks like a tool-call id is warned about, once per scope", async () => {
  const scope = `send_email-${randomUUID()}`;
  const first = await keyWarnings(() => {
    warnIfToolCallId(scope, "call_Ab12Cd34Ef56Gh78Ij90Kl12", "the key function");
  });
  assert.equal(first.length, 1);
  const [warning] = first;
  assert.ok(warning);
  assert.equal(warning.name, "KeyWarning");
  assert.equal(
    warning.message,
    `the key "call_Ab12Cd34Ef56Gh78Ij90Kl12" of scope ${JSON.stringify(scope)} (the key ` +
      'function) holds "call_Ab12Cd34Ef56Gh78Ij90Kl12", which looks like an OpenAI tool-call ' +
      "id. A retried turn, a re-planned step or a resumed run gets a new tool-call id, so " +
      "this key deduplicates nothing. Key the call on the run's id, the tool and its " +
      "arguments: agentKey(runId, tool, args)",
  );
  // The same scope again, with another id: no second warning.
  const again = await keyWarnings(() => {
    warnIfToolCallId(scope, "call_Zz98Yy76Xx54Ww32Vv10Uu98", "the key function");
    warnIfToolCallId(scope, "toolu_01A09q90qw90lq917835lq9", "the key fields [\"id\"]");
  });
  assert.deepEqual(again, []);
  // Another scope gets its own.
  const other = await keyWarnings(() => {
    warnIfToolCallId(`${scope}-other`, "order-1/toolu_01A09q90qw90lq917835lq9", "the key fields");
  });
  assert.equal(other.length, 1);
  assert.match(
    other[0]?.message ?? "",
    /holds "toolu_01A09q90qw90lq917835lq9", which looks like an Anthropic tool-use id/,
  );
});

test("without a scope, the warning is once per source", async () => {
  const source = `the key function ${randomUUID()}`;
  const warnings = await keyWarnings(() => {
    warnIfToolCallId(undefined, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", source);
    warnIfToolCallId(undefined, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", source);
    warnIfToolCallId(undefined, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", `${source} 2`);
  });
  assert.equal(warnings.length, 2);
  assert.match(warnings[0]?.message ?? "", /of scope "\?" \(the key function/);
});

test("keys that do not look like tool-call ids are not warned about", async () => {
  const scope = `lookalikes-${randomUUID()}`;
  const warnings = await keyWarnings(() => {
    for (const key of NOT_RECOGNISED) warnIfToolCallId(scope, key, "the key function");
    warnIfToolCallId(scope, agentKey(randomUUID(), "send_email", { to: "a@b" }), "the key function");
  });
  assert.deepEqual(warnings, []);
  // The scope was not used up by them.
  const real = await keyWarnings(() => {
    warnIfToolCallId(scope, "call_Ab12Cd34Ef56Gh78Ij90Kl12", "the key function");
  });
  assert.equal(real.length, 1);
});

test("an agent key is the run, the tool and the arguments' HASH_INPUT key", () => {
  const args = { to: "ann@example.com", subject: "Hi", amount: 100 };
  const key = agentKey("run-1", "send_email", args);
  assert.equal(key, `run-1:send_email:${inputHash(args)}`);
  assert.match(key, /^run-1:send_email:[0-9a-f]{64}$/);
  // Member order does not matter; the run, the tool and every argument do.
  const reordered = { amount: 100.0, subject: "Hi", to: "ann@example.com" };
  assert.equal(key, agentKey("run-1", "send_email", reordered));
  assert.notEqual(key, agentKey("run-2", "send_email", args));
  assert.notEqual(key, agentKey("run-1", "send_sms", args));
  assert.notEqual(key, agentKey("run-1", "send_email", { ...args, amount: 101 }));
  // A run id may hold ':' (the key reads from the right).
  assert.equal(agentKey("wf:7/step:3", "t", []), `wf:7/step:3:t:${inputHash([])}`);
});

test("agentKey refuses what would make a bad key", () => {
  const refusedRunIds: unknown[] = ["", "  ", "\t\n", "\x1c\u3000", undefined, null, 42];
  for (const runId of refusedRunIds) {
    assert.throws(() => agentKey(runId as string, "send_email", {}), (e: unknown) =>
      e instanceof InvalidArgument && e.message === "agentKey needs a run id" &&
      e.detail === `runId is ${typeof runId === "string" ? JSON.stringify(runId) : String(runId)}.`,
      String(runId));
  }
  for (const tool of ["mail:send", "", " ", undefined]) {
    assert.throws(() => agentKey("run-1", tool as string, {}), (e: unknown) =>
      e instanceof InvalidArgument && e.message === "agentKey needs the tool's name, without ':'",
      String(tool));
  }
  assert.throws(() => agentKey("r".repeat(500), "send_email", {}), (e: unknown) =>
    e instanceof InvalidArgument && e.message === `the key is longer than ${MAX_KEY_BYTES} bytes` &&
      e.detail === "The run id is 500 bytes and the tool's name 10; the digest takes 66.");
  const longest = "r".repeat(MAX_KEY_BYTES - 66 - "send_email".length);
  assert.equal(agentKey(longest, "send_email", {}).length, MAX_KEY_BYTES);
  assert.throws(() => agentKey(`${longest}r`, "send_email", {}), InvalidArgument);
  // Bytes, not characters: 220 two-byte characters are 440 bytes.
  assert.throws(() => agentKey("\u00e9".repeat(220), "send_email", {}), /longer than 512 bytes/);
  // A lone surrogate would be sent as U+FFFD: another key.
  assert.throws(() => agentKey("run-\ud800", "send_email", {}), (e: unknown) =>
    e instanceof InvalidArgument && /surrogate/.test(e.detail ?? ""));
  // Arguments without a canonical form are refused by inputHash.
  assert.throws(() => agentKey("run-1", "send_email", { s: "\udc00" }), Uncanonicalizable);
  assert.throws(() => agentKey("run-1", "send_email", { n: Number.NaN }), InvalidArgument);
});
