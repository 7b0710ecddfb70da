#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Memory per bucket in Redis for each algorithm (issue 5): KEYS buckets (default 1,000,000)
# created through the product's own Redis store (sluice-bench-redis-check, bench/redis_check.cpp:
# the gateway's keys, layout and script call), one check per bucket, then
# (INFO memory used_memory after − before) / buckets.
#
#   bench/memory.sh [BUILD_DIR=build] [KEYS=1000000] [ALGORITHMS=token_bucket,fixed_window,sliding_window,sliding_log]
#
# Buckets look like the gateway's for an API key: sl:{free_minute|k|rkey-0000001} (limit
# name, identity kind, API key), under both layouts: `key` (one Redis key per bucket) and
# `hash` (the default: the bucket is field rkey-0000001 of the group hash
# sl:{free_minute|k|#<g>}, 65,536 groups per limit, as src/limiter/keys.cpp computes it).
# Every limit is 100/1d (the driver's `keep`: a bucket with one unit taken lives at least
# 14 minutes, the time a token bucket takes to get that unit back, so every bucket made is
# still there at the end of a case); each bucket gets one check of cost 1 (the sliding log then
# holds one stamp; a second figure, on a tenth of the keys with a check of cost 100 each, shows
# its per-stamp cost). "bytes/bucket" divides by the buckets found in Redis afterwards (the
# fields of the group hashes, or the keys), which must be KEYS: a case that made no bucket, or
# fewer than it checked, fails the script (exit 3 or 1) instead of printing a zero.
#
#   bench/memory.sh --memory-store [BUILD_DIR=build] [MAX_BUCKETS...]
#
# The memory store's bound (issue 10): the gateway (memory store, 1 worker) runs a limit of
# rate 10/1h by a header that wrk fills with a fresh value on every request, so every request
# creates a bucket that stays live for 6 minutes (one token of 10/1h). SLUICE_BENCH_ROUNDS
# (default 3) rounds of SLUICE_BENCH_ROUND_SECONDS (default 9) each; after each round: gateway RSS, the
# sluice_store_buckets gauge, sluice_store_evictions_total, req/s and p99. Once per
# MAX_BUCKETS given (default: 1099511627776, i.e. no bound in practice, then 1000000, the
# default, then 250000). A round in which wrk completed no request, or a bound after whose
# rounds the gateway holds no bucket, fails the script (exit 3).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
[[ ${1:-} == -h || ${1:-} == --help ]] && bench_help "$0"
BENCH_WORK=$(mktemp -d)
BENCH_PIDS=()
trap bench_cleanup EXIT

if [[ ${1:-} == --memory-store ]]; then
  shift
  BUILD=${1:-build}
  shift || true
  BOUNDS=("$@")
  ((${#BOUNDS[@]})) || BOUNDS=(1099511627776 1000000 250000)
  SECS=${SLUICE_BENCH_ROUND_SECONDS:-9}
  ROUNDS=${SLUICE_BENCH_ROUNDS:-3}
  command -v wrk >/dev/null || { echo "memory.sh: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
  DIR=$BENCH_WORK
  UP=$(bench_free_port)
  "$BUILD"/sluice-echo-upstream --listen 127.0.0.1:$UP --threads 1 &
  BENCH_PIDS+=($!)
  bench_wait_port "$UP" "$!"
  # Every request a fresh X-Client value: round, wrk thread, counter.
  cat >"$DIR/fresh.lua" <<'LUA'
local round = os.getenv("SLUICE_BENCH_ROUND") or "0"
local n = 0
function setup(thread)
  n = n + 1
  thread:set("tid", n)
end
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", "/v1/items", {["X-Client"] = "r" .. round .. "t" .. tid .. "n" .. i})
end
LUA
  metric() { curl -s "http://127.0.0.1:$AP/metrics" | awk -v m="$1" '$1 == m {printf "%d", $2}'; }
  rss_mb() { awk '/^VmRSS:/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
  printf '%-15s %5s %8s %10s %10s %9s %8s\n' max_buckets round rss_MB buckets evictions req/s p99
  for bound in "${BOUNDS[@]}"; do
    GP=$(bench_free_port)
    AP=$(bench_free_port)
    cat >"$DIR/rules.yaml" <<YAML
listen: 127.0.0.1:$GP
admin: 127.0.0.1:$AP
workers: 1
store: {type: memory, max_buckets: $bound}
upstreams: {api: {url: "http://127.0.0.1:$UP"}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits: [{name: items_client, by: "header:X-Client", rate: 10/1h, burst: 10}]
YAML
    "$BUILD"/sluice --config "$DIR/rules.yaml" --no-watch --log-level warn &
    GW=$!
    BENCH_PIDS+=("$GW")
    bench_wait_port "$GP" "$GW"
    printf '%-15s %5s %8s %10s %10s %9s %8s\n' "$bound" 0 "$(rss_mb $GW)" "$(metric sluice_store_buckets)" \
      "$(metric sluice_store_evictions_total)" - -
    for round in $(seq "$ROUNDS"); do
      SLUICE_BENCH_ROUND=$round timeout $((SECS + 10)) wrk -t2 -c50 -d"${SECS}s" --latency \
        -s "$DIR/fresh.lua" "http://127.0.0.1:$GP/v1/items" >"$DIR/wrk.out"
      done_n=$(awk '/ requests in / {print $1}' "$DIR/wrk.out")
      ((${done_n:-0} > 0)) ||
        { cat "$DIR/wrk.out" >&2; bench_measured_nothing memory.sh "max_buckets $bound, round $round: wrk completed no request"; }
      rps=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$DIR/wrk.out")
      p99=$(awk '$1 == "99%" {print $2}' "$DIR/wrk.out")
      printf '%-15s %5s %8s %10s %10s %9s %8s\n' "$bound" "$round" "$(rss_mb $GW)" \
        "$(metric sluice_store_buckets)" "$(metric sluice_store_evictions_total)" "$rps" "$p99"
    done
    buckets=$(metric sluice_store_buckets)
    ((${buckets:-0} > 0)) || bench_measured_nothing memory.sh "max_buckets $bound: the gateway holds no bucket after $ROUNDS rounds"
    kill -TERM "$GW"
    wait "$GW" 2>/dev/null || true
  done
  exit 0
fi

BUILD=${1:-build}
KEYS=${2:-1000000}
ALGORITHMS=${3:-token_bucket,fixed_window,sliding_window,sliding_log}
DRIVER=$BUILD/sluice-bench-redis-check
[[ -x $DRIVER ]] ||
  { echo "memory.sh: $DRIVER not found (cmake --build $BUILD --target sluice-bench-redis-check)" >&2; exit 2; }
[[ $KEYS =~ ^[1-9][0-9]*$ ]] || { echo "memory.sh: KEYS must be a positive whole number" >&2; exit 2; }
bench_redis redis
PORT=$REDIS_PORT
cli() { redis-cli -p "$PORT" "$@"; }
used() { cli INFO memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}'; }
# The buckets Redis holds: the fields of every group hash (`|#<g>}`) plus every other sluice
# key (a bucket of the key layout, or a sliding log's own list).
buckets() {
  cli EVAL "local n = 0
    local cursor = '0'
    repeat
      local r = redis.call('SCAN', cursor, 'MATCH', 'sl:*', 'COUNT', 10000)
      cursor = r[1]
      for _, k in ipairs(r[2]) do
        if string.find(k, '|#', 1, true) then n = n + redis.call('HLEN', k) else n = n + 1 end
      end
    until cursor == '0'
    return n" 0
}

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), buckets made by $DRIVER (limit free_minute, 100/1d, by api_key)"
measure() { # measure LABEL ALGORITHM LAYOUT KEYS COST
  local label=$1 algo=$2 layout=$3 keys=$4 cost=$5 before after out rc=0 n redis_keys
  cli FLUSHALL >/dev/null
  sleep 0.5 # lazy frees settle
  before=$(used)
  out=$("$DRIVER" "$PORT" "$algo" 1 "$keys" "$keys" keep "layout=$layout" name=free_minute \
    "cost=$cost" seconds=600) || rc=$?
  after=$(used)
  n=$(buckets)
  redis_keys=$(cli DBSIZE)
  [[ $n =~ ^[0-9]+$ ]] || { echo "memory.sh: $label [$layout]: counting the buckets failed: $n" >&2; exit 1; }
  ((n > 0)) || bench_measured_nothing memory.sh "$label [$layout]: no bucket was made (driver: $out)"
  if ((rc)) || ((n != keys)); then
    echo "memory.sh: $label [$layout]: $n buckets in Redis for $keys checks (driver exit $rc: $out)" >&2
    exit 1
  fi
  awk -v l="$label [$layout]" -v n="$n" -v k="$redis_keys" -v b="$before" -v a="$after" \
    -v s="$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$out")" 'BEGIN {
      printf "%-40s buckets=%d redis_keys=%d  used_memory delta=%d  bytes/bucket=%.1f  (%.0f s)\n",
        l, n, k, a - b, (a - b) / n, s }'
}

for algo in ${ALGORITHMS//,/ }; do
  case $algo in
    token_bucket | fixed_window | sliding_window)
      for layout in hash key; do measure "$algo 100/1d" "$algo" $layout "$KEYS" 1; done ;;
    sliding_log) # always a key of its own (a list)
      measure "sliding_log 100/1d (1 stamp)" sliding_log key "$KEYS" 1
      measure "sliding_log 100/1d (100 stamps)" sliding_log key $((KEYS / 10 > 0 ? KEYS / 10 : 1)) 100 ;;
    *) echo "memory.sh: unknown algorithm $algo" >&2; exit 2 ;;
  esac
done
