-- Claim, or answer from the record. KEYS: record, fence counter, the scope's figures (a
-- hash: the claim-to-completion estimate in ms, held.lua's, and the outcome counters).
-- ARGV: fingerprint (hex or ''), ttl ms, lease ms, on_cache_hit, on_mismatch, a fresh uuid,
-- the attempt's claim token (or ''), whether an in_progress answer is the call's last
-- (1/0: a waiting call asks again and counts only its last answer), then
-- protocol::estimate's FLOOR_MS and UNKNOWN_MS, then the unresolved bound in ms (how long
-- past its ttl the record stays if its outcome becomes unknown). Every limit and default is applied in Rust
-- (client/src/limits.rs) before the script runs: the ttl and lease come in resolved.
--
-- The record's state machine is protocol::decide's (protocol/src/decide.rs), which the
-- extension and MemoryStore take every decision through; this script states it again
-- because it must decide inside Redis to be atomic (as the PL/pgSQL variant,
-- sql/pg_idempotency.sql, does inside PostgreSQL). client/tests/parity.rs holds it equal.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fp, ttl, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local hit, mis, uuid, tok = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local last, floor, unknown = ARGV[8] == '1', tonumber(ARGV[9]), tonumber(ARGV[10])
local unresolved = tonumber(ARGV[11])
-- Each answer is counted where the extension counts it (pg_idempotency/src/begin.rs).
local function counted(outcome, answer)
  redis.call('HINCRBY', KEYS[3], outcome, 1)
  return cjson.encode(answer)
end
-- protocol::estimate::stopped: a holder with less than a third of the lease it last took
-- (`len`, absent for a claim made before 0.9.0) left has stopped beating.
local function stopped(e)
  return e.len ~= nil and (e.lease - now) * 3 < e.len
end
-- protocol::estimate::retry_after_ms: the estimated time left, bounded by the lease; the
-- lease's time left for a holder that stopped beating.
local function retry_after(e)
  if stopped(e) then return e.lease - now end
  local wanted = unknown
  local estimate = tonumber(redis.call('HGET', KEYS[3], 'estimate'))
  if estimate then
    local elapsed = math.max(now - (e.claimed or e.created), 0)
    wanted = math.max(estimate - elapsed, floor)
  end
  return math.min(wanted, e.lease - now)
end
local raw = redis.call('GET', KEYS[1])
local e = nil
if raw then
  e = cjson.decode(raw)
  -- Live until its expiry, or while its outcome is unknown (a lapsed claim, a mark) until
  -- its unresolved bound (`unr`).
  if e.exp <= now and not (e.unr and e.unr > now) then e = nil end
end
local function claim(attempt, up, created, rfp, recovered, prev)
  local fence = redis.call('INCR', KEYS[2])
  if prev and fence <= prev.fence then
    fence = prev.fence + 1
    redis.call('SET', KEYS[2], fence)
  end
  local exp = now + ttl
  if prev and prev.exp > exp then exp = prev.exp end
  local unr = now + lease + unresolved
  local rec = {state = 'in_progress', fence = fence, attempt = attempt, fp = rfp, up = up,
               created = created, claimed = now, lease = now + lease, exp = exp, ttl = ttl,
               tok = tok, rcv = recovered, unr = unr, len = lease}
  -- Redis keeps the key until the later of its expiry and its unresolved bound.
  local keep = math.max(exp, unr)
  -- A new key is claimed with SET NX; an expired row still present, or a record claimed
  -- again, is replaced (this script runs atomically).
  if prev or not redis.call('SET', KEYS[1], cjson.encode(rec), 'NX', 'PXAT', keep) then
    redis.call('SET', KEYS[1], cjson.encode(rec), 'PXAT', keep)
  end
  return counted('claimed', {o = 'claimed', fence = fence, attempt = attempt,
                             recovered = recovered, up = up, lease = now + lease, exp = exp})
end
if not e then return claim(1, uuid, now, fp, false, nil) end
if fp ~= '' and e.fp ~= '' and fp ~= e.fp and mis ~= 'ignore' then
  return counted('mismatch', {o = 'mismatch', stored = e.fp})
end
local first_fp = e.fp
if first_fp == '' then first_fp = fp end
if e.state == 'in_progress' then
  if e.lease > now and tok ~= '' and e.tok == tok then
    -- A repeat of the attempt that claimed (its answer was lost): the same claim.
    return counted('claimed', {o = 'claimed', fence = e.fence, attempt = e.attempt,
                               recovered = e.rcv == true, up = e.up, lease = e.lease,
                               exp = e.exp})
  end
  if e.lease > now then
    local answer = {o = 'in_progress', attempt = e.attempt, up = e.up, retry = retry_after(e)}
    -- A holder that stopped beating ends a waiting call's wait: this is its answer (`fin`).
    if stopped(e) then
      answer.fin = true
      return counted('in_progress', answer)
    end
    if last then return counted('in_progress', answer) end
    return cjson.encode(answer)
  end
  return claim(e.attempt + 1, e.up, e.created, first_fp, true, e)
end
if hit == 'fail_fast' then
  return cjson.encode({o = 'refused', state = e.state, attempt = e.attempt})
end
if e.state == 'failed' and hit == 'return_cached_if_success' then
  return claim(e.attempt + 1, e.up, e.created, first_fp, false, e)
end
return counted('replay', {o = 'replay', ok = (e.state == 'succeeded'), resp = e.resp,
                         attempt = e.attempt, up = e.up, exp = e.exp})
