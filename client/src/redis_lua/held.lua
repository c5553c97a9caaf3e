-- What only the holder may do. KEYS: record, the scope's figures (begin.lua's hash). ARGV:
-- op (complete | release | extend), fence, then for complete: succeeded (1/0), cache
-- failure (1/0), has response (1/0), response, protocol::estimate's WEIGHT, whether the
-- response is one of the client's marks (1/0: its outcome is unknown); for extend:
-- lease ms or '' (the default), the default lease ms (limits::DEFAULT_LEASE).
-- Answers a state word, or 'lost:<why>' (absent | later | fence | completed) when the
-- fence does not hold the record, as the server's lease-lost details tell it
-- (pg_idempotency/src/holder.rs).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local raw = redis.call('GET', KEYS[1])
if not raw then return 'lost:absent' end
local e = cjson.decode(raw)
if e.exp <= now and not (e.unr and e.unr > now) then return 'lost:absent' end
-- Redis keeps the key until the later of its expiry and its unresolved bound.
local function keep() if e.unr and e.unr > e.exp then return e.unr end return e.exp end
local fence = tonumber(ARGV[2])
if e.fence ~= fence then
  if e.fence > fence then return 'lost:later' end
  return 'lost:fence'
end
local op = ARGV[1]
if e.state ~= 'in_progress' then
  if op == 'complete' then return e.state end
  return 'lost:completed'
end
if op == 'release' then
  redis.call('DEL', KEYS[1])
  return 'released'
end
if op == 'extend' then
  local lease = tonumber(ARGV[3])
  if lease == nil then lease = math.min(tonumber(ARGV[4]), e.ttl) end
  -- The record's ttl, for the refusal's detail.
  if lease > e.ttl then return 'invalid:' .. tostring(e.ttl) end
  -- The unresolved bound moves with the lease, by the same length.
  if e.unr then e.unr = now + lease + (e.unr - e.lease) end
  e.lease = now + lease
  -- The length taken: whether the holder has stopped beating (begin.lua's `stopped`).
  e.len = lease
  if e.lease > e.exp then e.exp = e.lease end
  redis.call('SET', KEYS[1], cjson.encode(e), 'PXAT', keep())
  return 'extended:' .. tostring(e.lease)
end
-- A claimed attempt completed: its claim-to-completion time moves the scope's estimate
-- (protocol::estimate::next_estimate; the division truncates toward zero as Rust's).
local sample = math.max(now - (e.claimed or e.created), 0)
local estimate = tonumber(redis.call('HGET', KEYS[2], 'estimate'))
if estimate then
  local step = (sample - estimate) / tonumber(ARGV[7])
  if step >= 0 then step = math.floor(step) else step = math.ceil(step) end
  estimate = math.max(estimate + step, 0)
else
  estimate = sample
end
redis.call('HSET', KEYS[2], 'estimate', string.format('%d', estimate))
if ARGV[3] == '0' and ARGV[4] == '0' then
  redis.call('DEL', KEYS[1])
  return 'absent'
end
if ARGV[3] == '1' then e.state = 'succeeded' else e.state = 'failed' end
if ARGV[5] == '1' then e.resp = ARGV[6] end
-- A mark is kept for the claim's unresolved bound from now; a result is not.
if ARGV[8] == '1' and e.unr then e.unr = now + (e.unr - e.lease) else e.unr = nil end
e.completed = now
e.lease = nil
e.len = nil
e.exp = now + e.ttl
redis.call('SET', KEYS[1], cjson.encode(e), 'PXAT', keep())
return e.state
