/**
 * Every kind of connection a Store takes, of both drivers, opened for one test and closed
 * after it; and the transactions a caller opens on them.
 */

import pg from "pg";
import postgres from "postgres";

import { Store } from "../../src/index.js";
import type { TransactionClient } from "../../src/index.js";
import { DSN } from "./db.js";

export interface Opened {
  store: Store;
  /** Commit what the caller's transaction holds (the kinds that open one), and close. */
  close(): Promise<void>;
}

export interface Kind {
  name: string;
  /** Inside the caller's transaction (a refusal aborts it). */
  inTransaction?: boolean;
  open(): Promise<Opened>;
}

/** postgres.js quietly: the API's notices are not the test's output. */
export const postgresJs = (options: postgres.Options<Record<string, never>> = {}): postgres.Sql =>
  postgres(DSN, { max: 4, onnotice: () => undefined, ...options });

/** A postgres.js transaction held open until `close()`: sql.begin's tx, outside its callback. */
async function heldBegin(sql: postgres.Sql): Promise<{ tx: postgres.TransactionSql; end(): Promise<void> }> {
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let tx: postgres.TransactionSql | undefined;
  const opened = new Promise<void>((resolve) => {
    void sql
      .begin(async (t) => {
        tx = t;
        resolve();
        await released;
      })
      .catch(() => undefined);
  });
  await opened;
  if (tx === undefined) throw new Error("sql.begin gave no transaction");
  return {
    tx,
    end: async () => {
      release();
      await sql.end();
    },
  };
}

export const STORE_KINDS: readonly Kind[] = [
  {
    name: "pg connection string",
    open: () => {
      const store = new Store(DSN);
      return Promise.resolve({ store, close: () => store.close() });
    },
  },
  {
    name: "pg Pool",
    open: () => {
      const pool = new pg.Pool({ connectionString: DSN, max: 3 });
      return Promise.resolve({ store: new Store(pool), close: () => pool.end() });
    },
  },
  {
    name: "pg Client, idle",
    open: async () => {
      const client = new pg.Client({ connectionString: DSN });
      await client.connect();
      return { store: new Store(client), close: () => client.end() };
    },
  },
  {
    name: "pg PoolClient in BEGIN",
    inTransaction: true,
    open: async () => {
      const pool = new pg.Pool({ connectionString: DSN, max: 1 });
      const conn = await pool.connect();
      await conn.query("BEGIN");
      return {
        store: new Store(conn),
        close: async () => {
          await conn.query("COMMIT");
          conn.release();
          await pool.end();
        },
      };
    },
  },
  {
    name: "postgres.js sql",
    open: () => {
      const sql = postgresJs();
      return Promise.resolve({ store: new Store(sql), close: () => sql.end() });
    },
  },
  {
    name: "postgres.js sql, prepare: false",
    open: () => {
      const sql = postgresJs({ prepare: false, fetch_types: false });
      return Promise.resolve({ store: new Store(sql, { prepare: false }), close: () => sql.end() });
    },
  },
  {
    name: "postgres.js sql.begin's tx",
    inTransaction: true,
    open: async () => {
      const held = await heldBegin(postgresJs());
      return { store: new Store(held.tx), close: () => held.end() };
    },
  },
  {
    name: "postgres.js reserved connection",
    open: async () => {
      const sql = postgresJs();
      const reserved = await sql.reserve();
      return {
        store: new Store(reserved),
        close: async () => {
          reserved.release();
          await sql.end();
        },
      };
    },
  },
];

/** A statement on the client a function writes with, of either driver. */
export async function exec(client: TransactionClient, text: string, params: unknown[] = []): Promise<unknown[]> {
  if (typeof client === "function") {
    return [...(await (client as postgres.Sql).unsafe(text, params as postgres.ParameterOrJSON<never>[]))];
  }
  return (await (client as pg.ClientBase).query(text, params)).rows as unknown[];
}

/**
 * The caller's transactions exactly-once runs in: `within(body, commit)` opens one, gives
 * `body` its client, and commits (or rolls back) after it.
 */
export interface TxKind {
  name: string;
  /** node-postgres connections can be idle (no caller's transaction: the call makes its own). */
  idle?: boolean;
  within<T>(body: (client: TransactionClient) => Promise<T>, options?: { commit?: boolean; isolation?: string }): Promise<T>;
}

/** Thrown to make sql.begin roll back. */
class Rollback extends Error {}

export const TX_KINDS: readonly TxKind[] = [
  {
    name: "pg PoolClient in BEGIN",
    within: async (body, { commit = true, isolation = "READ COMMITTED" } = {}) => {
      const pool = new pg.Pool({ connectionString: DSN, max: 1 });
      const conn = await pool.connect();
      try {
        await conn.query(`BEGIN ISOLATION LEVEL ${isolation}`);
        try {
          const result = await body(conn);
          await conn.query(commit ? "COMMIT" : "ROLLBACK");
          return result;
        } catch (e) {
          await conn.query("ROLLBACK");
          throw e;
        }
      } finally {
        conn.release();
        await pool.end();
      }
    },
  },
  {
    name: "pg Client, idle",
    idle: true,
    within: async (body) => {
      const client = new pg.Client({ connectionString: DSN });
      await client.connect();
      try {
        return await body(client);
      } finally {
        await client.end();
      }
    },
  },
  {
    name: "pg Client in BEGIN",
    within: async (body, { commit = true, isolation = "READ COMMITTED" } = {}) => {
      const client = new pg.Client({ connectionString: DSN });
      await client.connect();
      try {
        await client.query(`BEGIN ISOLATION LEVEL ${isolation}`);
        try {
          const result = await body(client);
          await client.query(commit ? "COMMIT" : "ROLLBACK");
          return result;
        } catch (e) {
          await client.query("ROLLBACK");
          throw e;
        }
      } finally {
        await client.end();
      }
    },
  },
  {
    name: "postgres.js sql.begin",
    within: async <T>(
      body: (client: TransactionClient) => Promise<T>,
      { commit = true, isolation = "READ COMMITTED" }: { commit?: boolean; isolation?: string } = {},
    ) => {
      const sql = postgresJs();
      let result: T | undefined;
      try {
        await sql.begin(`isolation level ${isolation.toLowerCase()}`, async (tx) => {
          result = await body(tx);
          if (!commit) throw new Rollback();
        });
      } catch (e) {
        if (!(e instanceof Rollback)) throw e;
      } finally {
        await sql.end();
      }
      return result as T;
    },
  },
];
