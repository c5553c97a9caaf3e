// The send_email example against a real database with the SQL API installed.
// PGIDEM_DSN: a libpq connection string ("host=/tmp port=5432 user=postgres dbname=x") or
// a postgres:// URL (scripts/test-examples.sh sets it).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import {
  COMPLETE, begin, complete, deliver, sendEmail, sendEmailByContent, sendEmailInTransaction,
} from './send_email.js';

// node-postgres parses URLs, not libpq "key=value" strings: map the fields by hand.
// A host that is a directory (a unix socket folder) works as `host` in pg too.
function pgConfig(dsn) {
  if (/^postgres(ql)?:\/\//.test(dsn)) return { connectionString: dsn };
  const names = { host: 'host', port: 'port', user: 'user', dbname: 'database', password: 'password' };
  const config = {};
  for (const [, key, quoted, plain] of dsn.matchAll(/(\w+)\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))/g)) {
    if (names[key]) config[names[key]] = quoted !== undefined ? quoted.replace(/\\(.)/g, '$1') : plain;
  }
  return config;
}

if (!process.env.PGIDEM_DSN) throw new Error('set PGIDEM_DSN to a libpq conninfo or URL');
const config = pgConfig(process.env.PGIDEM_DSN);
const pool = new pg.Pool({ ...config, max: 4 });

before(() => pool.query(`CREATE TABLE IF NOT EXISTS outbox (
  id serial PRIMARY KEY, recipient text NOT NULL, upstream_key uuid NOT NULL,
  sent_at timestamptz NOT NULL DEFAULT clock_timestamp())`));
after(() => pool.end());

// A client of its own (a session), closed when the test ends.
async function connect(t) {
  const client = new pg.Client(config);
  await client.connect();
  t.after(() => client.end());
  return client;
}

// One call id and one recipient per test: emails() counts this test's.
function newCall() {
  const call = `call-${randomUUID()}`;
  return { call, to: `${call}@example.com` };
}

// The same database as PGIDEM_DSN, logged in as another role. (pg lets a URL's user win
// over a `user` field beside it: change the URL itself.)
function loggedInAs(user, password) {
  if (!config.connectionString) return { ...config, user, password };
  const url = new URL(config.connectionString);
  [url.username, url.password] = [encodeURIComponent(user), encodeURIComponent(password)];
  return { connectionString: url.href };
}

// Two login roles of their own (unique names, members of idempotency_user), one client
// logged in as each: [{ name, client }, ...]. When the test ends: the clients close, the
// roles' records of `call` are forgotten, their grants revoked and the roles dropped.
async function twoRoles(t, call) {
  const suffix = randomUUID().replaceAll('-', '').slice(0, 12);
  const names = [`pidem_ex_${suffix}_a`, `pidem_ex_${suffix}_b`];
  const password = randomUUID(); // unused where local connections are trusted
  const roles = [];
  t.after(async () => {
    for (const { client } of roles) await client.end();
    for (const name of names) {
      const { rowCount } = await pool.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [name]);
      if (rowCount === 0) continue;
      await pool.query("SELECT public.idem_forget('send_email', $1, owner => quote_ident($2)::regrole)", [call, name]);
      await pool.query(`DROP OWNED BY ${pg.escapeIdentifier(name)}`);
      await pool.query(`DROP ROLE ${pg.escapeIdentifier(name)}`);
    }
  });
  for (const name of names) {
    // A name is an identifier, a password a literal: quote both (DDL takes no parameters).
    const role = pg.escapeIdentifier(name);
    await pool.query(`CREATE ROLE ${role} LOGIN PASSWORD ${pg.escapeLiteral(password)} IN ROLE idempotency_user`);
    await pool.query(`GRANT SELECT, INSERT ON outbox TO ${role}`);
    await pool.query(`GRANT USAGE ON SEQUENCE outbox_id_seq TO ${role}`);
    const client = new pg.Client(loggedInAs(name, password));
    await client.connect();
    roles.push({ name, client });
  }
  return roles;
}

async function emails(db, to) {
  const { rows } = await db.query('SELECT count(*)::int AS n FROM outbox WHERE recipient = $1', [to]);
  return rows[0].n;
}

async function lookup(db, call) {
  const { rows } = await db.query("SELECT state, fence, expires_at FROM public.idem_lookup('send_email', $1)", [call]);
  return rows[0];
}

test('three retries send one email', async () => {
  const { call, to } = newCall();
  const results = [];
  for (let i = 0; i < 3; i++) results.push(await sendEmail(pool, call, to));
  assert.deepEqual(results.map((r) => r.outcome), ['sent', 'replay', 'replay']);
  assert.equal(await emails(pool, to), 1);
  assert.deepEqual(results[1].response, results[0].response);
  assert.deepEqual(results[2].response, results[0].response);
  assert.equal((await lookup(pool, call)).state, 'succeeded');
});

test('a replay returns the stored response', async (t) => {
  const { call, to } = newCall();
  const [first, other] = [await connect(t), await connect(t)];
  const sent = await sendEmail(first, call, to);
  const replay = await begin(other, call, to); // another session, as a retry from elsewhere
  assert.equal(replay.outcome, 'replay');
  assert.equal(replay.fence, null); // a duplicate never learns a fence
  assert.equal(replay.attempt, 1);
  assert.deepEqual(replay.response, sent.response); // jsonb arrives parsed
  assert.equal(typeof sent.response.email_id, 'number');
});

const WAITING = `
  SELECT wait_event FROM pg_stat_activity
  WHERE pid = $1 AND state = 'active' AND query LIKE '%idem_begin%'
    AND wait_event IN ('Extension', 'PgSleep')`;

test('in_progress, then wait replays the holder\'s result', async (t) => {
  const { call, to } = newCall();
  const [holder, duplicate, waiter, monitor] = [await connect(t), await connect(t), await connect(t), await connect(t)];
  const { rows: [{ pid }] } = await waiter.query('SELECT pg_backend_pid() AS pid');
  let plain, waited, waiterDone = false;

  async function slowProvider(db, to_, upstreamKey) {
    // While the holder sends: a duplicate without wait is told in_progress ...
    plain = await sendEmail(duplicate, call, to);
    // ... and one with wait stays inside idem_begin until the holder completes.
    waited = sendEmail(waiter, call, to, { wait: '1 minute' });
    waited.finally(() => { waiterDone = true; }).catch(() => {});
    // The extension waits on a latch (wait_event Extension); the portable variant naps in
    // pg_sleep (PgSleep) and shows no wait_event between naps: poll.
    const deadline = Date.now() + 30_000;
    while ((await monitor.query(WAITING, [pid])).rowCount === 0) {
      if (waiterDone) assert.fail(`the waiter returned without waiting: ${JSON.stringify(await waited)}`);
      assert.ok(Date.now() < deadline, 'the waiter never waited');
    }
    return deliver(db, to_, upstreamKey);
  }

  const sent = await sendEmail(holder, call, to, { lease: '1 minute', effect: slowProvider });
  assert.equal(sent.outcome, 'sent');
  assert.equal(plain.outcome, 'in_progress');
  assert.equal(typeof plain.retryAfterMs, 'number');
  assert.ok(plain.retryAfterMs > 0 && plain.retryAfterMs <= 60_000, `${plain.retryAfterMs}`);
  const replay = await waited;
  assert.equal(replay.outcome, 'replay');
  assert.deepEqual(replay.response, sent.response);
  assert.equal(await emails(monitor, to), 1);
});

test('in_progress carries retry_after as a postgres-interval object', async (t) => {
  const { call, to } = newCall();
  const [holder, other] = [await connect(t), await connect(t)];
  assert.equal((await begin(holder, call, to, { lease: '90 seconds' })).outcome, 'claimed');
  const busy = await begin(other, call, to);
  assert.equal(busy.outcome, 'in_progress');
  assert.equal(typeof busy.retry_after, 'object'); // fields: minutes, seconds, milliseconds, ...
  // The running call's estimated time left (the scope's calls here take well under a
  // minute), not the 90 s until the holder's lease lapses.
  assert.ok(busy.retry_after_ms > 0 && busy.retry_after_ms < 60_000, `${busy.retry_after_ms}`);
  assert.equal(busy.retry_after.minutes, undefined);
});

test('a transaction claims, writes and completes at once', async (t) => {
  const { call, to } = newCall();
  const other = await connect(t);
  async function effectInTheTransaction(db, to_, upstreamKey) {
    assert.equal(await lookup(other, call), undefined); // the claim is not committed yet
    return deliver(db, to_, upstreamKey);
  }
  const sent = await sendEmailInTransaction(pool, call, to, { effect: effectInTheTransaction });
  assert.equal(sent.outcome, 'sent');
  const again = await sendEmailInTransaction(pool, call, to);
  assert.equal(again.outcome, 'replay');
  assert.deepEqual(again.response, sent.response);
  assert.equal((await lookup(other, call)).state, 'succeeded');
  assert.equal(await emails(other, to), 1);
});

test('a rolled-back transaction leaves no claim and no email', async () => {
  const { call, to } = newCall();
  async function crashAfterInsert(db, to_, upstreamKey) {
    await deliver(db, to_, upstreamKey);
    throw new Error('crashed before completing');
  }
  await assert.rejects(sendEmailInTransaction(pool, call, to, { effect: crashAfterInsert }),
    /crashed before completing/);
  assert.equal(await lookup(pool, call), undefined);
  assert.equal(await emails(pool, to), 0);
  const retry = await begin(pool, call, to);
  assert.deepEqual([retry.outcome, retry.attempt, retry.recovered], ['claimed', 1, false]);
});

// Retries idem_begin until the lapsed lease is taken over (observable state, no sleep).
async function takeOver(db, call, to) {
  const deadline = Date.now() + 30_000;
  let claim;
  while ((claim = await begin(db, call, to)).outcome === 'in_progress') {
    assert.ok(Date.now() < deadline, 'the lease never lapsed');
  }
  return claim;
}

test('a stale fence raises IK003', async (t) => {
  const { call, to } = newCall();
  const [a, b] = [await connect(t), await connect(t)];
  const old = await begin(a, call, to, { lease: '20 milliseconds' }); // ttl: the default hour
  assert.equal(old.outcome, 'claimed');
  assert.match(old.fence, /^\d+$/); // int8 arrives as a string
  const taken = await takeOver(b, call, to);
  assert.deepEqual([taken.outcome, taken.recovered, taken.attempt], ['claimed', true, 2]);
  assert.ok(BigInt(taken.fence) > BigInt(old.fence)); // compare fences as BigInt
  assert.equal(taken.upstream_key, old.upstream_key);
  await assert.rejects(a.query(COMPLETE, [call, old.fence, '{}']), (err) => err.code === 'IK003');
  assert.equal(await complete(a, call, old.fence, { email_id: -1 }), false); // the example's handling
  const record = await lookup(a, call);
  assert.deepEqual([record.state, record.fence], ['in_progress', taken.fence]); // nothing changed
  assert.ok(record.expires_at instanceof Date); // timestamptz: a Date, milliseconds only
  assert.equal(await complete(b, call, taken.fence, { email_id: 2 }), true);
  assert.deepEqual((await begin(a, call, to)).response, { email_id: 2 });
});

test('lease lost is reported and the effect not retried', async (t) => {
  const { call, to } = newCall();
  const [a, b] = [await connect(t), await connect(t)];
  let aSends = 0, bResult;
  async function slowProvider(db, to_, upstreamKey) {
    aSends++;
    const sent = await deliver(db, to_, upstreamKey);
    // The provider is slow: A's lease lapses, and a retry (B) takes the call over.
    const deadline = Date.now() + 30_000;
    while ((bResult = await sendEmail(b, call, to)).outcome === 'in_progress') {
      assert.ok(Date.now() < deadline, 'the lease never lapsed');
    }
    return sent;
  }
  const result = await sendEmail(a, call, to, { lease: '20 milliseconds', effect: slowProvider });
  assert.equal(result.outcome, 'lease_lost');
  assert.equal(aSends, 1);
  assert.deepEqual([bResult.outcome, bResult.recovered], ['sent', true]);
  // B resent (A's outcome was unknown to it) with the same upstream key: a provider that
  // honours Idempotency-Key sends one email; B's result is the call's.
  const { rows: [row] } = await a.query(
    'SELECT count(*)::int AS n, count(DISTINCT upstream_key)::int AS keys FROM outbox WHERE recipient = $1', [to]);
  assert.deepEqual(row, { n: 2, keys: 1 });
  const replay = await sendEmail(a, call, to);
  assert.deepEqual(replay.response, bResult.response);
  assert.notDeepEqual(replay.response, result.response);
});

test('the email is its own key', async () => {
  const { to } = newCall();
  // One email, three spellings: key order and whitespace differ, the content does not.
  const spellings = [
    `{"to": "${to}", "subject": "Welcome"}`,
    `{"subject":"Welcome","to":"${to}"}`,
    `{\n  "subject" :  "Welcome" ,\n\t"to" : "${to}"\n}`,
  ];
  const results = [];
  for (const email of spellings) results.push(await sendEmailByContent(pool, email));
  assert.deepEqual(results.map((r) => r.outcome), ['sent', 'replay', 'replay']);
  assert.equal(await emails(pool, to), 1);
  assert.deepEqual(results[1].response, results[0].response);
  assert.deepEqual(results[2].response, results[0].response);
  // The key the server derived, as idem_hash computes it (no hashing in JavaScript).
  const { rows: [{ derived }] } = await pool.query(
    "SELECT encode(public.idem_hash($1::jsonb), 'hex') AS derived", [spellings[1]]);
  assert.deepEqual(results.map((r) => r.key), [derived, derived, derived]);
  assert.equal((await lookup(pool, derived)).state, 'succeeded'); // completed under that key
  // Another email is another call, with another key.
  const other = await sendEmailByContent(pool, { to, subject: 'Welcome back' });
  assert.equal(other.outcome, 'sent');
  assert.notEqual(other.key, derived);
  assert.notDeepEqual(other.response, results[0].response);
  assert.equal(await emails(pool, to), 2);
});

test('each role has its own key space', async (t) => {
  const { call, to } = newCall();
  const [a, b] = await twoRoles(t, call);
  const sentA = await sendEmail(a.client, call, to);
  const sentB = await sendEmail(b.client, call, to); // the same call id, another role: another call
  assert.deepEqual([sentA.outcome, sentB.outcome], ['sent', 'sent']);
  assert.notDeepEqual(sentA.response, sentB.response);
  assert.equal(await emails(pool, to), 2);
  // Each role replays its own result, and owns its own record.
  const [replayA, replayB] = [await sendEmail(a.client, call, to), await sendEmail(b.client, call, to)];
  assert.deepEqual([replayA.outcome, replayA.response], ['replay', sentA.response]);
  assert.deepEqual([replayB.outcome, replayB.response], ['replay', sentB.response]);
  const owner = "SELECT owner::text FROM public.idem_lookup('send_email', $1)";
  assert.deepEqual((await a.client.query(owner, [call])).rows, [{ owner: a.name }]);
  assert.deepEqual((await b.client.query(owner, [call])).rows, [{ owner: b.name }]);
  assert.equal(await lookup(pool, call), undefined); // nor is it the connecting role's call
  assert.equal(await emails(pool, to), 2);
});
