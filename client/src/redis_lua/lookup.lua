-- The record while it is live. KEYS: record.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local raw = redis.call('GET', KEYS[1])
if not raw then return false end
local e = cjson.decode(raw)
if e.exp <= now and not (e.unr and e.unr > now) then return false end
return raw
