/**
 * Keys for the tool calls of an agent loop.
 *
 * An agent loop repeats a tool call when a turn is retried, a step is re-planned, or a run
 * crashes and resumes. Each time, the model names the call with a new tool-call id
 * (`call_...`, `toolu_...`), so a key made of that id deduplicates nothing. The key that an
 * agent loop keeps is the run's (or workflow's) id + the tool + a digest of the arguments:
 * `agentKey(runId, tool, args)`.
 *
 * An EXPLICIT key in which a part looks like a per-turn tool-call id gets a warning of type
 * `KeyWarning` (`process.emitWarning`), once per scope. The ids recognised (a part of the
 * key split at `: / | # @ , ; = .` and white space):
 *
 * - OpenAI and the providers that copy its format (Groq, DeepSeek, xAI, Together,
 *   Fireworks, vLLM, LiteLLM): `call_` + at least 8 id characters;
 * - the OpenAI Responses API's function-call items: `fc_` + at least 16;
 * - Anthropic (Vertex `toolu_vrtx_`, Bedrock `toolu_bdrk_`, server tools `srvtoolu_`):
 *   `toolu_` + at least 8;
 * - Amazon Bedrock's Converse API: `tooluse_` + at least 8;
 * - Pydantic AI's own ids (for Gemini, Mistral calls without an id, TestModel): `pyd_ai_...`.
 *
 * For all but the last, the id part must look random (hold a digit, or both cases), so
 * that `call_center` is not taken for one. Not recognised, because they look like keys
 * people choose: Mistral's 9-character ids, uuids (LangChain's ids for Gemini), JSON-RPC
 * ids. The same patterns as the Python package's `pg_idempotency.agent_keys`.
 */

import { inputHash } from "./canonical.js";
import { InvalidArgument } from "./errors.js";

/** The server's limit on a key, in UTF-8 bytes. */
export const MAX_KEY_BYTES = 512;

/** The `type` (and `name`) of the warning about a key that looks like a tool-call id:
 * `process.on("warning", (w) => { if (w.name === KEY_WARNING) ... })`, or
 * `node --disable-warning=KeyWarning`. */
export const KEY_WARNING = "KeyWarning";

const PROVIDERS: readonly (readonly [what: string, id: RegExp, mustLookRandom: boolean])[] = [
  ["an OpenAI tool-call id", /^call_([A-Za-z0-9_-]{8,})$/, true],
  ["an OpenAI Responses function-call item id", /^fc_([A-Za-z0-9]{16,})$/, true],
  ["an Anthropic tool-use id", /^(?:srv)?toolu_([A-Za-z0-9_-]{8,})$/, true],
  ["an Amazon Bedrock tool-use id", /^tooluse_([A-Za-z0-9_-]{8,})$/, true],
  ["a Pydantic AI tool-call id", /^pyd_ai_([A-Za-z0-9_]+)$/, false],
];
// White space is what Python's str.isspace() takes for it (its re's \s), not JavaScript's
// \s (which adds U+FEFF and leaves out U+001C..U+001F and U+0085): a key splits, and a
// name is blank, exactly as in the Python package.
const SPACE = "\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const SEPARATORS = new RegExp(`[:/|#@,;=.${SPACE}]+`);
const BLANK = new RegExp(`^[${SPACE}]*$`);
// What every id above holds: a key without any of these is not split and matched (most
// keys; the check runs on every call).
const PREFIXES = /call_|fc_|toolu|pyd_ai_/;
// With the u flag, a surrogate pair is one code point: this matches the lone ones only.
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

function randomLooking(s: string): boolean {
  return /[0-9]/.test(s) || (s.toLowerCase() !== s && s.toUpperCase() !== s);
}

/** The part of the key that looks like a per-turn tool-call id, and what it looks like;
 * undefined when no part does. */
export function toolCallIdIn(key: string): { part: string; looksLike: string } | undefined {
  if (!PREFIXES.test(key)) return undefined;
  for (const part of key.split(SEPARATORS)) {
    for (const [what, id, mustLookRandom] of PROVIDERS) {
      const m = id.exec(part);
      if (m !== null && (!mustLookRandom || randomLooking(m[1] ?? ""))) {
        return { part, looksLike: what };
      }
    }
  }
  return undefined;
}

const warned = new Set<string>();

/** The KeyWarning, once per scope (per source where the scope is not known yet).
 * `source` says where the key came from, for the message: "the key function". */
export function warnIfToolCallId(scope: string | undefined, key: string, source: string): void {
  const found = toolCallIdIn(key);
  if (found === undefined) return;
  const seen = scope || source;
  if (warned.has(seen)) return;
  warned.add(seen);
  process.emitWarning(
    `the key ${JSON.stringify(key)} of scope ${JSON.stringify(scope || "?")} (${source}) ` +
      `holds ${JSON.stringify(found.part)}, which looks like ${found.looksLike}. A retried ` +
      "turn, a re-planned step or a resumed run gets a new tool-call id, so this key " +
      "deduplicates nothing. Key the call on the run's id, the tool and its arguments: " +
      "agentKey(runId, tool, args)",
    { type: KEY_WARNING },
  );
}

/**
 * The key of a tool call that an agent loop keeps across retries:
 * `` `${runId}:${tool}:${digest}` ``, where digest is the HASH_INPUT key of the arguments
 * (the hex SHA-256 of their canonical JSON, `encode(idem_hash(args), 'hex')`, see
 * `inputHash`), so the same arguments in any member order give the same key, and the key
 * the Python package's `agent_key` gives.
 *
 * `runId`: what stays the same when the run is retried or resumed (a workflow id, a
 * LangGraph thread id, your request id), never the model's tool-call id. `tool` must not
 * hold ':' (the key reads unambiguously from the right).
 */
export function agentKey(runId: string, tool: string, args: unknown): string {
  if (blank(runId)) {
    throw new InvalidArgument("agentKey needs a run id", {
      detail: `runId is ${shown(runId)}.`,
      hint:
        "pass what stays the same when the run is retried or resumed: the workflow's, " +
        "thread's or request's id",
    });
  }
  if (blank(tool) || tool.includes(":")) {
    throw new InvalidArgument("agentKey needs the tool's name, without ':'", {
      detail: `tool is ${shown(tool)}.`,
      hint: "pass the tool's name as the framework knows it (send_email)",
    });
  }
  const key = `${runId}:${tool}:${inputHash(args)}`;
  // Where Python's encode("utf-8") raises, node-postgres would send U+FFFD instead: another
  // key than the one asked for.
  if (LONE_SURROGATE.test(key)) {
    throw new InvalidArgument("agentKey needs well-formed text", {
      detail: "The run id or the tool's name holds a lone UTF-16 surrogate.",
      hint: "replace lone surrogates before passing the text: s.toWellFormed()",
    });
  }
  if (Buffer.byteLength(key, "utf8") > MAX_KEY_BYTES) {
    throw new InvalidArgument(`the key is longer than ${MAX_KEY_BYTES} bytes`, {
      detail:
        `The run id is ${Buffer.byteLength(runId, "utf8")} bytes and the tool's name ` +
        `${Buffer.byteLength(tool, "utf8")}; the digest takes 66.`,
      hint: "use a shorter run id (a uuid, or a hash of a long one)",
    });
  }
  return key;
}

// Not a string counts as blank: JavaScript callers are not held to the types.
function blank(s: unknown): boolean {
  return typeof s !== "string" || BLANK.test(s);
}

function shown(value: unknown): string {
  return typeof value === "string" ? JSON.stringify(value) : String(value);
}
