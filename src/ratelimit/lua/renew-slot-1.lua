-- Extends the lease of a slot holder that is still running (see acquire-slot-1.lua).
--
-- KEYS[1]  sorted set of the holders
-- ARGV[1]  lease in milliseconds from now
-- ARGV[2]  holder id
--
-- Returns 1 when the holder still had its slot, 0 when its lease had already ended (it was
-- presumed dead and its slot may have been given to someone else; it is not taken back).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local score = redis.call('ZSCORE', KEYS[1], ARGV[2])
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[2])
redis.call('PEXPIRE', KEYS[1], lease)
return 1
