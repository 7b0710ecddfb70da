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

-- Reads the bucket of `slot` at `now` into slot.level (units), slot.dirty; returns whether
-- `cost` tokens fit.
local function tb_read(slot, refill, upt, cap, need, now)
  local raw = get_state(slot, now)
  local l, s, u
  if raw then
    if #raw == 24 then
      l, s, u = unpack_state('<ddd', raw)
    else  -- text, as written before the packed state
      l, s, u = string.match(raw, '^(%-?%d+) (%-?%d+) ?(%d*)$')
      l, s, u = tonumber(l), tonumber(s), tonumber(u)
      slot.dirty = true
    end
  end
  local lvl = cap
  if l and s then
    if u and u > 0 and u ~= upt then
      l = math.floor(l / u * upt)
      slot.dirty = true
    end
    if l > cap then
      l = cap
      slot.dirty = true
    elseif l < 0 then
      l = 0
      slot.dirty = true
    end
    local elapsed = now - s
    if elapsed < 0 then  -- a clock stepped back counts as no time
      elapsed = 0
      slot.dirty = true
    end
    if elapsed < ceil_div(cap - l, refill) then lvl = l + elapsed * refill end
  end
  slot.level = lvl
  return lvl >= need
end

-- Debits `need` units when `debit`, writes (or, for an unchanged refusal, only makes sure of
-- the expiry); returns remaining, reset_ms, retry_after_ms, next_ms.
local function tb_write(slot, refill, upt, cap, need, debit, now)
  local level = slot.level
  local after = level
  if debit then after = level - need end
  local reset = 0
  if after < cap then reset = ceil_div(cap - after, refill) end
  if debit or slot.dirty or reset == 0 then
    put(slot, pack('<ddd', after, now, upt), reset, now)
  else
    arm(slot, reset)
  end
  local retry = 0
  if level < need then retry = ceil_div(need - level, refill) end
  local nxt = 0
  if after < cap then nxt = ceil_div(upt - fmod(after, upt), refill) end
  return floor_div(after, upt), reset, retry, nxt
end
