/**
 * The documented exactly-once examples typecheck with the drivers' own types (a pg
 * PoolClient, a postgres.js TransactionSql and root Sql): tsc compiles this file; the test
 * checks only that the wrappers are functions of the same arity.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import type { PoolClient } from "pg";
import type { Sql, TransactionSql } from "postgres";

import { idempotent, Store } from "../../src/index.js";

const placeOrderPg = idempotent(
  async function placeOrder(client: PoolClient, order: { id: string; sku: string }) {
    await client.query("INSERT INTO orders (id, sku) VALUES ($1, $2)", [order.id, order.sku]);
    return { order: order.id };
  },
  { transaction: (client) => client },
);

const placeOrderPostgresJs = idempotent(
  async function placeOrder(tx: TransactionSql, order: { id: string; sku: string }) {
    await tx`INSERT INTO orders (id, sku) VALUES (${order.id}, ${order.sku})`;
    return { order: order.id };
  },
  { transaction: (tx) => tx },
);

// A connection string is not a transaction's client, nor is a number.
idempotent(async function byUrl(url: string) { return Promise.resolve(url); }, {
  // @ts-expect-error -- the picker must answer a client
  transaction: (url) => url,
});

// A Store takes postgres.js's root sql and a transaction's sql as they are typed.
export const stores = (sql: Sql, tx: TransactionSql): Store[] => [new Store(sql), new Store(tx)];

void test("the documented exactly-once wrappers keep their functions' shape", () => {
  assert.equal(placeOrderPg.length, 2);
  assert.equal(placeOrderPostgresJs.length, 2);
  assert.equal(placeOrderPg.name, "placeOrder");
});
