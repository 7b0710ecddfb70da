#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The over-limit cache (store.over_limit_cache), measured: sluice on the Redis store with 90 %
# of requests from 100 API keys over their limit (1/1h, burst 1) and 10 % from 10,000 keys
# that are never limited. Runs wrk against the gateway with the cache on and off in
# interleaved rounds (pinned: wrk and the upstream on CPU 0, the gateway and Redis on CPU 1)
# and prints requests/s, Redis EVALSHA calls per request and the gateway's cached refusals.
# A run in which wrk completed no request, or the gateway decided none (no script call and no
# cached refusal), fails the script (exit 3).
# Usage: bench/overlimit.sh [build dir (default build)] [rounds (default 2)] [seconds (default 8)]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
[[ ${1:-} == -h || ${1:-} == --help ]] && bench_help "$0"
BUILD=${1:-build}
ROUNDS=${2:-2}
SECS=${3:-8}
BIN="$BUILD/sluice"
for c in wrk nginx redis-server redis-cli curl taskset; do
  command -v "$c" >/dev/null || {
    echo "overlimit.sh: $c is missing (scripts/setup installs it)" >&2
    exit 1
  }
done
[[ -x $BIN ]] || {
  echo "overlimit.sh: $BIN is missing (cmake --build $BUILD --target sluice)" >&2
  exit 1
}

BENCH_WORK=$(mktemp -d)
DIR=$BENCH_WORK
BENCH_PIDS=()
trap bench_cleanup EXIT

UP=$(bench_free_port)
RP=$(bench_free_port)
GW=$(bench_free_port)
AD=$(bench_free_port)

mkdir -p "$DIR/upstream-tmp"
sed -e "s|@DIR@|$DIR|g" -e "s|@PORT@|$UP|g" bench/compare/upstream-nginx.conf >"$DIR/up.conf"
taskset -c 0 nginx -c "$DIR/up.conf" -p "$DIR" >/dev/null 2>&1 &
BENCH_PIDS+=($!)
taskset -c 1 redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
BENCH_PIDS+=($!)
bench_wait_port "$RP" "$!"

cat >"$DIR/abuse.lua" <<'LUA'
-- 90 % of requests from 100 keys over their limit, 10 % from 10,000 keys never limited.
local i = 0
function request()
  i = i + 1
  local key
  if i % 10 == 0 then key = "ok-" .. (i % 10000) else key = "ab-" .. (i % 100) end
  return wrk.format("GET", "/", {["X-API-Key"] = key})
end
function done(summary, latency, requests)
  io.write(string.format("rps %.1f\n", summary.requests / (summary.duration / 1e6)))
  io.write(string.format("requests %d\n", summary.requests))
  io.write(string.format("p99_ms %.2f\n", latency:percentile(99) / 1000))
end
LUA

run() {  # $1 = true|false
  cat >"$DIR/s.yaml" <<YAML
listen: 127.0.0.1:$GW
admin: 127.0.0.1:$AD
workers: 1
store: {type: redis, address: "127.0.0.1:$RP", over_limit_cache: $1}
upstreams: {up: {url: "http://127.0.0.1:$UP"}}
identity: {api_key: {header: X-API-Key}, unknown_key: reject}
plans:
  abuser: {limits: [{name: abuser_key, by: api_key, rate: 1/1h, burst: 1}]}
  normal: {limits: [{name: normal_key, by: api_key, rate: 1000000/1s, burst: 1000000}]}
routes:
  - {name: all, match: {path_prefix: /}, upstream: up, on_store_failure: fail_open}
api_keys:
YAML
  awk 'BEGIN { for (i = 0; i < 100; i++) printf "  ab-%d: abuser\n", i;
               for (i = 0; i < 10000; i++) printf "  ok-%d: normal\n", i }' >>"$DIR/s.yaml"
  redis-cli -p "$RP" flushall >/dev/null
  taskset -c 1 "$BIN" --config "$DIR/s.yaml" >"$DIR/gw.log" 2>&1 &
  local gw=$!
  BENCH_PIDS+=("$gw")
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$AD/readyz" && break
    sleep 0.1
  done
  taskset -c 0 timeout 30 wrk -t1 -c50 -d2s -s "$DIR/abuse.lua" "http://127.0.0.1:$GW/" >/dev/null
  redis-cli -p "$RP" config resetstat >/dev/null
  local cached0
  cached0=$(curl -s "http://127.0.0.1:$AD/metrics" | awk '/^sluice_store_cached_refusals_total/ { print $2 }')
  taskset -c 0 timeout $((SECS + 30)) wrk -t1 -c50 -d"${SECS}s" -s "$DIR/abuse.lua" \
    "http://127.0.0.1:$GW/" >"$DIR/wrk.txt"
  local req rps p99 calls cached
  req=$(awk '/^requests/ { print $2 }' "$DIR/wrk.txt")
  rps=$(awk '/^rps/ { print $2 }' "$DIR/wrk.txt")
  p99=$(awk '/^p99_ms/ { print $2 }' "$DIR/wrk.txt")
  calls=$(redis-cli -p "$RP" info commandstats | awk -F'[:=,]' '/cmdstat_(evalsha|fcall):/ { c += $3 } END { print c + 0 }')
  cached=$(curl -s "http://127.0.0.1:$AD/metrics" | awk '/^sluice_store_cached_refusals_total/ { print $2 }')
  kill "$gw"
  wait "$gw" 2>/dev/null || true
  ((${req:-0} > 0)) || { cat "$DIR/wrk.txt" >&2; bench_measured_nothing overlimit.sh "over_limit_cache $1: wrk completed no request"; }
  awk -v c="${calls:-0}" -v a="${cached:-0}" -v b="${cached0:-0}" 'BEGIN { exit !(c + a - b > 0) }' ||
    bench_measured_nothing overlimit.sh "over_limit_cache $1: no decision counted (no script call, no cached refusal)"
  awk -v o="$1" -v rps="$rps" -v p99="$p99" -v calls="${calls:-0}" -v req="$req" \
    -v cached="$cached" -v c0="$cached0" 'BEGIN {
      printf "| %s | %.0f | %.2f | %.3f | %.3f |\n", o, rps, p99, calls / req, (cached - c0) / req }'
}

echo "| over_limit_cache | req/s | p99 ms | Redis EVALSHA / request | cached refusals / request |"
echo "| --- | ---: | ---: | ---: | ---: |"
for _ in $(seq "$ROUNDS"); do
  run true
  run false
done
