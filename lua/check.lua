-- sluice check script, last part: the driver. Decides every limit of one request atomically
-- (one script run = one check), whatever algorithm each limit uses.
--
-- Contract (include/sluice/store/lua_scripts.hpp):
--   KEYS[i]  the key of limit i: the bucket's own key, or the hash holding it
--   ARGV[1]  store time override in ms; < 0 means use Redis TIME (the gateway's clock never
--            enters the arithmetic; the override is a test seam)
--   ARGV[2]  n, the number of limits (= #KEYS)
--   ARGV[3]  stale after: Redis TIME in ms after which the check must not run (the gateway
--            gave up on it: a check queued behind a stalled Redis must not charge a request
--            already answered); < 0 means no bound. Always on Redis's own clock, even under a
--            time override. A stale check writes nothing and answers the error
--            "STALE sluice check: now <Redis TIME in ms>".
--   then 7 arguments per limit i: algorithm id, a, b, c, cost, shadow (0|1), and the field
--   of the bucket in hash KEYS[i] ('' = the bucket is KEYS[i] itself)
-- Reply: {allowed, now_ms, then per limit: admits, remaining, reset_ms, retry_after_ms, next_ms}
--
-- All-or-nothing: every limit is validated and read before anything is written; an enforced
-- limit is debited only if every enforced limit admits, a shadow limit iff it admits alone
-- (evaluated as if it were the only limit), and a refused request debits nothing.
--
-- Sweep (hash layout): a field past its expiry stays in its hash until the hash expires. So
-- that a hash that never goes quiet does not fill up with them, each check that creates a
-- field samples 2 random fields of that hash and deletes the expired ones — an expired field
-- reads as missing, so deleting it changes no decision. Every field created expires some
-- time, so at most about half of a busy hash's fields are expired ones in the long run.

-- Redis's own clock in ms, read at most once per run.
local clock
local function redis_ms()
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return clock
end

local now = tonumber(ARGV[1])
if now == nil or now < 0 then now = redis_ms() end

local n = tonumber(ARGV[2])
local stale_after = tonumber(ARGV[3])
if n == nil or stale_after == nil or n ~= #KEYS or #ARGV ~= 3 + 7 * n then
  return redis.error_reply('ERR sluice check: bad arguments')
end
-- On Redis's own clock, whatever the override says.
if stale_after >= 0 and redis_ms() > stale_after then
  return redis.error_reply('STALE sluice check: now ' .. int(redis_ms()))
end

local algo, state, admits, shadow, slot = {}, {}, {}, {}, {}
local allowed = true

-- Phase 1: validate and read every limit, decide.
for i = 1, n do
  local base = 3 + (i - 1) * 7
  local id = tonumber(ARGV[base + 1])
  local a = tonumber(ARGV[base + 2])
  local b = tonumber(ARGV[base + 3])
  local c = tonumber(ARGV[base + 4])
  local cost = tonumber(ARGV[base + 5])
  shadow[i] = ARGV[base + 6] == '1'
  slot[i] = {key = KEYS[i], field = ARGV[base + 7], now = now}
  algo[i] = id and algorithms[id]
  if not (algo[i] and a and b and c and cost) or (slot[i].field ~= '' and not algo[i].packable) then
    return redis.error_reply('ERR sluice check: bad limit ' .. i)
  end
  local why = algo[i].validate(a, b, c, cost)
  if why then
    return redis.error_reply('ERR sluice check: limit ' .. i .. ': ' .. why)
  end
  state[i], admits[i] = algo[i].read(slot[i], a, b, c, cost, now)
  if not shadow[i] and not admits[i] then allowed = false end
end

-- Phase 2: debit (enforced: iff allowed; shadow: iff it admits alone), write, describe.
local reply = {allowed and 1 or 0, now}
for i = 1, n do
  local debit
  if shadow[i] then debit = admits[i] else debit = allowed end
  local remaining, reset, retry, nxt = algo[i].write(slot[i], state[i], debit)
  reply[#reply + 1] = admits[i] and 1 or 0
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset
  reply[#reply + 1] = retry
  reply[#reply + 1] = nxt
end

-- Phase 3: sweep the hashes in which a field was created.
for i = 1, n do
  if slot[i].created then sweep(slot[i]) end
end
return reply
