-- SPDX-License-Identifier: Apache-2.0
-- wrk script for bench/fault.sh: counts responses by status and whether they carried
-- X-RateLimit-Remaining, summed over wrk's threads, printed as "status <code> <n>" and
-- "quota_fields <n>" lines after the run.
local threads = {}
counts = {}
quota = 0

function setup(thread)
  table.insert(threads, thread)
end

function response(status, headers, body)
  counts[status] = (counts[status] or 0) + 1
  if headers["X-RateLimit-Remaining"] ~= nil then quota = quota + 1 end
end

function done(summary, latency, requests)
  local total, q = {}, 0
  for _, t in ipairs(threads) do
    for s, n in pairs(t:get("counts")) do total[s] = (total[s] or 0) + n end
    q = q + t:get("quota")
  end
  for s, n in pairs(total) do io.write(string.format("status %d %d\n", s, n)) end
  io.write(string.format("quota_fields %d\n", q))
end
