-- SPDX-License-Identifier: Apache-2.0
-- sluice check script, part 1: shared helpers. The parts lua/common.lua, lua/token_bucket.lua,
-- lua/window.lua, lua/fixed_window.lua, lua/sliding_window.lua, lua/sliding_log.lua,
-- lua/calendar.lua, lua/block.lua, lua/concurrency.lua and lua/check.lua are concatenated, in that order,
-- into one chunk that defines check(keys, argv)
-- (cmake/SluiceEmbedLua.cmake; contract in include/sluice/store/lua_scripts.hpp). The chunk is
-- run two ways: as a Redis function library (FUNCTION LOAD, then FCALL: the chunk runs once, at
-- load) and, where functions are not available, as a script (EVALSHA: the chunk runs on every
-- call and ends with `return check(KEYS, ARGV)`).
--
-- Lua 5.1 numbers are doubles: every value in these scripts is an integer <= 2^53 (bounds
-- checked at config load and again in each algorithm's validation), so +, -, * of the values
-- used are exact, and division goes through ceil_div / floor_div, which are exact. Only
-- integers and strings cross the Lua -> Redis boundary (Redis formats a Lua number argument in
-- its own way, so numbers are passed to redis.call as '%d' strings).
--
-- Cost (issue 10, measured with callgrind on redis-server): a closure made costs about 500
-- instructions, a table with 14 named fields about 5,600, a tonumber() of an argument about
-- 1,500, one struct.unpack of six doubles about 1,100. So the limit's parameters arrive packed
-- (one struct.unpack), state moves between the read and the write of a limit as function
-- arguments and results rather than in tables, a one-limit check makes no table but its reply,
-- the window and log algorithms build their functions only when a check uses them, and the
-- stored state is packed binary (struct.pack of doubles, read with one struct.unpack).
--
-- A function library may not read a global while it loads (Redis 7.0 runs the chunk in an
-- empty environment), so the library functions used are bound by bind() on the first call.

local TWO_53 = 9007199254740992
local fmod, floor, sformat, ssub, sfind, pack, unpack_state

local function bind()
  fmod, floor = math.fmod, math.floor
  sformat, ssub, sfind = string.format, string.sub, string.find
  pack, unpack_state = struct.pack, struct.unpack
end
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
  return sformat('%d', x)
end

-- A bucket's place: (key, field). With field '' the state is the key's own string value
-- (store.layout: key) and Redis expires it. Otherwise (store.layout: hash) it is field `field`
-- of the hash `key`, which holds buckets of one limit and namespace, as pack('<d', expires at,
-- ms of store time) followed by the state: a field past its expiry reads as missing, exactly as
-- an expired key would, whatever the parameters it was written under (plans with their own
-- rates share a hash). The state itself is pack('<d...') of the algorithm's integers (see each
-- part).

-- The stored value at (key, field) and where its state starts in it (1, or 9 after a hash
-- field's stamp), or nil; and whether something (even unreadable) is stored. A key of another
-- type (left by a limit whose algorithm or layout changed) reads as missing; so does an expired
-- hash field. (Callers unpack the state in place: struct.unpack(fmt, raw, at).)
local function get_state(key, field, now)
  local raw
  if field == '' then
    raw = redis.pcall('GET', key)
    if type(raw) ~= 'string' then return nil, 1, false end
    return raw, 1, true
  end
  raw = redis.pcall('HGET', key, field)
  if type(raw) ~= 'string' then return nil, 9, false end
  if #raw < 8 or unpack_state('<d', raw) <= now then return nil, 9, true end
  return raw, 9, true
end

-- Raises the expiry of `key` to at least `ttl` ms (never lowers it; a key left without one gets
-- one: a key left without TTL): a read (PTTL) and, only when it is too low, a write. A hash's expiry (field ~= '')
-- that must rise gets up to half a second of slack, so that a hash written more often than that
-- is re-armed about twice a second rather than on every write: it is then the latest expiry of
-- its fields plus at most the slack, so when it fires every field in it has expired anyway.
local function arm(key, field, ttl)
  local left = redis.call('PTTL', key)
  if left == -2 or left >= ttl then return end
  if left >= 0 and field ~= '' then
    if ttl < 500 then ttl = ttl + ttl else ttl = ttl + 500 end
  end
  redis.call('PEXPIRE', key, int(ttl))
end

local sweep

-- Stores a state at (key, field) with expiry `ttl` ms (at least 1), or deletes a stored state
-- (`stored`: get_state found one) when ttl <= 0. The state is pack(fmt, ...) for a key, and
-- pack(stamped_fmt, now + ttl, ...) in a hash: there the field carries its own expiry stamp
-- and the hash's expiry is raised as arm() does; when the write made a new field in a hash
-- that was there already, about one call in four (chosen by the field's last byte) also sweeps
-- the hash (see sweep).
local function put(key, field, stored, ttl, now, fmt, stamped_fmt, ...)
  if field == '' then
    if ttl <= 0 then
      if stored then redis.call('DEL', key) end
    else
      redis.call('SET', key, pack(fmt, ...), 'PX', int(ttl))
    end
    return
  end
  if ttl <= 0 then
    if stored then redis.call('HDEL', key, field) end  -- an emptied hash is removed
    return
  end
  local value = pack(stamped_fmt, now + ttl, ...)
  local made = redis.pcall('HSET', key, field, value)
  if type(made) == 'table' then
    -- Only a key of another type is replaced. Any other error (OOM under maxmemory, NOPERM...)
    -- ends the check with that error, before anything is written: deleting the group here
    -- would wipe other callers' buckets, and Redis skips its OOM check once a script wrote.
    if not sfind(tostring(made.err), 'WRONGTYPE', 1, true) then
      return redis.call('HSET', key, field, value)  -- raises the same error
    end
    redis.call('DEL', key)
    made = redis.call('HSET', key, field, value)
  end
  -- Nothing was stored here: the hash may be new (no expiry yet), which NX arms in one call;
  -- a hash that was there already (NX did nothing) is armed as any other.
  if not stored and redis.call('PEXPIRE', key, int(ttl), 'NX') == 1 then return end
  arm(key, field, ttl)
  if made == 1 and string.byte(field, -1) % 4 == 0 then sweep(key, field, now) end
end

-- Sweep (hash layout): a field past its expiry stays in its hash until the hash expires. So
-- that a hash that never goes quiet does not fill up with them, put() calls this for about one
-- in four fields it creates in a hash that was there already: it samples 8 random fields and
-- deletes those (not `field` itself) that have expired or are unreadable. An expired field
-- reads as missing, so deleting it changes no decision. That samples 2 fields per created field
-- on average, as a sweep of 2 on every creation would, in a quarter of the calls; every field
-- created expires some time, so at most about half of a busy hash's fields are expired ones in
-- the long run.
sweep = function(key, field, now)
  local sample = redis.call('HRANDFIELD', key, 8, 'WITHVALUES')
  for j = 1, #sample - 1, 2 do
    if sample[j] ~= field then
      local raw = sample[j + 1]
      if #raw < 8 or unpack_state('<d', raw) <= now then redis.call('HDEL', key, sample[j]) end
    end
  end
end
