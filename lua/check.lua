-- sluice check script, last part: the driver check(keys, argv). Decides every limit of one
-- request atomically (one call = one check), whatever algorithm each limit uses.
--
-- Contract (include/sluice/store/lua_scripts.hpp):
--   keys[i]  the key of limit i: the bucket's own key, or the hash holding it
--   argv[1]  store time override in ms; < 0 means use Redis TIME (the gateway's clock never
--            enters the arithmetic; the override is a test seam)
--   argv[2]  stale after: Redis TIME in ms after which the check must not run (the gateway
--            gave up on it: a check queued behind a stalled Redis must not charge a request
--            already answered); < 0 means no bound. Always on Redis's own clock, even under a
--            time override. A stale check writes nothing and answers the error
--            "STALE sluice check: now <Redis TIME in ms>".
--   then 2 arguments per limit i: its parameters, struct.pack('<dddddd', algorithm id, a, b, c,
--   cost, flags) (48 bytes; flags: 1 = shadow, 2 = peek: decided as if, nothing written) or,
--   for a token bucket with a lease, struct.pack('<dddddddd', ..., lease, refund) (64 bytes:
--   take up to `lease` tokens when admitted, after `refund` tokens are returned), and the
--   field of the bucket in hash keys[i] ('' = the bucket is keys[i] itself)
-- Reply: {allowed, now_ms, then per limit: admits, remaining, reset_ms, retry_after_ms, next_ms,
-- then per limit with a 64-byte parameter, in order: the tokens it took}
--
-- All-or-nothing: every limit is validated and read before anything is written; an enforced
-- limit is debited only if every enforced limit admits, a shadow limit iff it admits alone
-- (evaluated as if it were the only limit), and a refused request debits nothing. With one
-- limit that is: debited iff it admits.

-- Validates and reads one limit; returns whether it admits and the algorithm's read state
-- (s1, s2, s3, handed to write_limit), or nil and why it is invalid (false: a bad limit).
local function read_limit(id, a, b, c, cost, key, field, now, lease, refund)
  if id == 0 then
    if not (a >= 1 and b >= 1 and c >= 1 and cost >= 1) then return nil, 'bad token bucket' end
    if c * b > TWO_53 then return nil, 'capacity above 2^53' end
    if not (lease >= 0 and lease <= c and refund >= 0 and refund <= c) then
      return nil, 'bad lease'
    end
    return tb_read(key, field, a, b, c * b, cost * b, now, refund * b)
  end
  if lease ~= 0 or refund ~= 0 then return nil, 'a lease needs a token bucket' end
  local slot = {key = key, field = field}
  if id == 1 or id == 2 then
    local w = windows()
    local why = w.validate(a, b, c, cost, id == 2)
    if why then return nil, why end
    return w.read(slot, a, b, cost, now, id == 2), slot
  end
  if id == 4 then
    local cal = calendars()
    local why = cal.validate(a, b, c, cost)
    if why then return nil, why end
    return cal.read(slot, a, b, c, cost, now), slot
  end
  if id == 3 and field == '' then
    local l = logs()
    local why = l.validate(a, b, c, cost)
    if why then return nil, why end
    return l.read(slot, a, b, cost, now), slot
  end
  return nil, false
end

-- Debits (when `debit`) and writes (unless `peek`) one limit read by read_limit; returns
-- remaining, reset_ms, retry_after_ms, next_ms.
local function write_limit(id, a, b, c, cost, key, field, debit, peek, now, s1, s2, s3, lease)
  if id == 0 then
    return tb_write(key, field, a, b, c * b, cost * b, debit, peek, now, s1, s2, s3, lease * b)
  end
  if id == 3 then return logs().write(s1, debit, peek) end
  if id == 4 then return calendars().write(s1, b, cost, debit, peek) end
  return windows().write(s1, a, b, cost, debit, id == 2, peek)
end

-- The parameters of one limit: id, a, b, c, cost, flags, lease, refund; nil when the argument
-- has neither form.
local function unpack_limit(p)
  if #p == 48 then
    local id, a, b, c, cost, flags = unpack_state('<dddddd', p)
    return id, a, b, c, cost, flags, 0, 0
  end
  if #p == 64 then return unpack_state('<dddddddd', p) end
  return nil
end

local function bad_limit(i, why)
  if why then return redis.error_reply('ERR sluice check: limit ' .. i .. ': ' .. why) end
  return redis.error_reply('ERR sluice check: bad limit ' .. i)
end

local function check(keys, argv)
  if not fmod then bind() end
  local n = #keys
  local now = tonumber(argv[1])
  local stale_after = tonumber(argv[2])
  if n < 1 or #argv ~= 2 + 2 * n or now == nil or stale_after == nil then
    return redis.error_reply('ERR sluice check: bad arguments')
  end
  -- Redis's own clock in ms, read at most once per call.
  local clock
  if now < 0 or stale_after >= 0 then
    local t = redis.call('TIME')
    clock = t[1] * 1000 + floor(t[2] / 1000)
    if now < 0 then now = clock end
  end
  -- On Redis's own clock, whatever the override says.
  if stale_after >= 0 and clock > stale_after then
    return redis.error_reply('STALE sluice check: now ' .. int(clock))
  end

  if n == 1 then
    local p, key, field = argv[3], keys[1], argv[4]
    local id, a, b, c, cost, flags, lease, refund = unpack_limit(p)
    if not id then return bad_limit(1) end
    local admits, s1, s2, s3 = read_limit(id, a, b, c, cost, key, field, now, lease, refund)
    if admits == nil then return bad_limit(1, s1) end
    local remaining, reset, retry, nxt, take =
        write_limit(id, a, b, c, cost, key, field, admits, flags >= 2, now, s1, s2, s3, lease)
    local adm = admits and 1 or 0
    local allowed = adm
    if flags % 2 == 1 then allowed = 1 end
    if #p == 64 then return {allowed, now, adm, remaining, reset, retry, nxt, take / b} end
    return {allowed, now, adm, remaining, reset, retry, nxt}
  end

  -- Phase 1: validate and read every limit, decide.
  local limits = {}
  local allowed = true
  for i = 1, n do
    local p, key, field = argv[1 + 2 * i], keys[i], argv[2 + 2 * i]
    local id, a, b, c, cost, flags, lease, refund = unpack_limit(p)
    if not id then return bad_limit(i) end
    local admits, s1, s2, s3 = read_limit(id, a, b, c, cost, key, field, now, lease, refund)
    if admits == nil then return bad_limit(i, s1) end
    local shadow = flags % 2 == 1
    if not shadow and not admits then allowed = false end
    limits[i] = {id, a, b, c, cost, shadow, key, field, admits, s1, s2, s3, flags >= 2, lease,
                 #p == 64}
  end

  -- Phase 2: debit (enforced: iff allowed; shadow: iff it admits alone), write, describe.
  local reply = {allowed and 1 or 0, now}
  local taken = {}
  local at = 2
  for i = 1, n do
    local l = limits[i]
    local admits = l[9]
    local debit = allowed
    if l[6] then debit = admits end
    local remaining, reset, retry, nxt, take =
        write_limit(l[1], l[2], l[3], l[4], l[5], l[7], l[8], debit, l[13], now, l[10], l[11],
                    l[12], l[14])
    reply[at + 1] = admits and 1 or 0
    reply[at + 2] = remaining
    reply[at + 3] = reset
    reply[at + 4] = retry
    reply[at + 5] = nxt
    at = at + 5
    if l[15] then taken[#taken + 1] = take / l[3] end
  end
  for j = 1, #taken do reply[at + j] = taken[j] end
  return reply
end
