-- SPDX-License-Identifier: Apache-2.0
-- wrk script: every request carries one of N distinct API keys (bench-key-1 .. bench-key-N),
-- cycling, so the gateway's store sees N buckets.
local n = tonumber(os.getenv("SLUICE_BENCH_KEYS") or "10000")
local i = 0
request = function()
  i = i % n + 1
  return wrk.format("GET", "/v1/items", {["X-API-Key"] = "bench-key-" .. i})
end
