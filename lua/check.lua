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
-- that a hash that never goes quiet does not fill up with them, about one in four checks that
-- create a field in a hash that was there already (chosen by the field's last byte) samples 8
-- random fields of that hash and deletes the expired ones — an expired field reads as missing,
-- so deleting it changes no decision. That samples 2 fields per created field on average, as
-- a sweep of 2 on every creation would, in a quarter of the calls; every field created expires
-- some time, so at most about half of a busy hash's fields are expired ones in the long run.

local n = tonumber(ARGV[2])
local stale_after = tonumber(ARGV[3])
if n == nil or stale_after == nil or n ~= #KEYS or #ARGV ~= 3 + 7 * n then
  return redis.error_reply('ERR sluice check: bad arguments')
end
local now = tonumber(ARGV[1])
-- Redis's own clock in ms, read at most once per run.
local clock
if now == nil or now < 0 or stale_after >= 0 then
  local t = redis.call('TIME')
  clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now == nil or now < 0 then now = clock end
end
-- On Redis's own clock, whatever the override says.
if stale_after >= 0 and clock > stale_after then
  return redis.error_reply('STALE sluice check: now ' .. int(clock))
end

local slots = {}
local allowed = true

-- Phase 1: validate and read every limit, decide.
for i = 1, n do
  local base = 3 + (i - 1) * 7
  local id = tonumber(ARGV[base + 1])
  local a = tonumber(ARGV[base + 2])
  local b = tonumber(ARGV[base + 3])
  local c = tonumber(ARGV[base + 4])
  local cost = tonumber(ARGV[base + 5])
  local slot = {key = KEYS[i], field = ARGV[base + 7], id = id, a = a, b = b, c = c, cost = cost,
                shadow = ARGV[base + 6] == '1', admits = false, stored = false, dirty = false,
                created = false, fresh = false, level = 0}
  slots[i] = slot
  if not (id and a and b and c and cost) then
    return redis.error_reply('ERR sluice check: bad limit ' .. i)
  end
  local why
  if id == 0 then
    if a < 1 or b < 1 or c < 1 or cost < 1 then
      why = 'bad token bucket'
    elseif c * b > TWO_53 then
      why = 'capacity above 2^53'
    else
      slot.admits = tb_read(slot, a, b, c * b, cost * b, now)
    end
  elseif id == 1 or id == 2 then
    local w = windows()
    why = w.validate(a, b, c, cost, id == 2)
    if not why then slot.admits = w.read(slot, a, b, cost, now, id == 2) end
  elseif id == 3 and slot.field == '' then
    local l = logs()
    why = l.validate(a, b, c, cost)
    if not why then slot.admits = l.read(slot, a, b, cost, now) end
  else
    return redis.error_reply('ERR sluice check: bad limit ' .. i)
  end
  if why then
    return redis.error_reply('ERR sluice check: limit ' .. i .. ': ' .. why)
  end
  if not slot.shadow and not slot.admits then allowed = false end
end

-- Phase 2: debit (enforced: iff allowed; shadow: iff it admits alone), write, describe.
local reply = {allowed and 1 or 0, now}
local at = 2
for i = 1, n do
  local slot = slots[i]
  local debit
  if slot.shadow then debit = slot.admits else debit = allowed end
  local remaining, reset, retry, nxt
  local id = slot.id
  if id == 0 then
    local b = slot.b
    remaining, reset, retry, nxt = tb_write(slot, slot.a, b, slot.c * b, slot.cost * b, debit, now)
  elseif id == 3 then
    remaining, reset, retry, nxt = logs().write(slot, debit)
  else
    remaining, reset, retry, nxt = windows().write(slot, slot.a, slot.b, slot.cost, debit, id == 2)
  end
  reply[at + 1] = slot.admits and 1 or 0
  reply[at + 2] = remaining
  reply[at + 3] = reset
  reply[at + 4] = retry
  reply[at + 5] = nxt
  at = at + 5
end

-- Phase 3: sweep some of the hashes in which a field was created (see the top).
for i = 1, n do
  local slot = slots[i]
  if slot.created and not slot.fresh and string.byte(slot.field, -1) % 4 == 0 then
    sweep(slot, now)
  end
end
return reply
