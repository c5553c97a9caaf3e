// The Node.js side of the peers benchmark: one peer, some cases, one JSON document on stdout.
//
//   node driver.js '<spec as JSON>'
//
// The spec names the peer and where its store listens (the benchmark passes the delay
// forwarder's port, never the server's own), and the cases to run in order:
//
//   {"peer": "node-idempotency" | "express-idempotency" | "sql" | "sql-express" | "naive",
//    "host": "127.0.0.1", "port": 5432, "dbname": "...", "user": "...",
//    "cases": [{"case": "new" | "replay" | "hot" | "failure", ...}, ...]}
//
// Each case answers {"case", "latencies_ns", "seconds", "executions", "keys", "outcomes"}:
// how many times the function body actually ran is counted in the body. `{"peer":
// "versions"}` prints the versions of what is installed.
//
// The peers:
// - node-idempotency: @node-idempotency/core's `Idempotency` (onRequest, the body,
//   onResponse) over @node-idempotency/storage-adapter-redis;
// - express-idempotency: its middleware on an express route, in its shipped configuration
//   (in-memory storage: it ships no shared store but a third-party MongoDB adapter), called
//   over HTTP on 127.0.0.1 from this process with a keep-alive agent;
// - sql: pg_idempotency's SQL API with node-postgres (`idem_begin`, the body,
//   `idem_complete`), as a Node service would call it;
// - sql-express: the same SQL calls inside an express route, called over HTTP like
//   express-idempotency, so that the two differ only in the idempotency layer;
// - naive: the hand-written SELECT, then INSERT, then UPDATE on `bench_floor`, as
//   bench/src/workloads/calls.rs does it in Rust.
'use strict';

const crypto = require('crypto');
const http = require('http');

const REPLAY_KEYS = 100;

const body = {
  executions: 0,
  run(key) {
    this.executions += 1;
    if (key.startsWith('fail-')) {
      const e = new Error(key);
      e.failed = true;
      throw e;
    }
    return { ok: true };
  },
};

function fresh(prefix) {
  return `${prefix}-${crypto.randomUUID()}`;
}

// ---- node-idempotency over Redis -------------------------------------------------------

async function nodeIdempotencyPeer(spec) {
  const { Idempotency } = require('@node-idempotency/core');
  const { RedisStorageAdapter } = require('@node-idempotency/storage-adapter-redis');
  const storage = new RedisStorageAdapter({ url: `redis://${spec.host}:${spec.port}` });
  await storage.connect();
  const idem = new Idempotency(storage, { cacheTTLMS: 3600 * 1000 });
  const call = async (key) => {
    const req = { headers: { 'idempotency-key': key }, path: '/work', method: 'POST', body: { key } };
    let cached;
    try {
      cached = await idem.onRequest(req);
    } catch (e) {
      if (e.code === 'REQUEST_IN_PROGRESS') return 'in_progress';
      throw e;
    }
    if (cached) return cached.error ? 'failed' : 'replay';
    try {
      const result = body.run(key);
      await idem.onResponse(req, { body: result });
      return 'ok';
    } catch (e) {
      if (!e.failed) throw e;
      // The library stores what it is given: a response with `error` is replayed as one.
      await idem.onResponse(req, { error: { message: e.message } });
      return 'failed';
    }
  };
  return { call, close: () => storage.disconnect() };
}

// ---- PostgreSQL: the SQL API and the naive pattern -------------------------------------

function pgClient(spec) {
  const { Client } = require('pg');
  return new Client({ host: spec.host, port: spec.port, database: spec.dbname, user: spec.user });
}

// Named statements: node-postgres prepares each once per connection, then one round trip
// per statement, as the Rust rows and psycopg (prepare_threshold=0) do.
const BEGIN = { name: 'begin', text: 'SELECT outcome, fence, succeeded FROM idem_begin($1, $2)' };
const COMPLETE = {
  name: 'complete',
  text: 'SELECT state FROM idem_complete($1, $2, $3, $4::jsonb, $5, $6)',
};

async function sqlCall(client, key) {
  const begun = (await client.query({ ...BEGIN, values: ['bench_node', key] })).rows[0];
  if (begun.outcome === 'in_progress') return 'in_progress';
  if (begun.outcome === 'replay') return begun.succeeded ? 'replay' : 'failed';
  try {
    const result = body.run(key);
    await client.query({
      ...COMPLETE,
      values: ['bench_node', key, begun.fence, JSON.stringify(result), true, null],
    });
    return 'ok';
  } catch (e) {
    if (!e.failed) throw e;
    const error = JSON.stringify({ error: e.message });
    await client.query({ ...COMPLETE, values: ['bench_node', key, begun.fence, error, false, true] });
    return 'failed';
  }
}

// The same statements as the Rust naive client (bench/src/workloads/calls.rs).
const NAIVE_SELECT = {
  name: 'naive_select',
  text: 'SELECT state, response FROM bench_floor WHERE scope = $1 AND key = $2',
};
const NAIVE_INSERT = {
  name: 'naive_insert',
  text:
    "INSERT INTO bench_floor (scope, key, state, fence, attempt, upstream_key, created_at, " +
    "lease_until, expires_at, ttl, owner) VALUES ($1, $2, 'in_progress', 0, 1, gen_random_uuid(), " +
    "now(), now() + interval '1 minute', now() + interval '1 hour', interval '1 hour', " +
    'current_user::regrole) ON CONFLICT DO NOTHING',
};
const NAIVE_UPDATE = {
  name: 'naive_update',
  text:
    "UPDATE bench_floor SET state = 'succeeded', response = $1::jsonb, completed_at = now(), " +
    "lease_until = NULL, expires_at = now() + interval '1 hour' WHERE scope = $2 AND key = $3",
};

async function naiveCall(client, key) {
  const found = await client.query({ ...NAIVE_SELECT, values: ['naive_node', key] });
  if (found.rows.length > 0) return 'replay';
  await client.query({ ...NAIVE_INSERT, values: ['naive_node', key] });
  const result = body.run(key);
  await client.query({ ...NAIVE_UPDATE, values: [JSON.stringify(result), 'naive_node', key] });
  return 'ok';
}

// One connection per concurrent caller: a hot key's duplicates reach the server at once, as
// separate services' would. Calls of one caller go one after another on its connection.
async function pgPeer(spec, fn, concurrency) {
  const clients = [];
  for (let i = 0; i < concurrency; i++) {
    const c = pgClient(spec);
    await c.connect();
    clients.push(c);
  }
  return {
    call: (key, slot = 0) => fn(clients[slot], key),
    close: () => Promise.all(clients.map((c) => c.end())),
  };
}

// ---- express: express-idempotency, and the SQL API behind the same route ---------------

async function expressPeer(spec, withSql, concurrency) {
  const express = require('express');
  const app = express();
  app.use(express.json());
  let pool = null;
  if (withSql) {
    const { Pool } = require('pg');
    pool = new Pool({
      host: spec.host,
      port: spec.port,
      database: spec.dbname,
      user: spec.user,
      max: concurrency,
    });
    app.post('/work', async (req, res) => {
      const client = await pool.connect();
      try {
        const outcome = await sqlCall(client, req.get('idempotency-key'));
        const status = { ok: 201, replay: 201, failed: 500, in_progress: 409 }[outcome];
        res.status(status).json({ outcome });
      } catch (e) {
        res.status(503).json({ error: e.message });
      } finally {
        client.release();
      }
    });
  } else {
    const { idempotency, getSharedIdempotencyService } = require('express-idempotency');
    app.post('/work', idempotency(), (req, res) => {
      if (getSharedIdempotencyService().isHit(req)) return; // the middleware answered
      try {
        res.status(201).json(body.run(req.get('idempotency-key')));
      } catch (e) {
        if (!e.failed) throw e;
        res.status(500).json({ error: e.message });
      }
    });
    // A request while the first is in progress: the middleware passes 409 to next(err).
    app.use((err, req, res, next) => {
      if (res.statusCode === 409) return res.json({ outcome: 'in_progress' });
      return next(err);
    });
  }
  // Pre-connect the pool so that connecting is not timed.
  if (pool) {
    const held = [];
    for (let i = 0; i < concurrency; i++) held.push(await pool.connect());
    held.forEach((c) => c.release());
  }
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  const port = server.address().port;
  const post = (key) =>
    new Promise((resolve, reject) => {
      const payload = JSON.stringify({ key });
      const req = http.request(
        {
          host: '127.0.0.1',
          port,
          path: '/work',
          method: 'POST',
          agent,
          headers: {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(payload),
            'idempotency-key': key,
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode));
        },
      );
      req.on('error', reject);
      req.end(payload);
    });
  const call = async (key) => {
    const status = await post(key);
    if (status === 409) return 'in_progress';
    if (status === 500) return 'failed';
    if (status === 201 || status === 200) return 'ok';
    return `status ${status}`;
  };
  return {
    call,
    close: async () => {
      agent.destroy();
      server.close();
      if (pool) await pool.end();
    },
  };
}

// ---- the cases -------------------------------------------------------------------------

const now = () => process.hrtime.bigint();

// Calls one after another: `calls` of them when given (round-trip counting: one call first,
// so that connecting is done before the count), else for duration_s after warmup_s.
async function timedLoop(call, keys, c) {
  const latencies = [];
  if (c.calls !== undefined && c.calls !== null) {
    await call(keys());
    const before = body.executions;
    const start = now();
    for (let i = 0; i < c.calls; i++) {
      const t = now();
      await call(keys());
      latencies.push(Number(now() - t));
    }
    return { latencies, seconds: Number(now() - start) / 1e9, executions: body.executions - before };
  }
  let end = Date.now() + (c.warmup_s || 0) * 1000;
  while (Date.now() < end) await call(keys());
  const before = body.executions;
  const start = now();
  end = Date.now() + (c.duration_s || 0) * 1000;
  while (Date.now() < end) {
    const t = now();
    await call(keys());
    latencies.push(Number(now() - t));
  }
  return { latencies, seconds: Number(now() - start) / 1e9, executions: body.executions - before };
}

// `concurrency` async callers wait on one promise and call one new key when it resolves:
// they are released together, nothing sleeps to order them.
async function hot(call, concurrency, rounds) {
  const latencies = [];
  const outcomes = {};
  const started = now();
  for (let r = 0; r < rounds; r++) {
    const key = fresh('hot');
    let release;
    const gate = new Promise((go) => (release = go));
    const callers = [];
    for (let i = 0; i < concurrency; i++) {
      callers.push(
        gate.then(async () => {
          const t = now();
          let o;
          try {
            o = await call(key, i);
          } catch (e) {
            o = e.code || e.name || 'error';
          }
          latencies.push(Number(now() - t));
          outcomes[o] = (outcomes[o] || 0) + 1;
        }),
      );
    }
    release();
    await Promise.all(callers);
  }
  return { latencies, seconds: Number(now() - started) / 1e9, outcomes };
}

async function failure(call, rounds, retries) {
  const latencies = [];
  const outcomes = {};
  const started = now();
  for (let r = 0; r < rounds; r++) {
    const key = fresh('fail');
    for (let i = 0; i <= retries; i++) {
      const t = now();
      const o = await call(key);
      if (i > 0) {
        latencies.push(Number(now() - t));
        outcomes[o] = (outcomes[o] || 0) + 1;
      }
    }
  }
  return { latencies, seconds: Number(now() - started) / 1e9, outcomes };
}

async function runCase(c, peer) {
  const before = body.executions;
  let out;
  let keys = 0;
  if (c.case === 'new') {
    out = await timedLoop(peer.call, () => fresh('new'), c);
    keys = out.latencies.length;
  } else if (c.case === 'replay') {
    const stored = Array.from({ length: REPLAY_KEYS }, () => fresh('replay'));
    for (const k of stored) await peer.call(k);
    let n = 0;
    out = await timedLoop(peer.call, () => stored[n++ % REPLAY_KEYS], c);
  } else if (c.case === 'hot') {
    out = await hot(peer.call, c.concurrency, c.rounds);
    keys = c.rounds;
  } else if (c.case === 'failure') {
    out = await failure(peer.call, c.rounds, c.retries);
    keys = c.rounds;
  } else {
    throw new Error(`unknown case ${c.case}`);
  }
  return {
    case: c.case,
    latencies_ns: out.latencies,
    seconds: out.seconds,
    executions: out.executions !== undefined ? out.executions : body.executions - before,
    keys,
    outcomes: out.outcomes || {},
  };
}

function versions() {
  const out = { node: process.version };
  for (const p of [
    '@node-idempotency/core',
    '@node-idempotency/storage-adapter-redis',
    '@node-idempotency/storage',
    'express-idempotency',
    'express',
    'pg',
    'redis',
  ]) {
    out[p] = require(`${p}/package.json`).version;
  }
  return out;
}

async function main() {
  const spec = JSON.parse(process.argv[2]);
  if (spec.peer === 'versions') {
    process.stdout.write(`${JSON.stringify(versions())}\n`);
    return;
  }
  // The widest hot key of the spec: that many connections, made before anything is timed.
  const width = Math.max(1, ...spec.cases.map((c) => c.concurrency || 1));
  let peer;
  switch (spec.peer) {
    case 'node-idempotency':
      peer = await nodeIdempotencyPeer(spec);
      break;
    case 'express-idempotency':
      peer = await expressPeer(spec, false, width);
      break;
    case 'sql-express':
      peer = await expressPeer(spec, true, width);
      break;
    case 'sql':
      peer = await pgPeer(spec, sqlCall, width);
      break;
    case 'naive':
      peer = await pgPeer(spec, naiveCall, width);
      break;
    default:
      throw new Error(`unknown peer ${spec.peer}`);
  }
  const results = [];
  for (const c of spec.cases) results.push(await runCase(c, peer));
  await peer.close();
  process.stdout.write(`${JSON.stringify({ results })}\n`);
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
