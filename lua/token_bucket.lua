-- SPDX-License-Identifier: Apache-2.0
-- sluice check script, part: token bucket (algorithm id 0), in exact integer units.
--   a = refill_per_ms (units per ms), b = units_per_token, c = burst (tokens)
-- State per bucket (a key's value or a hash field, see put): pack('<ddd', level units, stamp
-- ms, units per token) (24 bytes), its expiry at least the time to full, or deleted when full.
-- A level written under another rate (a reload changed it) is rescaled to this rate's units,
-- so the balance carries over in tokens; the text form "<level> <stamp>[ <units per token>]"
-- of earlier versions is still read. Mirrors src/limiter/token_bucket.cpp operation for
-- operation.
--
-- A refusal writes nothing when the state it read is the state it would write, up to the
-- stamp: the level refills linearly up to the capacity, so (level, stamp) and (its level at
-- now, now) give the same level at every later time. It writes when the read changed the
-- state: a rescaled or clamped level, a stamp in the future (a clock stepped back), text.

-- Reads the bucket at (key, field) at `now`, with `refund` units of an earlier lease returned
-- to it first (never above the capacity); returns whether `need` units fit, then the level
-- (units), whether a state is stored, and whether the read changed it (dirty: it must be
-- written even by a refusal).
local function tb_read(key, field, refill, upt, cap, need, now, refund)
  local raw, at, stored = get_state(key, field, now)
  local l, s, u
  local dirty = false
  if raw then
    if #raw - at == 23 then
      l, s, u = unpack_state('<ddd', raw, at)
    else  -- text, as written before the packed state
      l, s, u = string.match(ssub(raw, at), '^(%-?%d+) (%-?%d+) ?(%d*)$')
      l, s, u = tonumber(l), tonumber(s), tonumber(u)
      dirty = true
    end
  end
  local lvl = cap
  if l and s then
    if u and u > 0 and u ~= upt then
      l = floor(l / u * upt)
      dirty = true
    end
    if l > cap then
      l = cap
      dirty = true
    elseif l < -cap then  -- below zero: a debt a settled charge left, at most one capacity
      l = -cap
      dirty = true
    end
    local elapsed = now - s
    if elapsed < 0 then  -- a clock stepped back counts as no time
      elapsed = 0
      dirty = true
    end
    if elapsed < ceil_div(cap - l, refill) then lvl = l + elapsed * refill end
  end
  if refund > 0 and lvl < cap then
    lvl = lvl + refund
    if lvl > cap then lvl = cap end
    dirty = true
  end
  return lvl >= need, lvl, stored, dirty
end

-- Debits `need` units from `level` (what tb_read found) when `debit` — with a lease of
-- `lease` units (> need), as many whole tokens up to the lease as the level holds — writes
-- (or, for an unchanged refusal, only makes sure of the expiry; nothing at all when `peek`);
-- returns remaining, reset_ms, retry_after_ms, next_ms and the units taken.
local function tb_write(key, field, refill, upt, cap, need, debit, peek, now, level, stored,
                        dirty, lease)
  local after = level
  local take = 0
  if debit then
    take = need
    if lease > need then
      take = level - fmod(level, upt)
      if take > lease then take = lease end
    end
    after = level - take
  end
  local reset = 0
  if after < cap then reset = ceil_div(cap - after, refill) end
  if peek then
  elseif debit or dirty or reset == 0 then
    put(key, field, stored, reset, now, '<ddd', '<dddd', after, now, upt)
  else
    arm(key, field, reset)
  end
  local retry = 0
  if level < need then retry = ceil_div(need - level, refill) end
  local nxt = 0
  local remaining = 0  -- in debt (after < 0): 0, never below
  if after < 0 then
    nxt = ceil_div(upt - after, refill)  -- the next whole unit is one token above zero
  else
    remaining = floor_div(after, upt)
    if after < cap then nxt = ceil_div(upt - fmod(after, upt), refill) end
  end
  return remaining, reset, retry, nxt, take
end

-- Settles `units` (> 0: a charge, < 0: a refund; tokens times upt) on the bucket at (key,
-- field): its level at `now` less `units`, kept in [-cap, cap] — a charge may leave a debt, a
-- refund never fills it past the capacity (settled_level in src/limiter/token_bucket.cpp) —
-- written, or deleted when full. Returns admits, remaining, reset_ms, retry_after_ms, next_ms
-- for a request needing `need` units.
local function tb_settle(key, field, refill, upt, cap, need, now, units)
  local _, level, stored = tb_read(key, field, refill, upt, cap, need, now, 0)
  local after = level - units
  if after > cap then
    after = cap
  elseif after < -cap then
    after = -cap
  end
  local remaining, reset, retry, nxt =
      tb_write(key, field, refill, upt, cap, need, false, false, now, after, stored, true, 0)
  return retry == 0, remaining, reset, retry, nxt
end
