// An idempotent send_email in Node.js (node-postgres) on pg_idempotency's SQL API.
//
// Three retries of sendEmail(pool, 'call-1', 'ann@example.com') send one email: the first
// claims the call, sends, and records the result; the others replay that result. Without
// a call id, sendEmailByContent(pool, email) makes the email itself the key (HASH_INPUT).
// `db` is a pg.Pool or a pg.Client: each statement here commits on its own. For a side
// effect that is a write to the same database, use sendEmailInTransaction.

// Named arguments say what each value is; the casts give each parameter its type. The
// functions are named with their schema (public, where CREATE EXTENSION puts them; yours if
// you installed elsewhere): an unqualified call would run whatever idem_begin a schema
// earlier on the search_path holds (docs/security.md).
// fence is a bigint: pg returns int8 as a string; pass it back as that string (or a
// BigInt), never as a Number (precision ends at 2^53).
const BEGIN = `
  SELECT outcome, fence, attempt, recovered, upstream_key, response, retry_after,
         ceil(extract(epoch FROM retry_after) * 1000)::int AS retry_after_ms
  FROM public.idem_begin(scope => 'send_email', key => $1, request => $2::jsonb,
                  lease => $3::interval, wait => $4::interval)`;
export const COMPLETE = `
  SELECT state FROM public.idem_complete(scope => 'send_email', key => $1,
                                  fence => $2::bigint, response => $3::jsonb)`;

// HASH_INPUT: key NULL, and the server derives the key from the request's canonical JSON;
// the `key` column hands it back for idem_complete (COMPLETE above takes it as it is).
const BEGIN_BY_CONTENT = `
  SELECT outcome, fence, attempt, recovered, upstream_key, response, retry_after, key,
         ceil(extract(epoch FROM retry_after) * 1000)::int AS retry_after_ms
  FROM public.idem_begin(scope => 'send_email', key => NULL, request => $1::jsonb,
                  lease => $2::interval, wait => $3::interval)`;

export const LEASE_LOST = 'IK003'; // SQLSTATEs: docs/errors.md

// The side effect: hand the email to the provider (here: a row in the outbox table).
// upstreamKey is the same on every attempt, a takeover included: send it to the
// provider as its Idempotency-Key.
export async function deliver(db, to, upstreamKey) {
  const { rows } = await db.query(
    'INSERT INTO outbox (recipient, upstream_key) VALUES ($1, $2) RETURNING id',
    [to, upstreamKey]);
  return { email_id: rows[0].id };
}

// idem_begin: lease and wait are interval strings ('20 milliseconds') or null.
export async function begin(db, callId, to, { lease = null, wait = null } = {}) {
  // Stringify JSON yourself: pg sends a JS array as a Postgres array literal, not JSON.
  const { rows } = await db.query(BEGIN, [callId, JSON.stringify({ to }), lease, wait]);
  return rows[0];
}

// idem_complete. false when the fence is stale (IK003, lease lost): the lease lapsed and
// another worker took the call over; it owns the call and records its result.
export async function complete(db, callId, fence, response) {
  try {
    await db.query(COMPLETE, [callId, fence, JSON.stringify(response)]);
    return true;
  } catch (err) {
    if (err.code === LEASE_LOST) return false; // err.detail and err.hint say more
    throw err;
  }
}

// One call of the send_email tool. If `effect` throws, the claim stays until its lease
// lapses; a retry after that takes it over (recovered: true) with the same upstream key.
export async function sendEmail(db, callId, to, { lease, wait, effect = deliver } = {}) {
  const claim = await begin(db, callId, to, { lease, wait });
  if (claim.outcome === 'replay') return { outcome: 'replay', response: claim.response };
  if (claim.outcome === 'in_progress') {
    // retry_after arrives as a postgres-interval object; retry_after_ms is a plain number.
    return { outcome: 'in_progress', retryAfterMs: claim.retry_after_ms };
  }
  const response = await effect(db, to, claim.upstream_key);
  if (!(await complete(db, callId, claim.fence, response))) {
    // Someone else owns this call now: do not retry the effect, do not overwrite their
    // result. Report it; a later retry of the call replays their result.
    return { outcome: 'lease_lost', response, recovered: claim.recovered };
  }
  return { outcome: 'sent', response, recovered: claim.recovered };
}

// One call of the send_email tool keyed by what it sends (HASH_INPUT): `email` is an object,
// or JSON text as it arrived (an HTTP body, say), with at least "to". The server parses and
// canonicalises it, so the same email spelled with other key order or whitespace is the
// same call; there is nothing to hash here, and no canonical JSON to get right: the key
// idem_begin derived comes back in its `key` column, and idem_complete gets that.
export async function sendEmailByContent(db, email, { lease = null, wait = null, effect = deliver } = {}) {
  const text = typeof email === 'string' ? email : JSON.stringify(email);
  const { to } = JSON.parse(text);
  const { rows: [claim] } = await db.query(BEGIN_BY_CONTENT, [text, lease, wait]);
  const { key } = claim;
  if (claim.outcome === 'replay') return { outcome: 'replay', response: claim.response, key };
  if (claim.outcome === 'in_progress') {
    return { outcome: 'in_progress', retryAfterMs: claim.retry_after_ms, key };
  }
  const response = await effect(db, to, claim.upstream_key);
  if (!(await complete(db, key, claim.fence, response))) {
    return { outcome: 'lease_lost', response, recovered: claim.recovered, key };
  }
  return { outcome: 'sent', response, recovered: claim.recovered, key };
}

// Exactly-once when the effect is a write to this database: idem_begin, the write and
// idem_complete in ONE transaction on ONE pooled client (pool.query could run each
// statement on another connection). If anything throws, the transaction rolls back, and
// the claim vanishes with the outbox row.
export async function sendEmailInTransaction(pool, callId, to, { effect = deliver } = {}) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const claim = await begin(client, callId, to);
    let result = { outcome: claim.outcome, response: claim.response };
    if (claim.outcome === 'claimed') {
      const response = await effect(client, to, claim.upstream_key);
      // No IK003 here: until we commit, a duplicate waits on our row, then replays.
      await client.query(COMPLETE, [callId, claim.fence, JSON.stringify(response)]);
      result = { outcome: 'sent', response };
    }
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
}
