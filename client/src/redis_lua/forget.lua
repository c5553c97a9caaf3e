-- An operator removes a record whatever its state. KEYS: record. Answers 1 when the record
-- was live (the SQL API's idem_forget: an expired one is removed too, and answers 0).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
redis.call('DEL', KEYS[1])
local e = cjson.decode(raw)
if e.exp > now or (e.unr and e.unr > now) then return 1 end
return 0
