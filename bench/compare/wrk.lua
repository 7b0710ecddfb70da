-- SPDX-License-Identifier: Apache-2.0
-- wrk script for bench/compare.sh. Every request carries X-API-Key: key-<i>, i cycling over
-- COMPARE_KEYS keys (default 10,000; each wrk thread starts at its own offset), on the path
-- COMPARE_PATH (default "/"; bench/cluster.sh sends each case to its own route). With
-- COMPARE_RATE set (requests/s over all threads), delay() paces each thread onto a fixed
-- schedule of COMPARE_RATE / COMPARE_THREADS requests/s (LuaJIT's ffi reads the monotonic
-- clock; wrk only takes whole milliseconds, the schedule keeps the average exact). With
-- COMPARE_PICK=random each request takes a key uniformly at random from the COMPARE_KEYS keys
-- (bench/compare-scale.sh's key sweep); COMPARE_START shifts where the walk in turn begins (a
-- warm-up continuing where the last one stopped). done()
-- prints machine-readable "cmp ..." lines: counts, errors and latency percentiles in µs.
local keys = tonumber(os.getenv("COMPARE_KEYS") or "10000")
local rate = tonumber(os.getenv("COMPARE_RATE") or "0")
local nthreads = tonumber(os.getenv("COMPARE_THREADS") or "1")
local path = os.getenv("COMPARE_PATH") or "/"
local random_pick = os.getenv("COMPARE_PICK") == "random"
local start = tonumber(os.getenv("COMPARE_START") or "0")
local percentiles = {50, 75, 90, 95, 97, 98, 99, 99.5, 99.7, 99.8, 99.9, 99.95, 99.97, 99.99}

local made = 0
function setup(thread)
  thread:set("offset", made * 4099)
  made = made + 1
end

local i = 0
function init(args)
  i = ((offset or 0) + start) % keys
  math.randomseed(os.time() + (offset or 0))
end

function request()
  if random_pick then i = math.random(0, keys - 1) else i = (i + 1) % keys end
  return wrk.format("GET", path, {["X-API-Key"] = "key-" .. i})
end

if rate > 0 then
  local ffi = require("ffi")
  ffi.cdef [[
    typedef struct { long tv_sec; long tv_nsec; } compare_timespec;
    int clock_gettime(int clock, compare_timespec *ts);
  ]]
  local ts = ffi.new("compare_timespec")
  local function now_ms()
    ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
    return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
  end
  local interval = 1000 * nthreads / rate -- ms between two requests of this thread
  local next_slot = nil
  function delay()
    local now = now_ms()
    if next_slot == nil or next_slot < now - 100 then
      next_slot = now -- first call, or more than 100 ms behind: no catch-up burst
    end
    local wait = next_slot - now
    next_slot = next_slot + interval
    if wait <= 0 then return 0 end
    return math.floor(wait + 0.5)
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("cmp requests %d\n", summary.requests))
  io.write(string.format("cmp duration_us %d\n", summary.duration))
  io.write(string.format("cmp rps %.1f\n", summary.requests / (summary.duration / 1e6)))
  io.write(string.format("cmp non2xx %d\n", e.status))
  io.write(string.format("cmp socket_errors %d %d %d %d\n", e.connect, e.read, e.write, e.timeout))
  io.write(string.format("cmp lat_mean %.1f\n", latency.mean))
  io.write(string.format("cmp lat_max %d\n", latency.max))
  for _, p in ipairs(percentiles) do
    io.write(string.format("cmp lat %g %d\n", p, latency:percentile(p)))
  end
end
