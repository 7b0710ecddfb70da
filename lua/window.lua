-- SPDX-License-Identifier: Apache-2.0
-- sluice check script, part: shared arithmetic of the window algorithms (fixed window and
-- sliding window counter). Mirrors src/limiter/window.cpp operation for operation.
--   a = window_ms (P), b = window limit (N), c = 0
-- Windows are aligned to multiples of P on the store's clock: window k = [k*P, (k+1)*P).
-- Counts are clamped to [0, N] on read; the sliding counter's products are at most N*P,
-- which validation keeps <= 2^53.
--
-- These functions are made only when a check has a window limit (windows() builds them on
-- first use): the chunk runs on every check, and a token-bucket check should not pay for them.
-- State: pack('<dd', window index, count) for the fixed window, pack('<ddd', index, current,
-- previous) for the sliding window (the text forms "<i>:<c>" and "<i>:<c>:<p>" of earlier
-- versions are still read). A refusal that leaves the counts as stored writes nothing but,
-- when needed, the expiry.

local window_fns
local function windows()
  if window_fns then return window_fns end
local function window_validate(w, lim, unused, cost, sliding)
  if not (w >= 1 and lim >= 1 and cost >= 1) then return 'bad window' end  -- (NaN too)
  if lim > TWO_53 or w > TWO_53 then return 'window parameter above 2^53' end
  if sliding and lim * w > TWO_53 then return 'window limit * window ms above 2^53' end
  return nil
end

-- Counters {index, current, previous} brought to `now` (see current_counts in window.hpp);
-- returns them and the effective time max(now, stored window start).
local function window_counts(stored_index, stored_cur, stored_prev, w, lim, now, sliding)
  local c = {index = floor_div(now, w), current = 0, previous = 0}
  local now_eff = now
  if stored_index == nil then return c, now_eff end
  if stored_index > c.index then  -- the clock stepped back: no time elapses
    c.index = stored_index
    now_eff = stored_index * w
  end
  local function clamp(v)  -- up to 2N: above N is a debt a settled charge left
    if v > 2 * lim then return 2 * lim end
    if v < 0 then return 0 end
    return v
  end
  if stored_index == c.index then
    c.current = clamp(stored_cur)
    if sliding then c.previous = clamp(stored_prev) end
  elseif sliding and stored_index == c.index - 1 then
    c.previous = clamp(stored_cur)
  end
  return c, now_eff
end

-- Milliseconds from `now` until `need` units fit (0 when they fit now); see window_wait.
local function window_wait(c, w, lim, now, need, sliding)
  local elapsed = now - c.index * w
  local to_end = w - elapsed
  local room = lim - c.current - need
  if not sliding then
    if room >= 0 then return 0 end
    return to_end
  end
  if room >= 0 and c.previous * to_end <= room * w then return 0 end
  if room >= 0 and c.previous > 0 then
    local q = floor_div(room * w, c.previous)
    if q >= 1 then return (w - q) - elapsed end
  end
  local e = 0
  if c.current > 0 then
    e = w - floor_div((lim - need) * w, c.current)
    if e < 0 then e = 0 end
  end
  return to_end + e
end

-- The stored {index, current, previous} of the state at `at` in `raw` (nils when absent or
-- unreadable), and whether it was text.
local function window_parse(raw, at, sliding)
  if not raw then return nil end
  local len = #raw - at + 1
  if sliding and len == 24 then return unpack_state('<ddd', raw, at) end
  if not sliding and len == 16 then
    local si, sc = unpack_state('<dd', raw, at)
    return si, sc, 0
  end
  local si, sc, sp
  if sliding then
    si, sc, sp = string.match(ssub(raw, at), '^(%d+):(%d+):(%d+)$')
  else
    si, sc = string.match(ssub(raw, at), '^(%d+):(%d+)$')
    sp = '0'
  end
  if si then return tonumber(si), tonumber(sc), tonumber(sp), true end
  return nil
end

local function window_read(slot, w, lim, cost, now, sliding)
  local raw, at, stored = get_state(slot.key, slot.field, now)
  slot.stored = stored
  local si, sc, sp, text = window_parse(raw, at, sliding)
  local c, now_eff = window_counts(si, sc, sp, w, lim, now, sliding)
  slot.before = c
  slot.now = now_eff
  slot.now_read = now
  slot.dirty = text or si ~= c.index or sc ~= c.current or (sliding and sp ~= c.previous)
  return window_wait(c, w, lim, now_eff, cost, sliding) == 0
end

local function window_write(slot, w, lim, cost, debit, sliding, peek)
  local now = slot.now
  local b = slot.before
  local a = {index = b.index, current = b.current, previous = b.previous}
  if debit then a.current = a.current + cost end

  local remaining
  if sliding then
    local spare = (lim - a.current) * w - a.previous * (w - (now - a.index * w))
    if spare <= 0 then remaining = 0 else remaining = floor_div(spare, w) end
  else
    remaining = lim - a.current
    if remaining < 0 then remaining = 0 end
  end
  local reset = window_wait(a, w, lim, now, lim, sliding)
  local retry = window_wait(b, w, lim, now, cost, sliding)
  local nxt = 0
  if remaining < lim then nxt = window_wait(a, w, lim, now, remaining + 1, sliding) end

  -- The state matters exactly until Reset: then both counts read as 0.
  if peek then
  elseif debit or slot.dirty or reset <= 0 then
    if sliding then
      put(slot.key, slot.field, slot.stored, reset, slot.now_read, '<ddd', '<dddd', a.index,
          a.current, a.previous)
    else
      put(slot.key, slot.field, slot.stored, reset, slot.now_read, '<dd', '<ddd', a.index,
          a.current)
    end
  else
    arm(slot.key, slot.field, reset)
  end
  return remaining, reset, retry, nxt
end

-- Settles `units` (> 0: a charge, < 0: a refund) on the window at `slot` (settled_counts in
-- src/limiter/window.cpp): a charge counts in the current window, up to 2N; a refund comes off
-- the window holding store time `taken_at` (< 0: the current one), never below 0 — the
-- sliding counter's previous window when it is the one just before, nothing when it has
-- ended. Written (or deleted when nothing is left); returns admits, remaining, reset_ms,
-- retry_after_ms, next_ms for a request of `cost`.
local function window_settle(slot, w, lim, cost, now, sliding, units, taken_at)
  window_read(slot, w, lim, cost, now, sliding)
  local c = slot.before
  local s = {index = c.index, current = c.current, previous = c.previous}
  if units >= 0 then
    s.current = s.current + units
    if s.current > 2 * lim then s.current = 2 * lim end
  else
    local taken = c.index
    if taken_at >= 0 then taken = floor_div(taken_at, w) end
    if taken == c.index then
      s.current = s.current + units
      if s.current < 0 then s.current = 0 end
    elseif sliding and taken == c.index - 1 then
      s.previous = s.previous + units
      if s.previous < 0 then s.previous = 0 end
    end
  end
  slot.before = s
  slot.dirty = true
  local remaining, reset, retry, nxt = window_write(slot, w, lim, cost, false, sliding, false)
  return retry == 0, remaining, reset, retry, nxt
end

window_fns = {validate = window_validate, read = window_read, write = window_write,
              settle = window_settle}
return window_fns
end
