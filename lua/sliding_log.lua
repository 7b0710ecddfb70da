-- SPDX-License-Identifier: Apache-2.0
-- sluice check script, part: sliding log (algorithm id 3), exact over any rolling window.
--   a = window_ms (P), b = limit (N), c = 0
-- State per key (never packed into a hash): a list of timestamps in ms, one per admitted unit, oldest first (a list, not
-- a sorted set: the store clock is clamped so stamps are appended in order, and a listpack of
-- integers costs about 10 bytes per unit). An entry stamped t counts while now - t < P.
-- PEXPIRE = time until the newest entry expires, on every call. Mirrors the sliding-log part
-- of src/limiter/window.cpp.
-- Complexity: O(N) per call (the list is read whole); offered where a strict count per
-- rolling window matters more than memory or speed. Its functions are made only when a check
-- has a log limit (logs()).

local log_made
local function logs()
  if log_made then return log_made end
  local function log_wait(entries, first, w, lim, now, need)
    local n = #entries - first + 1
    local over = n + need - lim
    if over <= 0 then return 0 end
    return entries[first + over - 1] + w - now
  end

  local log_fns = {
    validate = function(w, lim, c, cost)
      if not (w >= 1 and lim >= 1 and cost >= 1) then return 'bad sliding log' end
      if lim > TWO_53 or w > TWO_53 then return 'log parameter above 2^53' end
      return nil
    end,

    read = function(slot, w, lim, cost, now)
      local key = slot.key
      local raw = redis.pcall('LRANGE', key, 0, -1)
      local entries = {}
      local wrong_type = false
      if type(raw) == 'table' and raw.err then
        -- Left by a limit whose algorithm changed: replaced on write. Any other error ends
        -- the check with it.
        if not string.find(tostring(raw.err), 'WRONGTYPE', 1, true) then
          return redis.call('LRANGE', key, 0, -1)  -- raises the same error
        end
        wrong_type = true
      elseif type(raw) == 'table' then
        for j = 1, #raw do entries[j] = tonumber(raw[j]) or 0 end
      end
      if #entries > 0 and entries[#entries] > now then now = entries[#entries] end
      local first = 1  -- entries before `first` have expired
      while first <= #entries and entries[first] <= now - w do first = first + 1 end
      slot.st = {w = w, lim = lim, cost = cost, now = now, entries = entries, first = first,
                 wrong_type = wrong_type}
      return log_wait(entries, first, w, lim, now, cost) == 0
    end,

    write = function(slot, debit, peek)
      local key = slot.key
      local st = slot.st
      local w, lim, now, cost = st.w, st.lim, st.now, st.cost
      local retry = log_wait(st.entries, st.first, w, lim, now, cost)
      if not peek then
        if st.wrong_type then redis.call('DEL', key) end
        if st.first > 1 then redis.call('LTRIM', key, st.first - 1, -1) end
      end
      local entries = st.entries
      if debit then
        if not peek then
          local stamp = int(now)
          local left = cost
          while left > 0 do
            local chunk = {}
            local k = math.min(left, 1000)
            for j = 1, k do chunk[j] = stamp end
            redis.call('RPUSH', key, unpack(chunk))
            left = left - k
          end
        end
        for j = 1, cost do entries[#entries + 1] = now end
      end
      local n = #entries - st.first + 1
      local remaining = lim - n
      if remaining < 0 then remaining = 0 end
      local reset = log_wait(entries, st.first, w, lim, now, lim)
      local nxt = 0
      if remaining < lim then nxt = log_wait(entries, st.first, w, lim, now, remaining + 1) end
      if n > 0 and not peek then redis.call('PEXPIRE', key, int(reset)) end
      return remaining, reset, retry, nxt
    end,
  }
  log_made = log_fns
  return log_fns
end
