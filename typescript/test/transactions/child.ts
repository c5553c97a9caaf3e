/**
 * A process that dies inside its transaction (exactly-once.test.ts forks it): it calls an
 * exactly-once function that writes, tells the parent its backend's pid once the write is
 * made, and waits, uncommitted, to be killed.
 *
 *     node child.js <pg|postgres> <dsn> <scope> <order id>
 */

import pg from "pg";
import postgres from "postgres";

import { idempotent } from "../../src/index.js";
import type { TransactionClient } from "../../src/index.js";

const [driver, dsn, scope, id] = process.argv.slice(2) as [string, string, string, string];

const forever = new Promise<never>(() => {
  setInterval(() => undefined, 60_000); // keeps the process alive until it is killed
});

async function exec(client: TransactionClient, text: string, params: unknown[]): Promise<unknown[]> {
  if (typeof client === "function") return [...(await (client as postgres.Sql).unsafe(text, params as never[]))];
  return (await (client as pg.ClientBase).query(text, params)).rows as unknown[];
}

const placeOrder = idempotent(
  async function placeOrder(client: TransactionClient, order: { id: string }) {
    await exec(client, "INSERT INTO ts_tx_orders (id) VALUES ($1)", [order.id]);
    const [row] = (await exec(client, "SELECT pg_backend_pid() AS pid", [])) as { pid: number }[];
    process.send?.({ written: row?.pid });
    return forever;
  },
  { scope, transaction: (client) => client },
);

if (driver === "pg") {
  const client = new pg.Client({ connectionString: dsn });
  await client.connect();
  await client.query("BEGIN");
  await placeOrder(client, { id });
} else {
  const sql = postgres(dsn, { max: 1, onnotice: () => undefined });
  await sql.begin((tx) => placeOrder(tx, { id }));
}
