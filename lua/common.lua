-- sluice check script, part 1: shared helpers. The parts lua/common.lua, lua/token_bucket.lua,
-- lua/window.lua, lua/fixed_window.lua, lua/sliding_window.lua, lua/sliding_log.lua and
-- lua/check.lua are concatenated, in that order, into the one script the stores run
-- (cmake/SluiceEmbedLua.cmake; contract in include/sluice/store/lua_scripts.hpp).
--
-- Lua 5.1 numbers are doubles: every value in these scripts is an integer <= 2^53 (bounds
-- checked at config load and again in each algorithm's validation), so +, -, * of the values
-- used are exact, and division goes through ceil_div / floor_div, which are exact. Only
-- integers and strings cross the Lua -> Redis boundary (Redis formats a Lua number argument in
-- its own way, so numbers are passed to redis.call as '%d' strings).
--
-- Cost (issue 10): the whole chunk runs on every EVALSHA, so everything defined here is made
-- again per check. The parts therefore define few functions (a closure is an allocation), the
-- window and log algorithms build theirs only when a check uses them, no table is made per
-- limit beyond one, and the stored state is packed binary (struct.pack of doubles, read with
-- one struct.unpack) rather than text parsed with string.match.

local TWO_53 = 9007199254740992
local fmod = math.fmod
local pack, unpack_state = struct.pack, struct.unpack

-- ceil(a / b) for integers a >= 0, b > 0, exact for a, b <= 2^53: fmod is exact in IEEE
-- arithmetic, a - r is a representable multiple of b, so (a - r) / b is an exact quotient.
local function ceil_div(a, b)
  local r = fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

-- floor(a / b) for integers a >= 0, b > 0 (exact, as above).
local function floor_div(a, b)
  return (a - fmod(a, b)) / b
end

local function int(x)
  return string.format('%d', x)
end

-- A bucket's place (a "slot", one table per limit): {key = KEYS[i], field = its field
-- argument, ...}. With field '' the state is the key's own string value (store.layout: key)
-- and Redis expires it. Otherwise (store.layout: hash) it is field `field` of the hash `key`,
-- which holds buckets of one limit and namespace, as pack('<d', expires at, ms of store time)
-- followed by the state: a field past its expiry reads as missing, exactly as an expired key
-- would, whatever the parameters it was written under (plans with their own rates share a
-- hash). The state itself is pack('<d...') of the algorithm's integers (see each part).

-- The stored state of `slot` (the bytes after the stamp in a hash), or nil; sets slot.stored
-- when something (even unreadable) is stored. A key of another type (left by a limit whose
-- algorithm or layout changed) reads as missing; so does an expired hash field.
local function get_state(slot, now)
  local raw
  if slot.field == '' then
    raw = redis.pcall('GET', slot.key)
  else
    raw = redis.pcall('HGET', slot.key, slot.field)
  end
  if type(raw) ~= 'string' then return nil end
  slot.stored = true
  if slot.field == '' then return raw end
  if #raw < 8 then return nil end
  if unpack_state('<d', raw) <= now then return nil end
  return string.sub(raw, 9)
end

-- Raises the expiry of the key of `slot` to at least `ttl` ms (never lowers it; a key left
-- without one gets one: c07): a read (PTTL) and, only when it is too low, a write. A hash's
-- expiry that must rise gets up to half a second of slack, so that a hash written more often
-- than that is re-armed about twice a second rather than on every write: it is then the
-- latest expiry of its fields plus at most the slack, so when it fires every field in it has
-- expired anyway.
local function arm(slot, ttl)
  local left = redis.call('PTTL', slot.key)
  if left == -2 or left >= ttl then return end
  if left >= 0 and slot.field ~= '' then
    if ttl < 500 then ttl = ttl + ttl else ttl = ttl + 500 end
  end
  redis.call('PEXPIRE', slot.key, int(ttl))
end

-- Stores `state` (packed bytes) with expiry `ttl` ms (at least 1), or deletes a stored state
-- when ttl <= 0. In a hash the field carries its own expiry stamp and the hash's expiry is
-- raised as arm() does. Marks `slot.created` when a new field was made and `slot.fresh` when
-- the hash was new (the driver then may sweep, see check.lua).
local function put(slot, state, ttl, now)
  local key = slot.key
  if slot.field == '' then
    if ttl <= 0 then
      if slot.stored then redis.call('DEL', key) end
    else
      redis.call('SET', key, state, 'PX', int(ttl))
    end
    return
  end
  if ttl <= 0 then
    if slot.stored then redis.call('HDEL', key, slot.field) end  -- an emptied hash is removed
    return
  end
  local stored = pack('<d', now + ttl) .. state
  local made = redis.pcall('HSET', key, slot.field, stored)
  if type(made) == 'table' then
    -- Only a key of another type is replaced. Any other error (OOM under maxmemory, NOPERM...)
    -- ends the check with that error, before anything is written: deleting the group here
    -- would wipe other callers' buckets, and Redis skips its OOM check once a script wrote.
    if not string.find(tostring(made.err), 'WRONGTYPE', 1, true) then
      return redis.call('HSET', key, slot.field, stored)  -- raises the same error
    end
    redis.call('DEL', key)
    made = redis.call('HSET', key, slot.field, stored)
  end
  if made == 1 then slot.created = true end
  -- Nothing was stored here: the hash may be new (no expiry yet), which NX arms in one call;
  -- a hash that was there already (NX did nothing) is armed as any other.
  if not slot.stored and redis.call('PEXPIRE', key, int(ttl), 'NX') == 1 then
    slot.fresh = true
    return
  end
  arm(slot, ttl)
end

-- Deletes up to 8 randomly sampled fields of the hash of `slot` (not its own) that have
-- expired or are unreadable: deleting them changes no decision.
local function sweep(slot, now)
  local sample = redis.call('HRANDFIELD', slot.key, 8, 'WITHVALUES')
  for j = 1, #sample - 1, 2 do
    if sample[j] ~= slot.field then
      local raw = sample[j + 1]
      if #raw < 8 or unpack_state('<d', raw) <= now then redis.call('HDEL', slot.key, sample[j]) end
    end
  end
end
