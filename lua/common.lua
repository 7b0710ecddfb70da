-- sluice check script, part 1: shared helpers. The parts lua/common.lua, lua/token_bucket.lua,
-- lua/window.lua, lua/fixed_window.lua, lua/sliding_window.lua, lua/sliding_log.lua and
-- lua/check.lua are concatenated, in that order, into the one script the stores run
-- (cmake/SluiceEmbedLua.cmake; contract in include/sluice/store/lua_scripts.hpp).
--
-- Lua 5.1 numbers are doubles: every value in these scripts is an integer <= 2^53 (bounds
-- checked at config load and again in each algorithm's `validate`), so +, -, * of the values
-- used are exact, and division goes through ceil_div / floor_div, which are exact. Only
-- integers and strings cross the Lua -> Redis boundary (Redis truncates Lua floats, and
-- formats number arguments with %.14g, so numbers are passed to redis.call as '%.0f' strings).

local TWO_53 = 9007199254740992

-- ceil(a / b) for integers a >= 0, b > 0, exact for a, b <= 2^53: fmod is exact in IEEE
-- arithmetic, a - r is a representable multiple of b, so (a - r) / b is an exact quotient.
local function ceil_div(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

-- floor(a / b) for integers a >= 0, b > 0 (exact, as above).
local function floor_div(a, b)
  return (a - math.fmod(a, b)) / b
end

local function int(x)
  return string.format('%.0f', x)
end

-- A bucket's place (a "slot"): {key = KEYS[i], field = its field argument, now = the
-- script's store time}. With field '' the state is the key's own string value (store.layout:
-- key) and Redis expires it. Otherwise (store.layout: hash) it is field `field` of the hash
-- `key`, which holds buckets of one limit and namespace, as "<state>@<expires at, ms of store
-- time>": a field past its expiry reads as missing, exactly as an expired key would, whatever
-- the parameters it was written under (plans with their own rates share a hash).

-- A hash field's raw value split into its state and expiry stamp; nil when it has no stamp
-- (not written by sluice).
local function split_field(raw)
  local state, at = string.match(raw, '^(.*)@(%d+)$')
  if not state then return nil end
  return state, tonumber(at)
end

-- The stored state of a slot, or nil. A key of another type (left by a limit whose algorithm
-- or layout changed) reads as missing; so does an expired or unreadable hash field.
local function get_string(slot)
  if slot.field == '' then
    local raw = redis.pcall('GET', slot.key)
    if type(raw) ~= 'string' then return nil end
    return raw
  end
  local raw = redis.pcall('HGET', slot.key, slot.field)
  if type(raw) ~= 'string' then return nil end
  local state, at = split_field(raw)
  if not state or at <= slot.now then return nil end
  return state
end

-- Stores `value` with expiry `ttl` ms (at least 1), or deletes it when ttl <= 0: every call
-- re-arms the expiry (refusals too), which also repairs a key left without one (c07).
-- In a hash the field carries its own expiry stamp, and the hash's expiry is raised to `ttl`
-- when it is lower or missing, never lowered: it is the latest expiry of its fields, so when
-- it fires every field in it has expired anyway. Marks `slot.created` when a new field was
-- made (the driver then sweeps, see check.lua).
local function put(slot, value, ttl)
  local key = slot.key
  if slot.field == '' then
    if ttl <= 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, value, 'PX', int(ttl))
    end
    return
  end
  if ttl <= 0 then
    redis.call('HDEL', key, slot.field)  -- an emptied hash is removed by Redis
    return
  end
  local stored = value .. '@' .. int(slot.now + ttl)
  local made = redis.pcall('HSET', key, slot.field, stored)
  if type(made) == 'table' then  -- a key of another type: replace it
    redis.call('DEL', key)
    made = redis.call('HSET', key, slot.field, stored)
  end
  if made == 1 then slot.created = true end
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, int(ttl)) end
end

-- Deletes up to 2 randomly sampled fields of the hash of `slot` (not its own) that have
-- expired or are unreadable: deleting them changes no decision.
local function sweep(slot)
  local sample = redis.call('HRANDFIELD', slot.key, 2, 'WITHVALUES')
  for j = 1, #sample - 1, 2 do
    if sample[j] ~= slot.field then
      local state, at = split_field(sample[j + 1])
      if not state or at <= slot.now then redis.call('HDEL', slot.key, sample[j]) end
    end
  end
end

-- Algorithms by id (the first per-limit argument): each has
--   validate(a, b, c, cost) -> nil or an error text (checked before anything is read)
--   read(slot, a, b, c, cost, now) -> state, admits   (reads only)
--   write(slot, state, debit) -> remaining, reset_ms, retry_after_ms, next_ms
--   packable: true when its state is one string (it may then live in a hash field)
local algorithms = {}
