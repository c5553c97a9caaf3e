/**
 * The Vercel AI SDK: generateText's and streamText's real agent loop, driven by the SDK's
 * own MockLanguageModelV4 (ai/test), calls a side-effecting tool more than once: a
 * re-planned step (the model asks for the same call again, with a new call id and the
 * arguments in another order) and a retried turn (the model's next request fails after the
 * tool ran; the application calls generateText again under the same run id). One email
 * per key.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { generateText, isStepCount, streamText, tool } from "ai";
import { convertArrayToReadableStream, MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

import { idempotentTool } from "../../src/integrations/ai.js";
import { InvalidArgument } from "../../src/index.js";
import { dbTest, Effects, fileStore, Gate, scopeFor } from "../support/db.js";

const store = fileStore();
const ARGS = { to: "ann@example.com", subject: "Your order été #42" };
const REORDERED = { subject: ARGS.subject, to: ARGS.to };
const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

function toolCall(toolCallId: string, args: object = ARGS) {
  return { type: "tool-call" as const, toolCallId, toolName: "send_email", input: JSON.stringify(args) };
}

function step(content: ReturnType<typeof toolCall> | { type: "text"; text: string }) {
  const finish = content.type === "text" ? "stop" : "tool-calls";
  return { content: [content], finishReason: { unified: finish, raw: finish } as const, usage: USAGE, warnings: [] };
}

const text = (t: string) => ({ type: "text" as const, text: t });

function emailTool(outbox: Effects, scope: string, runId: string) {
  return idempotentTool(
    tool({
      description: "Send an email.",
      inputSchema: z.object({ to: z.string(), subject: z.string() }),
      execute: async ({ to, subject }) => ({ messageId: `m-${outbox.add([to, subject])}`, to }),
    }),
    { name: "send_email", runId, store, scope },
  );
}

/** What each tool call answered the model, in order, across the steps. */
function outputs(result: { steps: { toolResults: { output: unknown }[] }[] }): unknown[] {
  return result.steps.flatMap((s) => s.toolResults.map((r) => r.output));
}

dbTest("generateText: a re-planned step sends one email", async () => {
  const outbox = new Effects();
  const scope = scopeFor("ai-replan");
  const model = new MockLanguageModelV4({
    doGenerate: [step(toolCall("call_Ab12Cd34Ef56Gh78Ij90Kl12")), step(toolCall("call_Zz98Yy76Xx54Ww32Vv10Uu98", REORDERED)), step(text("Sent."))],
  });
  const result = await generateText({
    model,
    tools: { send_email: emailTool(outbox, scope, randomUUID()) },
    prompt: "Email Ann about her order",
    stopWhen: isStepCount(5),
  });
  assert.deepEqual(outbox.runs, [[ARGS.to, ARGS.subject]]);
  const first = { messageId: "m-1", to: ARGS.to };
  assert.deepEqual(outputs(result), [first, first]);
  assert.equal(result.text, "Sent.");
});

dbTest("generateText: a retried turn sends one email; another run sends its own", async () => {
  const outbox = new Effects();
  const scope = scopeFor("ai-retry");
  const runId = randomUUID();
  let calls = 0;
  const failing = new MockLanguageModelV4({
    doGenerate: async () => {
      calls += 1;
      if (calls === 1) return step(toolCall("call_Ab12Cd34Ef56Gh78Ij90Kl12"));
      throw new Error("503 from the model's provider");
    },
  });
  await assert.rejects(
    generateText({ model: failing, tools: { send_email: emailTool(outbox, scope, runId) }, prompt: "Email Ann", stopWhen: isStepCount(5), maxRetries: 0 }),
    /503/,
  );
  assert.equal(outbox.count, 1);

  const again = new MockLanguageModelV4({ doGenerate: [step(toolCall("call_Qq11Rr22Ss33Tt44Uu55Vv66")), step(text("Sent."))] });
  const result = await generateText({ model: again, tools: { send_email: emailTool(outbox, scope, runId) }, prompt: "Email Ann", stopWhen: isStepCount(5) });
  assert.equal(outbox.count, 1);
  assert.deepEqual(outputs(result), [{ messageId: "m-1", to: ARGS.to }]);

  const other = new MockLanguageModelV4({ doGenerate: [step(toolCall("call_Ww77Xx88Yy99Zz00Aa11Bb22")), step(text("Sent."))] });
  const fresh = await generateText({ model: other, tools: { send_email: emailTool(outbox, scope, randomUUID()) }, prompt: "Email Ann", stopWhen: isStepCount(5) });
  assert.equal(outbox.count, 2);
  assert.deepEqual(outputs(fresh), [{ messageId: "m-2", to: ARGS.to }]);
});

dbTest("the same call twice in one step (run at once) with wait sends one email", async () => {
  const outbox = new Effects();
  const scope = scopeFor("ai-parallel");
  // The first call's execute holds until the SDK has started the second call: they overlap.
  let started = 0;
  const secondStarted = new Gate();
  const send = idempotentTool(
    tool({
      description: "Send an email.",
      inputSchema: z.object({ to: z.string(), subject: z.string() }),
      execute: async ({ to, subject }) => {
        await secondStarted.promise;
        return { messageId: `m-${outbox.add([to, subject])}`, to };
      },
    }),
    { name: "send_email", runId: randomUUID(), store, scope, wait: 30_000 },
  );
  const both = {
    content: [toolCall("call_Ab12Cd34Ef56Gh78Ij90Kl12"), toolCall("call_Zz98Yy76Xx54Ww32Vv10Uu98", REORDERED)],
    finishReason: { unified: "tool-calls", raw: "tool-calls" } as const,
    usage: USAGE,
    warnings: [],
  };
  const model = new MockLanguageModelV4({ doGenerate: [both, step(text("Sent."))] });
  const result = await generateText({
    model,
    tools: { send_email: send },
    prompt: "Email Ann",
    stopWhen: isStepCount(5),
    onToolExecutionStart: () => {
      started += 1;
      if (started === 2) secondStarted.open();
    },
  });
  const first = { messageId: "m-1", to: ARGS.to };
  assert.deepEqual(outputs(result), [first, first]);
  assert.equal(outbox.count, 1);
});

function streamed(part: ReturnType<typeof toolCall> | { type: "text"; text: string }) {
  const finish = part.type === "text" ? "stop" : "tool-calls";
  const body =
    part.type === "text"
      ? [{ type: "text-start" as const, id: "t" }, { type: "text-delta" as const, id: "t", delta: part.text }, { type: "text-end" as const, id: "t" }]
      : [part];
  return {
    stream: convertArrayToReadableStream([
      { type: "stream-start" as const, warnings: [] },
      ...body,
      { type: "finish" as const, finishReason: { unified: finish, raw: finish } as const, usage: USAGE },
    ]),
  };
}

dbTest("streamText: a re-planned step and a retried turn send one email", async () => {
  const outbox = new Effects();
  const scope = scopeFor("ai-stream");
  const runId = randomUUID();
  const model = new MockLanguageModelV4({
    doStream: [streamed(toolCall("call_Ab12Cd34Ef56Gh78Ij90Kl12")), streamed(toolCall("call_Zz98Yy76Xx54Ww32Vv10Uu98", REORDERED)), streamed(text("Sent."))],
  });
  const result = streamText({ model, tools: { send_email: emailTool(outbox, scope, runId) }, prompt: "Email Ann", stopWhen: isStepCount(5) });
  assert.equal(await result.text, "Sent.");
  const first = { messageId: "m-1", to: ARGS.to };
  assert.deepEqual(outputs({ steps: await result.steps }), [first, first]);

  // The same turn again (the client reconnected and asked anew): the first result.
  const again = new MockLanguageModelV4({ doStream: [streamed(toolCall("call_Qq11Rr22Ss33Tt44Uu55Vv66")), streamed(text("Sent."))] });
  const retried = streamText({ model: again, tools: { send_email: emailTool(outbox, scope, runId) }, prompt: "Email Ann", stopWhen: isStepCount(5) });
  assert.deepEqual(outputs({ steps: await retried.steps }), [first]);
  assert.equal(outbox.count, 1);
});

dbTest("the run id may come from the tool's context; without one the call is refused, nothing sent", async () => {
  const outbox = new Effects();
  const scope = scopeFor("ai-context");
  const send = idempotentTool(
    tool({
      description: "Send an email.",
      inputSchema: z.object({ to: z.string(), subject: z.string() }),
      contextSchema: z.object({ runId: z.string().optional() }),
      execute: async ({ to }) => `m-${outbox.add(to)}`,
    }),
    { name: "send_email", runId: ({ context }) => context.runId, store, scope },
  );
  const runId = randomUUID();
  for (const id of ["call_Ab12Cd34Ef56Gh78Ij90Kl12", "call_Zz98Yy76Xx54Ww32Vv10Uu98"]) {
    const model = new MockLanguageModelV4({ doGenerate: [step(toolCall(id)), step(text("Sent."))] });
    const result = await generateText({ model, tools: { send_email: send }, toolsContext: { send_email: { runId } }, prompt: "Email Ann", stopWhen: isStepCount(5) });
    assert.deepEqual(outputs(result), ["m-1"]);
  }
  const model = new MockLanguageModelV4({ doGenerate: [step(toolCall("call_Qq11Rr22Ss33Tt44Uu55Vv66")), step(text("Failed."))] });
  const result = await generateText({ model, tools: { send_email: send }, toolsContext: { send_email: {} }, prompt: "Email Ann", stopWhen: isStepCount(5) });
  const errors = result.steps.flatMap((s) => s.content.filter((p) => p.type === "tool-error"));
  assert.equal(errors.length, 1);
  const error = errors[0]?.error;
  assert.ok(error instanceof InvalidArgument, String(error));
  assert.match(error.message, /no run id for the call of send_email/);
  assert.match(error.hint ?? "", /runId/);
  assert.equal(outbox.count, 1);
});

test("the adapter refuses what would name another key, and keeps the tool's schema", () => {
  const plain = tool({ description: "Send an email.", inputSchema: z.object({ to: z.string() }), execute: async ({ to }) => to });
  const adapted = idempotentTool(plain, { name: "send_email", runId: "r" });
  assert.equal(adapted.description, plain.description);
  assert.equal(adapted.inputSchema, plain.inputSchema);
  assert.notEqual(adapted.execute, plain.execute);
  assert.throws(() => idempotentTool(plain, { name: "send_email", runId: "r", key: () => "k" } as never), /makes the key itself: key/);
  assert.throws(() => idempotentTool(plain, { name: "a:b", runId: "r" }), InvalidArgument);
});
