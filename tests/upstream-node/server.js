// A payment provider that deduplicates on Idempotency-Key itself, with a library we did not
// write (express-idempotency, in its default configuration: a 2xx answer is remembered and
// replayed for the same key, a request while the first is still running gets 409, a non-2xx
// answer is forgotten). It counts what really happened so a test can tell a replay from a
// second execution.
//
//   node server.js [port]    (0 or none: any free port; the port is printed on stdout)
//
// POST /charges            a charge: the handler's one side effect is `executions += 1`.
//                          Body {"hold": true}: the handler waits for POST /release before
//                          it executes (a provider that is slow while the caller gives up).
//                          Body {"fail": 503}: answers that status without executing.
// POST /orders             an order's creation, and
// POST /orders/:id/cancel  its cancellation: each execution counts in `executions` too. The
//                          middleware refuses (417) a key reused with another request (another
//                          path or body), as Stripe does: two actions must not send one key.
// GET  /executions         {"started", "executions", "replays", "conflicts", "remembered",
//                           "held", "misused"}
// POST /release            lets every held request go on.
'use strict';

const express = require('express');
const { idempotency, getSharedIdempotencyService } = require('express-idempotency');

// The library's in-memory adapter, with one thing more: how many answers it holds, so a test
// can see that the first request's answer was remembered before it retries.
class CountingAdapter {
  constructor() {
    this.resources = new Map();
  }
  async findByIdempotencyKey(key) {
    return this.resources.get(key) || null;
  }
  async create(resource) {
    if (this.resources.has(resource.idempotencyKey)) throw new Error('Duplicate');
    this.resources.set(resource.idempotencyKey, resource);
  }
  async update(resource) {
    this.resources.set(resource.idempotencyKey, resource);
  }
  async delete(key) {
    this.resources.delete(key);
  }
  remembered() {
    let n = 0;
    for (const r of this.resources.values()) if (r.response) n += 1;
    return n;
  }
}

const adapter = new CountingAdapter();
const counts = { started: 0, executions: 0, replays: 0, conflicts: 0, misused: 0 };
let held = [];

const app = express();
app.use(express.json());

app.post('/charges', idempotency({ dataAdapter: adapter }), async (req, res) => {
  // The middleware has already answered a repeat of a remembered key.
  if (getSharedIdempotencyService().isHit(req)) {
    counts.replays += 1;
    return;
  }
  counts.started += 1;
  const body = req.body || {};
  if (body.hold) await new Promise((go) => held.push(go));
  if (body.fail) {
    res.status(Number(body.fail)).json({ error: 'failed before charging' });
    return;
  }
  counts.executions += 1;
  res.status(201).json({
    id: `ch_${counts.executions}`,
    amount: body.amount,
    execution: counts.executions,
    key: req.get('idempotency-key') || null,
  });
});

const orders = async (req, res) => {
  if (getSharedIdempotencyService().isHit(req)) {
    counts.replays += 1;
    return;
  }
  counts.started += 1;
  counts.executions += 1;
  res.status(201).json({
    what: req.params.id ? 'cancelled' : 'created',
    order: req.params.id || (req.body || {}).order,
    execution: counts.executions,
    key: req.get('idempotency-key') || null,
  });
};
app.post('/orders', idempotency({ dataAdapter: adapter }), orders);
app.post('/orders/:id/cancel', idempotency({ dataAdapter: adapter }), orders);

app.get('/executions', (req, res) => {
  res.json({ ...counts, remembered: adapter.remembered(), held: held.length });
});

app.post('/release', (req, res) => {
  const n = held.length;
  held.forEach((go) => go());
  held = [];
  res.json({ released: n });
});

// The middleware reports a request whose key is still running (409) or misused (417) as an
// error with the status already set; answer it as JSON.
app.use((err, req, res, next) => {
  if (res.statusCode === 409) counts.conflicts += 1;
  if (res.statusCode === 417) counts.misused += 1;
  const status = res.statusCode >= 400 ? res.statusCode : 500;
  res.status(status).json({ error: err.message });
});

const server = app.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  process.stdout.write(`${server.address().port}\n`);
});
