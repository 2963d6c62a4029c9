-- Takes one of an organization's analytics concurrency slots (spec 7.2, CONCURRENCY_LIMIT_EXCEEDED).
--
-- KEYS[1]  sorted set of the holders: member = holder id, score = end of its lease (ms, Redis time)
-- ARGV[1]  limit: how many slots the organization has
-- ARGV[2]  lease in milliseconds; a live holder renews it (renew-slot-1.lua) well before it ends
-- ARGV[3]  holder id (unique per query)
--
-- Leases that ended belong to holders that died (a crashed process cannot release): they
-- are dropped before counting, so a crash costs a slot for at most one lease. Time comes
-- from Redis only, so the clocks of the callers do not matter.
-- Returns {1, in use} when the slot was taken, {0, in use} when all slots are taken.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local inUse = redis.call('ZCARD', KEYS[1])
if inUse >= tonumber(ARGV[1]) then
  return {0, inUse}
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
redis.call('PEXPIRE', KEYS[1], lease)
return {1, inUse + 1}
