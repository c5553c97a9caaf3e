/**
 * The OpenAI Agents SDK for JavaScript: run()'s real agent loop, driven by the SDK's own
 * ScriptedModel (@openai/agents/testing), calls a side-effecting function tool more than
 * once: a re-planned step, a retried turn, a run resumed twice from its saved RunState.
 * One email per key.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { Agent, run, RunState, setTracingDisabled, tool, ToolCallError } from "@openai/agents";
import type { RunContext } from "@openai/agents";
import { assistantMessage, functionCall, modelError, ScriptedModel } from "@openai/agents/testing";
import type { ScriptedModelInput } from "@openai/agents/testing";
import { z } from "zod";

import { InvalidArgument } from "../../src/index.js";
import { idempotentTool } from "../../src/integrations/openai-agents.js";
import { dbTest, Effects, fileStore, scopeFor } from "../support/db.js";

// No trace is exported (there is nowhere to send it here).
setTracingDisabled(true);

const store = fileStore();
const ARGS = { to: "ann@example.com", subject: "Your order été #42" };
const REORDERED = { subject: ARGS.subject, to: ARGS.to };

interface Job {
  runId?: string;
}

const call = (callId: string, args: object = ARGS) => functionCall("send_email", args as Record<string, unknown>, { callId });

function emailTool(outbox: Effects, scope: string, extra: { needsApproval?: boolean } = {}) {
  return tool(
    idempotentTool(
      {
        name: "send_email",
        description: "Send an email.",
        parameters: z.object({ to: z.string(), subject: z.string() }),
        // The input's type comes from parameters, as with tool() alone.
        execute: async ({ to, subject }, _ctx?: RunContext<Job>) => ({ messageId: `m-${outbox.add([to, subject])}`, to }),
        errorFunction: null,
        ...extra,
      },
      { store, scope },
    ),
  );
}

function agentWith(steps: ScriptedModelInput[], tools: ReturnType<typeof emailTool>[]) {
  const model = new ScriptedModel(steps);
  return { agent: new Agent<Job>({ name: "mailer", model, tools }), model };
}

/** What each tool call answered the model, in order. */
function outputs(result: { newItems: { type: string }[] }): unknown[] {
  return result.newItems.filter((i) => i.type === "tool_call_output_item").map((i) => (i as unknown as { output: unknown }).output);
}

const FIRST = { messageId: "m-1", to: ARGS.to };

dbTest("a re-planned step sends one email", async () => {
  const outbox = new Effects();
  const { agent, model } = agentWith(
    [[call("call_Ab12Cd34Ef56Gh78Ij90Kl12")], [call("call_Zz98Yy76Xx54Ww32Vv10Uu98", REORDERED)], [assistantMessage("Sent.")]],
    [emailTool(outbox, scopeFor("oa-replan"))],
  );
  const result = await run(agent, "Email Ann about her order", { context: { runId: randomUUID() } });
  model.assertComplete();
  assert.deepEqual(outbox.runs, [[ARGS.to, ARGS.subject]]);
  assert.deepEqual(outputs(result), [FIRST, FIRST]);
  assert.equal(result.finalOutput, "Sent.");
});

dbTest("a retried turn sends one email; another run sends its own", async () => {
  const outbox = new Effects();
  const scope = scopeFor("oa-retry");
  const job = { runId: randomUUID() };
  let { agent } = agentWith([[call("call_Ab12Cd34Ef56Gh78Ij90Kl12")], modelError(new Error("503 from the model's provider"))], [emailTool(outbox, scope)]);
  await assert.rejects(run(agent, "Email Ann", { context: job }), /503/);
  assert.equal(outbox.count, 1);

  const retried = agentWith([[call("call_Qq11Rr22Ss33Tt44Uu55Vv66")], [assistantMessage("Sent.")]], [emailTool(outbox, scope)]);
  const result = await run(retried.agent, "Email Ann", { context: job });
  retried.model.assertComplete();
  assert.equal(outbox.count, 1);
  assert.deepEqual(outputs(result), [FIRST]);

  ({ agent } = agentWith([[call("call_Ww77Xx88Yy99Zz00Aa11Bb22")], [assistantMessage("Sent.")]], [emailTool(outbox, scope)]));
  const other = await run(agent, "Email Ann", { context: { runId: randomUUID() } });
  assert.equal(outbox.count, 2);
  assert.deepEqual(outputs(other), [{ messageId: "m-2", to: ARGS.to }]);
});

dbTest("a run resumed twice from its saved state sends one email", async () => {
  // The run stops for approval and its RunState is saved. The first resumption runs the
  // tool, then crashes (the model's next request fails) before anything newer is saved;
  // the application resumes again from the saved state, and the tool call is made again.
  const outbox = new Effects();
  const scope = scopeFor("oa-resume");
  const { agent } = agentWith([[call("call_Ab12Cd34Ef56Gh78Ij90Kl12")]], [emailTool(outbox, scope, { needsApproval: true })]);
  const first = await run(agent, "Email Ann", { context: { runId: randomUUID() } });
  assert.equal(first.interruptions.length, 1);
  assert.equal(outbox.count, 0);
  const saved = first.state.toString(); // what the application stores

  let result: { newItems: { type: string }[] } | undefined;
  for (const [attempt, steps] of [[modelError(new Error("crash"))], [[assistantMessage("Sent.")]]].entries()) {
    const resumed = agentWith(steps, [emailTool(outbox, scope, { needsApproval: true })]).agent;
    const state = await RunState.fromString(resumed, saved);
    for (const item of state.getInterruptions()) state.approve(item);
    if (attempt === 0) await assert.rejects(run(resumed, state), /crash/);
    else result = await run(resumed, state);
  }
  assert.deepEqual(outbox.runs, [[ARGS.to, ARGS.subject]]);
  assert.deepEqual(outputs(result ?? { newItems: [] }), [FIRST]);
});

dbTest("without a run id the call is refused, saying where the id goes; nothing is sent", async () => {
  const outbox = new Effects();
  const { agent } = agentWith([[call("call_Ab12Cd34Ef56Gh78Ij90Kl12")], [assistantMessage("ok")]], [emailTool(outbox, scopeFor("oa-no-run"))]);
  const refused = await run(agent, "Email Ann").then(
    () => assert.fail("the run should fail"),
    (e: unknown) => e,
  );
  // The SDK's ToolCallError holds the tool's error.
  assert.ok(refused instanceof ToolCallError, String(refused));
  const cause = refused.error;
  assert.ok(cause instanceof InvalidArgument, String(refused));
  assert.match(cause.message, /no run id for the call of send_email/);
  assert.match(cause.hint ?? "", /context: \{ runId/);
  assert.equal(outbox.count, 0);
});

test("the tool is the one tool() builds without the adapter", () => {
  const options = {
    name: "send_email",
    description: "Send an email.",
    parameters: z.object({ to: z.string(), subject: z.string() }),
    execute: async ({ to }: { to: string }) => to,
  };
  const bare = tool(options);
  const adapted = tool(idempotentTool(options));
  assert.deepEqual([adapted.name, adapted.description, adapted.parameters, adapted.strict], [bare.name, bare.description, bare.parameters, bare.strict]);
  // A tool named after its function keeps that name.
  const named = tool(idempotentTool({ description: "d", parameters: z.object({}), execute: async function sendEmail() { return "x"; } }));
  assert.equal(named.name, "sendEmail");
  assert.throws(() => idempotentTool(options, { keyFields: ["to"] } as never), /makes the key itself: keyFields/);
  // The types: execute's input is the schema's output; runId reads the declared context.
  tool(
    idempotentTool(
      {
        name: "t",
        description: "d",
        parameters: z.object({ to: z.string() }),
        execute: async ({ to }, ctx?: RunContext<{ jobId: string }>) => to + (ctx?.context.jobId ?? ""),
      },
      { runId: (ctx) => ctx.context.jobId },
    ),
  );
  // @ts-expect-error the schema has no member nope
  tool(idempotentTool({ name: "t", description: "d", parameters: z.object({ to: z.string() }), execute: async ({ nope }) => String(nope) }));
});
