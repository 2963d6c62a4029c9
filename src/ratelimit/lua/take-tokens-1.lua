--[[
  Token bucket: take `cost` tokens, all or nothing; or give tokens back.

  The bucket refills continuously at `rate` tokens per second up to `burst`. The only clock
  is Redis TIME, so every ingress process sees the same time. The script touches exactly
  one key, so it runs unchanged on Redis Cluster.

  KEYS[1]  the bucket, a hash: tokens (float, as a %.17g string), ts (microseconds of the
           last update). A missing key is a full bucket.
  ARGV[1]  cost: tokens to take (integer >= 1); a negative value gives -cost tokens back
           (used when a request fails after taking its tokens), capped at burst.
  ARGV[2]  burst: the capacity (integer >= 1)
  ARGV[3]  rate: refill in tokens per second (> 0, may be fractional)

  Returns { allowed, tokensLeft, waitMicros }
    allowed     1 when the tokens were taken (always 1 for a refund), 0 otherwise
    tokensLeft  whole tokens left after this call (floor)
    waitMicros  when refused: microseconds until the bucket can cover `cost`; else 0.
                -1 when cost > burst (the request can never fit).
]]
local cost = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])

local now = redis.call('TIME')
local nowUs = tonumber(now[1]) * 1000000 + tonumber(now[2])

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = burst
if state[1] then
  local elapsed = nowUs - tonumber(state[2])
  if elapsed < 0 then elapsed = 0 end
  tokens = tonumber(state[1]) + elapsed * rate / 1000000
  if tokens > burst then tokens = burst end
end

if cost > burst then
  return { 0, math.floor(tokens), -1 }
end

if cost > tokens then
  local waitUs = math.ceil((cost - tokens) * 1000000 / rate)
  return { 0, math.floor(tokens), waitUs }
end

tokens = tokens - cost
if tokens > burst then tokens = burst end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', nowUs)
-- An idle bucket refills to full; after that its state carries no information.
local fullInMs = math.ceil((burst - tokens) * 1000 / rate) + 1000
redis.call('PEXPIRE', KEYS[1], fullInMs)
return { 1, math.floor(tokens), 0 }
