-- sluice check script, part: fixed window (algorithm id 1).
--   a = window_ms, b = limit per window, c = 0
-- State per bucket (a key's value or a hash field): the string "<window index>:<count>", PX = time to the window's end, set on
-- every call in the same step as the increment (so no key is ever left without a TTL), or
-- deleted when the count is 0.
algorithms[1] = {
  validate = function(w, lim, c, cost) return window_validate(w, lim, c, cost, false) end,
  read = function(slot, w, lim, c, cost, now) return window_read(slot, w, lim, cost, now, false) end,
  write = window_write,
  packable = true,
}
