-- SPDX-License-Identifier: Apache-2.0
-- sluice check script, part: concurrency (algorithm id 5), at most N requests of one key in
-- flight. Mirrors src/limiter/concurrency.cpp and its use in src/store/memory_store.cpp
-- operation for operation.
--   a = max_in_flight (N), b = slot_ttl ms (T), c = op: 0 acquire, 1 release, 2 renew
--   the limit's field argument = the slot id (the gateway's, unique per request)
-- State per key (never packed into a hash: a sorted set cannot be a field): a sorted set at
-- the bucket's own key, member = slot id, score = the slot's expiry in ms of store time. A
-- slot whose score is at or before now is not held: it is read as absent and removed by the
-- next write. The key's expiry is its latest slot's (PEXPIRE on every write), or the key is
-- deleted when no slot is held. The set is read whole (ZRANGEBYSCORE of the live slots):
-- O(N) per check, N at most 10,000 (validated at config load).
-- A key of another type (a limit whose algorithm changed on reload) reads as empty and is
-- replaced by the first write.

local conc_made
local function conc()
  if conc_made then return conc_made end

  -- The live slots of `key` at `now` as {ids, expiries} in score order, and whether the key
  -- holds another type.
  local function live(key, now)
    local raw = redis.pcall('ZRANGEBYSCORE', key, '(' .. int(now), '+inf', 'WITHSCORES')
    local ids, exp = {}, {}
    if type(raw) == 'table' and raw.err then
      if not sfind(tostring(raw.err), 'WRONGTYPE', 1, true) then
        return redis.call('ZRANGEBYSCORE', key, '(' .. int(now), '+inf')  -- raises the error
      end
      return ids, exp, true
    end
    for j = 1, #raw - 1, 2 do
      ids[#ids + 1] = raw[j]
      exp[#exp + 1] = tonumber(raw[j + 1])
    end
    return ids, exp, false
  end

  local function find(ids, id)
    for j = 1, #ids do
      if ids[j] == id then return j end
    end
    return nil
  end

  -- Earliest and latest of `exp` (0, 0 when empty).
  local function span(exp)
    if #exp == 0 then return 0, 0 end
    local lo, hi = exp[1], exp[1]
    for j = 2, #exp do
      if exp[j] < lo then lo = exp[j] end
      if exp[j] > hi then hi = exp[j] end
    end
    return lo, hi
  end

  local fns = {
    validate = function(n, ttl, op)
      if not (n >= 1 and ttl >= 1 and (op == 0 or op == 1 or op == 2)) then
        return 'bad concurrency'
      end
      if n > TWO_53 or ttl > TWO_53 then return 'concurrency parameter above 2^53' end
      return nil
    end,

    -- Whether the check admits (an acquire: its slot is held, or fewer than N are; a release
    -- or renew always).
    read = function(slot, n, op, now)
      if op ~= 0 then return true end
      local ids = live(slot.key, now)
      return find(ids, slot.id) ~= nil or #ids < n
    end,

    -- Applies the op (an acquire only when `debit`) to the set as this check's earlier limits
    -- left it; returns remaining, reset_ms, retry_after_ms, next_ms and whether the slot was
    -- held (release, renew) or is held (acquire).
    write = function(slot, n, ttl, op, admits, debit, peek, now)
      local key, id = slot.key, slot.id
      local ids, exp, wrong = live(key, now)
      local before_first = span(exp)
      local before_n = #exp
      local at = find(ids, id)
      local held = at ~= nil
      local changed = false
      if op == 0 then
        if debit and not held then
          ids[#ids + 1] = id
          exp[#exp + 1] = now + ttl
          changed = true
        end
        held = held or debit
      elseif op == 1 then
        if held then
          table.remove(ids, at)
          table.remove(exp, at)
          changed = true
        end
      elseif held then
        exp[at] = now + ttl
        changed = true
      end
      local said = held
      if op == 0 then said = admits end

      local first, last = span(exp)
      local remaining = n - #exp
      if remaining < 0 then remaining = 0 end
      local reset = 0
      if #exp > 0 then reset = last - now end
      local nxt = 0
      if remaining < n and #exp > 0 then
        nxt = first - now
        if nxt > 1000 then nxt = 1000 end
      end
      local retry = 0
      if op == 0 and not said and before_n > 0 then
        retry = before_first - now
        if retry > 1000 then retry = 1000 end
      end

      if not peek then
        if wrong then redis.call('DEL', key) end
        if #exp == 0 then
          if not wrong then redis.call('DEL', key) end
        else
          -- Drop what expired, write the op, keep the key until its latest slot expires.
          if not wrong then redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now)) end
          if changed then
            if op == 1 then
              redis.call('ZREM', key, id)
            else
              redis.call('ZADD', key, int(now + ttl), id)
            end
          end
          redis.call('PEXPIRE', key, int(reset))
        end
      end
      return remaining, reset, retry, nxt, said
    end,
  }
  conc_made = fns
  return fns
end
