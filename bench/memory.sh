#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Memory per key in Redis for each algorithm (issue 5): 1,000,000 keys created by calling the
# embedded check script directly (EVALSHA through `redis-cli --pipe`), then
# (INFO memory used_memory after − before) / keys.
#
#   bench/memory.sh [BUILD_DIR=build] [KEYS=1000000]
#
# Buckets look like the gateway's: sl:{free_minute|k|rkey-0000001} (limit name, identity
# kind, API key), under both layouts: `key` (one Redis key per bucket) and `hash` (the
# default: the bucket is field rkey-0000001 of the group hash sl:{free_minute|k|#<g>}, with
# g = FNV-1a-64 mod 65,536, as src/limiter/keys.cpp computes it). Every limit is 100/1d (so
# nothing expires during the run); each bucket gets one request of cost 1 (the sliding log
# then holds one stamp; a second figure, on a tenth of the keys with 100 stamps each, shows
# its per-unit cost). "bytes/bucket" divides by the number of buckets, not of Redis keys.
#
#   bench/memory.sh --memory-store [BUILD_DIR=build] [MAX_BUCKETS...]
#
# The memory store's bound (issue 10): the gateway (memory store, 1 worker) runs a limit of
# rate 10/1h by a header that wrk fills with a fresh value on every request, so every request
# creates a bucket that stays live for 6 minutes (one token of 10/1h). SLUICE_BENCH_ROUNDS
# (default 3) rounds of SLUICE_BENCH_ROUND_SECONDS (default 9) each; after each round: gateway RSS, the
# sluice_store_buckets gauge, sluice_store_evictions_total, req/s and p99. Once per
# MAX_BUCKETS given (default: 1099511627776, i.e. no bound in practice, then 1000000, the
# default, then 250000).
set -euo pipefail
if [[ ${1:-} == --memory-store ]]; then
  shift
  BUILD=${1:-build}
  shift || true
  BOUNDS=("$@")
  ((${#BOUNDS[@]})) || BOUNDS=(1099511627776 1000000 250000)
  SECS=${SLUICE_BENCH_ROUND_SECONDS:-9}
  ROUNDS=${SLUICE_BENCH_ROUNDS:-3}
  command -v wrk >/dev/null || { echo "memory.sh: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
  free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
  wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
  DIR=$(mktemp -d)
  pids=()
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT
  UP=$(free_port)
  "$BUILD"/sluice-echo-upstream --listen 127.0.0.1:$UP --threads 1 & pids+=($!)
  wait_port "$UP"
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
    GP=$(free_port)
    AP=$(free_port)
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
    "$BUILD"/sluice --config "$DIR/rules.yaml" --no-watch --log-level warn & GW=$!
    pids+=($GW)
    wait_port "$GP"
    printf '%-15s %5s %8s %10s %10s %9s %8s\n' "$bound" 0 "$(rss_mb $GW)" "$(metric sluice_store_buckets)" \
      "$(metric sluice_store_evictions_total)" - -
    for round in $(seq "$ROUNDS"); do
      SLUICE_BENCH_ROUND=$round timeout $((SECS + 10)) wrk -t2 -c50 -d"${SECS}s" --latency \
        -s "$DIR/fresh.lua" "http://127.0.0.1:$GP/v1/items" >"$DIR/wrk.out"
      rps=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$DIR/wrk.out")
      p99=$(awk '$1 == "99%" {print $2}' "$DIR/wrk.out")
      printf '%-15s %5s %8s %10s %10s %9s %8s\n' "$bound" "$round" "$(rss_mb $GW)" \
        "$(metric sluice_store_buckets)" "$(metric sluice_store_evictions_total)" "$rps" "$p99"
    done
    kill -TERM "$GW"
    wait "$GW" 2>/dev/null || true
  done
  exit 0
fi
BUILD=${1:-build}
KEYS=${2:-1000000}
SCRIPT=$(mktemp)
# The check script is the concatenation the build embeds (CMakeLists.txt, sluice_embed_lua).
SRC=$(cd "$(dirname "$0")/.." && pwd)
for part in common token_bucket window fixed_window sliding_window sliding_log check; do
  cat "$SRC/lua/$part.lua"; echo
done >"$SCRIPT"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
DIR=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" >"$DIR/redis.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -rf "$DIR" "$SCRIPT"' EXIT
for _ in $(seq 100); do redis-cli -p "$PORT" PING >/dev/null 2>&1 && break; sleep 0.05; done
SHA=$(redis-cli -p "$PORT" -x SCRIPT LOAD <"$SCRIPT")

used() { redis-cli -p "$PORT" INFO memory | tr -d '\r' | awk -F: '/^used_memory:/{print $2}'; }

measure() {  # measure NAME LAYOUT ALGO_ID A B C COST_PER_KEY [KEYS]
  local name=$1 layout=$2 id=$3 a=$4 b=$5 c=$6 units=$7 keys=${8:-$KEYS}
  redis-cli -p "$PORT" FLUSHALL >/dev/null
  sleep 0.5
  local before after
  before=$(used)
  python3 - "$SHA" "$keys" "$layout" "$id" "$a" "$b" "$c" "$units" <<'PY' | redis-cli -p "$PORT" --pipe >/dev/null
import sys
sha, keys, layout, algo, a, b, c, units = sys.argv[1], int(sys.argv[2]), *sys.argv[3:9]
def fnv1a64(text):
    h = 0xcbf29ce484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001b3) % (1 << 64)
    return h
out = sys.stdout.buffer
def cmd(*args):
    parts = [b"*%d\r\n" % len(args)]
    for x in args:
        x = x.encode() if isinstance(x, str) else x
        parts.append(b"$%d\r\n%s\r\n" % (len(x), x))
    return b"".join(parts)
buf = []
for i in range(keys):
    enc = "rkey-%07d" % i
    if layout == "hash":
        key, field = "sl:{free_minute|k|#%x}" % (fnv1a64(enc) % 65536), enc
    else:
        key, field = "sl:{free_minute|k|%s}" % enc, ""
    buf.append(cmd("EVALSHA", sha, "1", key, "-1", "1", "-1", algo, a, b, c, units, "0", field))
    if len(buf) == 10000:
        out.write(b"".join(buf)); buf = []
out.write(b"".join(buf))
PY
  after=$(used)
  local n
  n=$(redis-cli -p "$PORT" DBSIZE)
  python3 -c "print('%-40s buckets=%d redis_keys=%d  used_memory delta=%d  bytes/bucket=%.1f' % ('$name [$layout]', $keys, $n, $after - $before, ($after - $before) / max(1, $keys)))"
}

# Token bucket 100/1d: gcd(100, 86,400,000) = 100, so refill 1 unit per ms, 864,000 units per token.
for layout in hash key; do
  measure "token_bucket 100/1d burst 100" $layout 0 1 864000 100 1
  measure "fixed_window 100/1d" $layout 1 86400000 100 0 1
  measure "sliding_window 100/1d" $layout 2 86400000 100 0 1
done
# The sliding log always has a key of its own (a list).
measure "sliding_log 100/1d (1 stamp)" key 3 86400000 100 0 1
measure "sliding_log 100/1d (100 stamps)" key 3 86400000 100 0 100 $((KEYS / 10))
