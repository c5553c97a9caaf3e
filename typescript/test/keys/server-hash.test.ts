// canonicalJson and inputHash against the server's idem_canonical and idem_hash, for the
// JSON that JSON.stringify writes (what a request is sent as), on the backend that
// PGIDEM_DSN and PGIDEM_BACKEND name.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import pg from "pg";

import { agentKey } from "../../src/agent-keys.js";
import { canonicalJson, inputHash } from "../../src/canonical.js";
import { HANDPICKED, generated, javascriptOnly } from "./values.js";

const dsn = process.env["PGIDEM_DSN"] ?? "";
const backend = process.env["PGIDEM_BACKEND"] ?? "";
const skip = dsn === "" ? "PGIDEM_DSN is not set: no database to compare with" : false;
// A seed of its own on every run (PGIDEM_SEED repeats one), named in every failure.
const seed = Number(process.env["PGIDEM_SEED"] ?? Date.now() % 2 ** 31);

describe(`inputHash is the server's idem_hash (${backend || "backend not named"})`, { skip }, () => {
  let client: pg.Client;
  before(async () => {
    client = new pg.Client({ connectionString: dsn });
    await client.connect();
  });
  after(async () => {
    await client.end();
  });

  /** The server's canonical text and hex hash of each JSON text, in one round trip. */
  async function server(texts: string[]): Promise<{ canonical: string; hash: string }[]> {
    const { rows } = await client.query<{ canonical: string; hash: string }>(
      "SELECT idem_canonical(doc::jsonb) AS canonical, " +
        "encode(idem_hash(doc::jsonb), 'hex') AS hash " +
        "FROM unnest($1::text[]) WITH ORDINALITY AS t(doc, n) ORDER BY n",
      [texts],
    );
    assert.equal(rows.length, texts.length);
    return rows;
  }

  async function compare(values: readonly unknown[], context: string): Promise<void> {
    const expected = await server(values.map((v) => JSON.stringify(v)));
    for (const [i, value] of values.entries()) {
      const message = `${context}, value ${i}: ${JSON.stringify(value)}`;
      assert.equal(canonicalJson(value), expected[i]?.canonical, message);
      assert.equal(inputHash(value), expected[i]?.hash, message);
    }
  }

  const unnamed = backend === "" && "PGIDEM_BACKEND is not set";
  test("the database is the backend PGIDEM_BACKEND names", { skip: unnamed }, async () => {
    const { rows } = await client.query<{ extension: boolean }>(
      "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_idempotency') AS extension",
    );
    assert.equal(rows[0]?.extension, backend === "extension");
    assert.ok(["extension", "portable"].includes(backend), backend);
  });

  test("handpicked values", async () => {
    await compare(HANDPICKED, "handpicked");
  });

  test("values only JavaScript has, as JSON.stringify sends them", async () => {
    await compare(javascriptOnly(), "JavaScript's own");
  });

  test("200 generated documents", async () => {
    await compare(generated(seed, 200), `PGIDEM_SEED=${seed}`);
  });

  test("an agent key's digest is idem_hash of the arguments", async () => {
    const args = { to: "\u00e9l\u00e8ve@example.com", cc: ["b@x", "a@x"], n: 0.1 };
    const { rows } = await client.query<{ hash: string }>(
      "SELECT encode(idem_hash($1::text::jsonb), 'hex') AS hash",
      [JSON.stringify(args)],
    );
    assert.equal(agentKey("run-1", "send_email", args), `run-1:send_email:${rows[0]?.hash ?? ""}`);
  });

  test("nesting deeper than 128 levels is IK005 there as here", async () => {
    let ok: unknown = 1;
    for (let i = 0; i < 128; i++) ok = [ok];
    await compare([ok], "128 levels");
    const tooDeep = JSON.stringify([ok]);
    await assert.rejects(server([tooDeep]), (e: unknown) =>
      e instanceof Error && (e as { code?: unknown }).code === "IK005");
    assert.throws(() => inputHash([ok]), (e: unknown) =>
      (e as { sqlstate?: unknown }).sqlstate === "IK005");
  });

  test("what is refused here, jsonb cannot hold", async () => {
    // JSON.stringify writes U+0000 and lone surrogates as escapes; jsonb refuses both.
    for (const text of [JSON.stringify({ s: "\0" }), JSON.stringify({ s: "\ud800" })]) {
      await assert.rejects(server([text]), (e: unknown) =>
        e instanceof Error && /^22/.test(String((e as { code?: unknown }).code)), text);
    }
  });
});
