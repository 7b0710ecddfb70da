-- SPDX-License-Identifier: Apache-2.0
-- sluice check script, part: calendar quota (algorithm id 4): at most N units per calendar
-- day, ISO week or month, at a fixed offset from UTC, on the store's clock. Mirrors
-- src/limiter/calendar.cpp operation for operation.
--   a = unit (1 day, 2 week, 3 month), b = N, c = utc offset in minutes (-840 .. 840)
-- Periods are counted from the Unix epoch in local time (store time + offset): local days,
-- ISO weeks (week 0 starts Monday 1969-12-29) or months (year * 12 + month - 1); a period's
-- bounds are local midnights converted back by the offset. Civil dates are exact integer
-- arithmetic (H. Hinnant, "chrono-Compatible Low-Level Date Algorithms": 400-year eras of
-- 146,097 days, years starting March 1st so the leap day ends a year; 2000 leap, 2100 not).
-- State per bucket (a key's value or a hash field): pack('<dddd', period index, count, zone,
-- period end ms), zone = unit + 4 * (offset + 840): a count stored under another unit or
-- offset (the limit changed on reload) reads as nothing. (The period end is not read back: it
-- makes the state 32 bytes, so a 24-byte token bucket or sliding window state left at the key
-- by a limit whose algorithm changed is never read as a count.) Its expiry is the period's end while
-- something is counted, or it is deleted. The functions are made only when a check has a
-- calendar limit (calendars()).

local calendar_fns
local function calendars()
  if calendar_fns then return calendar_fns end
  local DAY = 86400000

  -- floor(a / b) for b > 0 and any integer a (fmod keeps the sign of a).
  local function sfloor_div(a, b)
    local r = fmod(a, b)
    local q = (a - r) / b
    if r < 0 then q = q - 1 end
    return q
  end

  local function days_from_civil(y, m, d)
    if m <= 2 then y = y - 1 end
    local era = sfloor_div(y, 400)
    local yoe = y - era * 400
    local mp = fmod(m + 9, 12)
    local doy = floor_div(153 * mp + 2, 5) + d - 1
    local doe = yoe * 365 + floor_div(yoe, 4) - floor_div(yoe, 100) + doy
    return era * 146097 + doe - 719468
  end

  -- year, month of day `days` since 1970-01-01
  local function civil_from_days(days)
    local z = days + 719468
    local era = sfloor_div(z, 146097)
    local doe = z - era * 146097
    local yoe = floor_div(doe - floor_div(doe, 1460) + floor_div(doe, 36524)
                          - floor_div(doe, 146096), 365)
    local doy = doe - (365 * yoe + floor_div(yoe, 4) - floor_div(yoe, 100))
    local mp = floor_div(5 * doy + 2, 153)
    local m
    if mp < 10 then m = mp + 3 else m = mp - 9 end
    local y = yoe + era * 400
    if m <= 2 then y = y + 1 end
    return y, m
  end

  -- start and end (ms of store time) of period `index`
  local function period_of(unit, off, index)
    local first, nxt = index, index + 1
    if unit == 2 then
      first = index * 7 - 3
      nxt = first + 7
    elseif unit == 3 then
      local y = sfloor_div(index, 12)
      local m = index - y * 12 + 1
      first = days_from_civil(y, m, 1)
      if m == 12 then nxt = days_from_civil(y + 1, 1, 1) else nxt = days_from_civil(y, m + 1, 1) end
    end
    local off_ms = off * 60000
    return first * DAY - off_ms, nxt * DAY - off_ms
  end

  local function period_index(unit, off, now)
    local day = sfloor_div(now + off * 60000, DAY)
    if unit == 2 then return sfloor_div(day + 3, 7) end
    if unit == 3 then
      local y, m = civil_from_days(day)
      return y * 12 + m - 1
    end
    return day
  end

  local function validate(unit, lim, off, cost)
    if not (unit == 1 or unit == 2 or unit == 3) then return 'bad calendar unit' end
    if not (lim >= 1 and cost >= 1) then return 'bad calendar' end  -- (NaN too)
    if lim > TWO_53 then return 'calendar limit above 2^53' end
    if not (off >= -840 and off <= 840 and off == floor(off)) then
      return 'bad calendar offset'
    end
    return nil
  end

  local function read(slot, unit, lim, off, cost, now)
    local raw, at, stored = get_state(slot.key, slot.field, now)
    slot.stored = stored
    local zone = unit + 4 * (off + 840)
    local index = period_index(unit, off, now)
    local si, sc, sz
    if raw and #raw - at + 1 == 32 then si, sc, sz = unpack_state('<ddd', raw, at) end
    local cur = 0
    local now_eff = now
    if si ~= nil and sz == zone then
      if si > index then  -- the clock stepped back: no time elapses
        index = si
        now_eff = period_of(unit, off, si)
      end
      if si == index then
        cur = sc
        if cur > lim then cur = lim end
        if cur < 0 then cur = 0 end
      end
    end
    local start, finish = period_of(unit, off, index)
    slot.index, slot.current, slot.zone, slot.finish = index, cur, zone, finish
    slot.now, slot.now_read = now_eff, now
    slot.dirty = si ~= index or sc ~= cur or sz ~= zone
    return cur + cost <= lim
  end

  local function write(slot, lim, cost, debit, peek)
    local before = slot.current
    local after = before
    if debit then after = after + cost end
    local to_end = slot.finish - slot.now
    local remaining = lim - after
    if remaining < 0 then remaining = 0 end
    local reset, retry, nxt = 0, 0, 0
    if after > 0 then reset = to_end end
    if before + cost > lim then retry = to_end end
    if remaining < lim then nxt = to_end end
    if peek then
    elseif debit or slot.dirty or reset <= 0 then
      put(slot.key, slot.field, slot.stored, reset, slot.now_read, '<dddd', '<ddddd', slot.index,
          after, slot.zone, slot.finish)
    else
      arm(slot.key, slot.field, reset)
    end
    return remaining, reset, retry, nxt
  end

  calendar_fns = {validate = validate, read = read, write = write}
  return calendar_fns
end
