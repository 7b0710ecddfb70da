-- sluice check script, part: sliding window counter (algorithm id 2).
--   a = window_ms, b = limit per window, c = 0
-- Estimate = previous * (P - elapsed) / P + current, compared multiplied out by P.
-- State per bucket (a key's value or a hash field): the string "<window index>:<current>:<previous>", PX = its Reset (the end of
-- the next window while current > 0, of this one while only previous > 0), or deleted.
algorithms[2] = {
  validate = function(w, lim, c, cost) return window_validate(w, lim, c, cost, true) end,
  read = function(slot, w, lim, c, cost, now) return window_read(slot, w, lim, cost, now, true) end,
  write = window_write,
  packable = true,
}
