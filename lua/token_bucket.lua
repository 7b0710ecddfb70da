-- sluice token bucket: decides a batch of buckets atomically (one script run = one check).
--
-- Contract (include/sluice/store/lua_scripts.hpp):
--   KEYS[i]  bucket key i
--   ARGV[1]  store time override in ms; < 0 means use Redis TIME (the gateway's clock never
--            enters the arithmetic; the override is a test seam)
--   ARGV[2]  n, the number of limits (= #KEYS)
--   then 5 integers per limit i: refill_per_ms, units_per_token, burst, cost, shadow (0|1)
-- Reply: {allowed, now_ms, then per limit: admits, remaining, reset_ms, retry_after_ms, next_ms}
-- State per key: the string "<level units> <stamp ms>", re-armed with PX = time to full on
-- every call (refusals too, which also repairs a key left without a TTL), or deleted when full.
--
-- This mirrors src/limiter/token_bucket.cpp operation for operation. Lua 5.1 numbers are
-- doubles: every value here is an integer <= 2^53 (the capacity bound checked at config load),
-- so +, -, and the products below are exact; division goes through ceil_div, which is exact.
-- Only integers and strings cross the Lua -> Redis boundary (Redis truncates Lua floats, and
-- formats number arguments with %.14g, so numbers are passed to redis.call as '%.0f' strings).

-- ceil(a / b) for integers a >= 0, b > 0, exact for a, b <= 2^53: fmod is exact in IEEE
-- arithmetic, a - r is a representable multiple of b, so (a - r) / b is an exact quotient.
local function ceil_div(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

local function int(x)
  return string.format('%.0f', x)
end

local now = tonumber(ARGV[1])
if now == nil or now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local n = tonumber(ARGV[2])
if n == nil or n ~= #KEYS or #ARGV ~= 2 + 5 * n then
  return redis.error_reply('ERR sluice token_bucket: bad arguments')
end

local refill, upt, burst, cost, shadow, cap, level, need, admits = {}, {}, {}, {}, {}, {}, {}, {}, {}
local allowed = true

-- Phase 1: read and refill every bucket, decide.
for i = 1, n do
  local a = 2 + (i - 1) * 5
  refill[i] = tonumber(ARGV[a + 1])
  upt[i] = tonumber(ARGV[a + 2])
  burst[i] = tonumber(ARGV[a + 3])
  cost[i] = tonumber(ARGV[a + 4])
  shadow[i] = ARGV[a + 5] == '1'
  if not (refill[i] and upt[i] and burst[i] and cost[i]) or refill[i] < 1 or upt[i] < 1
      or burst[i] < 1 or cost[i] < 1 then
    return redis.error_reply('ERR sluice token_bucket: bad limit ' .. i)
  end
  cap[i] = burst[i] * upt[i]
  if cap[i] > 9007199254740992 then  -- 2^53: beyond it doubles are no longer exact
    return redis.error_reply('ERR sluice token_bucket: capacity above 2^53 for limit ' .. i)
  end

  local lvl = cap[i]  -- a missing bucket is full
  local raw = redis.call('GET', KEYS[i])
  if raw then
    local l, s = string.match(raw, '^(%-?%d+) (%-?%d+)$')
    if l then
      l = tonumber(l)
      s = tonumber(s)
      if l > cap[i] then l = cap[i] end
      if l < 0 then l = 0 end
      local elapsed = now - s
      if elapsed < 0 then elapsed = 0 end  -- a clock stepped back counts as no time
      if elapsed >= ceil_div(cap[i] - l, refill[i]) then
        lvl = cap[i]
      else
        lvl = l + elapsed * refill[i]
      end
    end
  end
  level[i] = lvl
  need[i] = cost[i] * upt[i]
  admits[i] = lvl >= need[i]
  if not shadow[i] and not admits[i] then allowed = false end
end

-- Phase 2: debit (enforced: iff allowed; shadow: iff it admits alone), write, describe.
local reply = {allowed and 1 or 0, now}
for i = 1, n do
  local debit
  if shadow[i] then debit = admits[i] else debit = allowed end
  local after = level[i]
  if debit then after = after - need[i] end

  if after >= cap[i] then
    redis.call('DEL', KEYS[i])
  else
    local ttl = ceil_div(cap[i] - after, refill[i])
    if ttl < 1 then ttl = 1 end
    redis.call('SET', KEYS[i], int(after) .. ' ' .. int(now), 'PX', int(ttl))
  end

  local retry = 0
  if not admits[i] then retry = ceil_div(need[i] - level[i], refill[i]) end
  local nxt = 0
  if after < cap[i] then nxt = ceil_div(upt[i] - math.fmod(after, upt[i]), refill[i]) end

  reply[#reply + 1] = admits[i] and 1 or 0
  reply[#reply + 1] = (after - math.fmod(after, upt[i])) / upt[i]  -- floor(after / upt)
  reply[#reply + 1] = ceil_div(cap[i] - after, refill[i])
  reply[#reply + 1] = retry
  reply[#reply + 1] = nxt
end
return reply
