-- sluice check script, part: token bucket (algorithm id 0), in exact integer units.
--   a = refill_per_ms (units per ms), b = units_per_token, c = burst (tokens)
-- State per bucket (a key's value or a hash field, see put): the string
-- "<level units> <stamp ms> <units per token>", its expiry re-armed to the time to full on
-- every call, or deleted when full. A level written under another rate (a reload changed it)
-- is rescaled to this rate's units, so the balance carries over in tokens; a state without the
-- third field is read in the current units. Mirrors src/limiter/token_bucket.cpp operation
-- for operation.

-- The level in units at `now` of a stored state `raw` (nil: a missing bucket, which is full).
local function tb_level(raw, refill, upt, cap, now)
  if not raw then return cap end
  local l, s, u = string.match(raw, '^(%-?%d+) (%-?%d+) ?(%d*)$')
  if not l then return cap end
  l = tonumber(l)
  s = tonumber(s)
  u = tonumber(u)
  if u and u > 0 and u ~= upt then l = math.floor(l / u * upt) end
  if l > cap then l = cap end
  if l < 0 then l = 0 end
  local elapsed = now - s
  if elapsed < 0 then elapsed = 0 end  -- a clock stepped back counts as no time
  if elapsed >= ceil_div(cap - l, refill) then return cap end
  return l + elapsed * refill
end

algorithms[0] = {
  validate = function(refill, upt, burst, cost)
    if refill < 1 or upt < 1 or burst < 1 or cost < 1 then return 'bad token bucket' end
    if burst * upt > TWO_53 then return 'capacity above 2^53' end
    return nil
  end,

  read = function(slot, refill, upt, burst, cost, now)
    local cap = burst * upt
    local lvl = tb_level(get_string(slot), refill, upt, cap, now)
    local st = {refill = refill, upt = upt, cap = cap, level = lvl, need = cost * upt, now = now}
    return st, lvl >= st.need
  end,

  write = function(slot, st, debit)
    local after = st.level
    if debit then after = after - st.need end
    local ttl = 0
    if after < st.cap then
      ttl = ceil_div(st.cap - after, st.refill)
      if ttl < 1 then ttl = 1 end
    end
    put(slot, int(after) .. ' ' .. int(st.now) .. ' ' .. int(st.upt), ttl)

    local retry = 0
    if st.level < st.need then retry = ceil_div(st.need - st.level, st.refill) end
    local nxt = 0
    if after < st.cap then nxt = ceil_div(st.upt - math.fmod(after, st.upt), st.refill) end
    return floor_div(after, st.upt), ceil_div(st.cap - after, st.refill), retry, nxt
  end,

  packable = true,
}
