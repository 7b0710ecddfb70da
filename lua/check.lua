-- sluice check script, last part: the driver. Decides every limit of one request atomically
-- (one script run = one check), whatever algorithm each limit uses.
--
-- Contract (include/sluice/store/lua_scripts.hpp):
--   KEYS[i]  the key of limit i
--   ARGV[1]  store time override in ms; < 0 means use Redis TIME (the gateway's clock never
--            enters the arithmetic; the override is a test seam)
--   ARGV[2]  n, the number of limits (= #KEYS)
--   then 6 integers per limit i: algorithm id, a, b, c, cost, shadow (0|1)
-- Reply: {allowed, now_ms, then per limit: admits, remaining, reset_ms, retry_after_ms, next_ms}
--
-- All-or-nothing: every limit is validated and read before anything is written; an enforced
-- limit is debited only if every enforced limit admits, a shadow limit iff it admits alone
-- (evaluated as if it were the only limit), and a refused request debits nothing.

local now = tonumber(ARGV[1])
if now == nil or now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local n = tonumber(ARGV[2])
if n == nil or n ~= #KEYS or #ARGV ~= 2 + 6 * n then
  return redis.error_reply('ERR sluice check: bad arguments')
end

local algo, state, admits, shadow = {}, {}, {}, {}
local allowed = true

-- Phase 1: validate and read every limit, decide.
for i = 1, n do
  local base = 2 + (i - 1) * 6
  local id = tonumber(ARGV[base + 1])
  local a = tonumber(ARGV[base + 2])
  local b = tonumber(ARGV[base + 3])
  local c = tonumber(ARGV[base + 4])
  local cost = tonumber(ARGV[base + 5])
  shadow[i] = ARGV[base + 6] == '1'
  algo[i] = id and algorithms[id]
  if not (algo[i] and a and b and c and cost) then
    return redis.error_reply('ERR sluice check: bad limit ' .. i)
  end
  local why = algo[i].validate(a, b, c, cost)
  if why then
    return redis.error_reply('ERR sluice check: limit ' .. i .. ': ' .. why)
  end
  state[i], admits[i] = algo[i].read(KEYS[i], a, b, c, cost, now)
  if not shadow[i] and not admits[i] then allowed = false end
end

-- Phase 2: debit (enforced: iff allowed; shadow: iff it admits alone), write, describe.
local reply = {allowed and 1 or 0, now}
for i = 1, n do
  local debit
  if shadow[i] then debit = admits[i] else debit = allowed end
  local remaining, reset, retry, nxt = algo[i].write(KEYS[i], state[i], debit)
  reply[#reply + 1] = admits[i] and 1 or 0
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset
  reply[#reply + 1] = retry
  reply[#reply + 1] = nxt
end
return reply
