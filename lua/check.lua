-- SPDX-License-Identifier: Apache-2.0
-- sluice check script, last part: the driver check(keys, argv). Decides every limit of one
-- request atomically, whatever algorithm each limit uses: one call is one check, or a batch of
-- checks decided one after the other in one call (argv[1] == 'batch', check_batch below).
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
--   cost, flags) (48 bytes; flags: 1 = shadow, 2 = peek: decided as if, nothing written,
--   4 = lift the limit's block first (admin unblock), 8 = with peek, a refusal still starts
--   its block) or, for a token bucket with a lease, struct.pack('<dddddddd', ..., lease,
--   refund) (64 bytes: take up to `lease` tokens when admitted, after `refund` tokens are
--   returned); either followed by one more double, the block in ms, for a limit with a
--   penalty box (56 or 72 bytes; lua/block.lua); and the field of the bucket in hash keys[i]
--   ('' = the bucket is keys[i] itself)
--   For a concurrency limit (id 5, lua/concurrency.lua) the field argument is the slot id
--   instead (its key is never a hash). A concurrency limit's admits in the reply is, for a
--   release or renew (which never refuse), whether the slot was held.
-- Reply: {allowed, now_ms, then per limit: admits, remaining, reset_ms, retry_after_ms, next_ms,
-- then per limit with a lease (64 or 72 bytes), in order: the tokens it took, then per limit
-- with a block (56 or 72 bytes), in order: the block's end ms (0: none) and its event (0 none
-- or in force, 1 started, 2 lifted)}
--   A call whose first limit carries flags 16 is a settle (settle() below; every limit must be
--   one): 64-byte parameters (id, a, b, c, cost, 16, units, taken_at), no decision.
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
  if id == 5 then
    local cc = conc()
    local why = cc.validate(a, b, c)
    if why then return nil, why end
    local slot = {key = key, id = field}
    slot.admits = cc.read(slot, a, c, now)
    return slot.admits, slot
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
  if id == 5 then return conc().write(s1, a, b, c, s1.admits, debit, peek, now) end
  return windows().write(s1, a, b, cost, debit, id == 2, peek)
end

-- The parameters of one limit: id, a, b, c, cost, flags, lease, refund, block ms; nil when
-- the argument has none of the forms.
local function unpack_limit(p)
  local len = #p
  if len == 48 then
    local id, a, b, c, cost, flags = unpack_state('<dddddd', p)
    return id, a, b, c, cost, flags, 0, 0, 0
  end
  if len == 56 then
    local id, a, b, c, cost, flags, block = unpack_state('<ddddddd', p)
    return id, a, b, c, cost, flags, 0, 0, block
  end
  if len == 64 then
    local id, a, b, c, cost, flags, lease, refund = unpack_state('<dddddddd', p)
    return id, a, b, c, cost, flags, lease, refund, 0
  end
  if len == 72 then return unpack_state('<ddddddddd', p) end
  return nil
end

local function bad_limit(i, why)
  if why then return redis.error_reply('ERR sluice check: limit ' .. i .. ': ' .. why) end
  return redis.error_reply('ERR sluice check: bad limit ' .. i)
end

-- Settles every limit of a call whose parameters carry flags 16 (check_request::settle):
-- struct.pack('<dddddddd', id, a, b, c, cost, 16, units, taken_at) — units > 0 charged, < 0
-- refunded (|units| <= the Limit), taken_at the store time the units were spent at (windows;
-- < 0: now). Nothing is decided or refused: every limit is validated first, then each is
-- settled in order (tb_settle, window_settle), so the call is atomic. A sliding log cannot
-- settle. Reply as check's: {1, now, then per limit: admits, remaining, reset_ms,
-- retry_after_ms, next_ms}, describing what a request of the limit's cost would get now,
-- appended to `reply` from at + 1 as decide() does (returns the new end, or nil and an error).
local function settle(keys, argv, ko, ao, n, now, reply, at)
  local limits = {}
  for i = 1, n do
    local p = argv[ao + 2 * i - 1]
    if #p ~= 64 then return nil, bad_limit(i, 'a settle needs every limit settled') end
    local id, a, b, c, cost, flags, units, taken_at = unpack_state('<dddddddd', p)
    if flags ~= 16 then return nil, bad_limit(i, 'a settle needs every limit settled') end
    if id == 0 then
      if not (a >= 1 and b >= 1 and c >= 1 and cost >= 1) then
        return nil, bad_limit(i, 'bad token bucket')
      end
      if c * b > TWO_53 then return nil, bad_limit(i, 'capacity above 2^53') end
      if not (units >= -c and units <= c) then return nil, bad_limit(i, 'bad settle') end
    elseif id == 1 or id == 2 then
      local why = windows().validate(a, b, c, cost, id == 2)
      if why then return nil, bad_limit(i, why) end
      if not (units >= -b and units <= b) then return nil, bad_limit(i, 'bad settle') end
    else
      return nil, bad_limit(i, 'only a token bucket or a window can settle')
    end
    limits[i] = {id, a, b, c, cost, units, taken_at}
  end
  reply[at + 1] = 1
  reply[at + 2] = now
  at = at + 2
  for i = 1, n do
    local l = limits[i]
    local id, a, b, c, cost, units = l[1], l[2], l[3], l[4], l[5], l[6]
    local key, field = keys[ko + i], argv[ao + 2 * i]
    local admits, remaining, reset, retry, nxt
    if id == 0 then
      admits, remaining, reset, retry, nxt =
          tb_settle(key, field, a, b, c * b, cost * b, now, units * b)
    else
      admits, remaining, reset, retry, nxt =
          windows().settle({key = key, field = field}, a, b, cost, now, id == 2, units, l[7])
    end
    reply[at + 1] = admits and 1 or 0
    reply[at + 2] = remaining
    reply[at + 3] = reset
    reply[at + 4] = retry
    reply[at + 5] = nxt
    at = at + 5
  end
  return at
end

-- Decides one check at `now`: its n limits are keys[ko + i] with parameters argv[ao + 2i - 1]
-- and fields argv[ao + 2i] (i = 1..n). Appends its reply ({allowed, now, then per limit ...},
-- as documented at the top) to `reply` from index at + 1 and returns the reply's new end, or
-- nil and an error reply when an argument is bad (then nothing was written).
local function decide(keys, argv, ko, ao, n, now, reply, at)
  -- A settle (flags 16) comes in the 64-byte form, which a check uses only for leases: its
  -- flags are the 6th double (one unpack of 8 bytes, not of the whole parameter).
  local p1 = argv[ao + 1]
  if #p1 == 64 and unpack_state('<d', p1, 41) >= 16 then
    return settle(keys, argv, ko, ao, n, now, reply, at)
  end

  if n == 1 then
    local key, field = keys[ko + 1], argv[ao + 2]
    local id, a, b, c, cost, flags, lease, refund, bms = unpack_limit(p1)
    if not id then return nil, bad_limit(1) end
    local admits, s1, s2, s3 = read_limit(id, a, b, c, cost, key, field, now, lease, refund)
    if admits == nil then return nil, bad_limit(1, s1) end
    -- flags: 1 shadow, 2 peek, 4 lift the block first, 8 a peek that still starts blocks
    local shadow, peek, lift = flags % 2 == 1, flags % 4 >= 2, flags % 8 >= 4
    local blk
    if bms > 0 and not shadow then
      if id == 5 then return nil, bad_limit(1, 'a concurrency limit takes no block') end
      blk = block_open(key, field, now, lift)
      if block_left(blk, now) > 0 then admits = false end
    end
    local remaining, reset, retry, nxt, take =
        write_limit(id, a, b, c, cost, key, field, admits, peek, now, s1, s2, s3, lease)
    if blk then
      remaining, reset, retry, nxt =
          block_close(blk, bms, not admits and not lift, not peek or flags % 16 >= 8, now,
                      remaining, reset, retry, nxt)
    end
    local adm = admits and 1 or 0
    local allowed = adm
    if shadow then allowed = 1 end
    if id == 5 then adm = take and 1 or 0 end
    reply[at + 1] = allowed
    reply[at + 2] = now
    reply[at + 3] = adm
    reply[at + 4] = remaining
    reply[at + 5] = reset
    reply[at + 6] = retry
    reply[at + 7] = nxt
    at = at + 7
    if #p1 >= 64 then
      at = at + 1
      reply[at] = take / b
    end
    if bms > 0 then
      reply[at + 1] = blk and blk[1] or 0
      reply[at + 2] = blk and blk[5] or 0
      at = at + 2
    end
    return at
  end

  -- Phase 1: validate and read every limit, decide.
  local limits = {}
  local allowed = true
  for i = 1, n do
    local p, key, field = argv[ao + 2 * i - 1], keys[ko + i], argv[ao + 2 * i]
    local id, a, b, c, cost, flags, lease, refund, bms = unpack_limit(p)
    if not id then return nil, bad_limit(i) end
    local admits, s1, s2, s3 = read_limit(id, a, b, c, cost, key, field, now, lease, refund)
    if admits == nil then return nil, bad_limit(i, s1) end
    -- flags: 1 shadow, 2 peek, 4 lift the block first, 8 a peek that still starts blocks
    local shadow, lift = flags % 2 == 1, flags % 8 >= 4
    local blk
    if bms > 0 and not shadow then
      if id == 5 then return nil, bad_limit(i, 'a concurrency limit takes no block') end
      blk = block_open(key, field, now, lift)
      if block_left(blk, now) > 0 then admits = false end
    end
    if not shadow and not admits then allowed = false end
    limits[i] = {id, a, b, c, cost, shadow, key, field, admits, s1, s2, s3, flags % 4 >= 2,
                 lease, #p >= 64, bms, blk, flags % 16 >= 8, lift}
  end

  -- Phase 2: debit (enforced: iff allowed; shadow: iff it admits alone), write, describe.
  reply[at + 1] = allowed and 1 or 0
  reply[at + 2] = now
  at = at + 2
  local taken = {}
  for i = 1, n do
    local l = limits[i]
    local admits = l[9]
    local debit = allowed
    if l[6] then debit = admits end
    local remaining, reset, retry, nxt, take =
        write_limit(l[1], l[2], l[3], l[4], l[5], l[7], l[8], debit, l[13], now, l[10], l[11],
                    l[12], l[14])
    if l[17] then
      remaining, reset, retry, nxt =
          block_close(l[17], l[16], not admits and not l[19], not l[13] or l[18], now,
                      remaining, reset, retry, nxt)
    end
    if l[1] == 5 then admits = take end
    reply[at + 1] = admits and 1 or 0
    reply[at + 2] = remaining
    reply[at + 3] = reset
    reply[at + 4] = retry
    reply[at + 5] = nxt
    at = at + 5
    if l[15] then taken[#taken + 1] = take / l[3] end
  end
  for j = 1, #taken do reply[at + j] = taken[j] end
  at = at + #taken
  for i = 1, n do
    local l = limits[i]
    if l[16] > 0 then
      reply[at + 1] = l[17] and l[17][1] or 0
      reply[at + 2] = l[17] and l[17][5] or 0
      at = at + 2
    end
  end
  return at
end

-- A batch (argv[1] == 'batch'): several checks in one call, decided one after the other in
-- their order, so a later check of a key sees what an earlier one wrote, exactly as two calls
-- would. argv[2] and argv[3] are the time override and the stale bound (as argv[1] and argv[2]
-- of one check: one for the batch), argv[4] the number of limits of each check, one byte per
-- check (1..255), then 2 arguments per limit of every check, in order; keys likewise. The reply
-- is the checks' replies one after the other; a check whose arguments are bad is {-1, now}
-- there instead (and wrote nothing), the others are decided as usual.
-- On a Redis Cluster node a batch declares no key (its checks may be of several slots of the
-- node; the function is registered allow-cross-slot-keys): every limit's key then comes in
-- argv after argv[4], before the limits' arguments, and the first key of each check (a check
-- of the cluster is of one slot) is touched before anything is written, so a key no longer
-- served here fails the whole call with Redis's error and nothing written.
local function check_batch(keys, argv, now)
  local counts = argv[4]
  local m = #counts
  local n = 0
  for j = 1, m do n = n + string.byte(counts, j) end
  local ko, ao = 0, 4
  if #keys == 0 then
    if m < 1 or #argv ~= 4 + 3 * n then return redis.error_reply('ERR sluice check: bad batch') end
    keys, ko, ao = argv, 4, 4 + n
    local k = 4
    for j = 1, m do
      local r = redis.pcall('EXISTS', argv[k + 1])
      if type(r) == 'table' then return r end
      k = k + string.byte(counts, j)
    end
  elseif m < 1 or n ~= #keys or #argv ~= 4 + 2 * n then
    return redis.error_reply('ERR sluice check: bad batch')
  end
  local reply = {}
  local before, at = 0, 0
  for j = 1, m do
    local c = string.byte(counts, j)
    local ends = decide(keys, argv, ko + before, ao + 2 * before, c, now, reply, at)
    if ends then
      at = ends
    else
      reply[at + 1] = -1
      reply[at + 2] = now
      at = at + 2
    end
    before = before + c
  end
  return reply
end

local function check(keys, argv)
  if not fmod then bind() end
  local o = 0
  if argv[1] == 'batch' then o = 1 end
  local n = #keys
  local now = tonumber(argv[o + 1])
  local stale_after = tonumber(argv[o + 2])
  if now == nil or stale_after == nil or (o == 0 and (n < 1 or #argv ~= 2 + 2 * n)) then
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
  if o == 1 then return check_batch(keys, argv, now) end
  -- (sized for the one-limit reply, the most common: filled in place, not grown)
  local reply = {0, 0, 0, 0, 0, 0, 0}
  local ends, err = decide(keys, argv, 0, 2, n, now, reply, 0)
  if not ends then return err end
  return reply
end
