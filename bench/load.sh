#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# First load run: wrk on loopback, side by side in one run:
#   direct   wrk -> echo upstream
#   nginx    wrk -> nginx (plain proxy_pass, no limiting) -> echo upstream
#   gateway  wrk -> sluice (Redis store, 10,000 distinct API keys, two limits each: a plan limit
#            and a route limit, bursts of 1,000,000 that are never reached) -> upstream
# SLUICE_BENCH_WORKERS sets the gateway's workers (default 1: on 2 cores wrk, redis and the
# upstream need the rest). SLUICE_BENCH_LAYOUT sets store.layout (hash, the default, or key).
# Prints requests/s, p99 latency, non-2xx and socket errors for each, and the ratios. A path on
# which wrk completed no request, or none answered 2xx, fails the script (exit 3).
# Usage: bench/load.sh [seconds=10] [connections=50]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
[[ ${1:-} == -h || ${1:-} == --help ]] && bench_help "$0"
DURATION="${1:-10}"
CONNS="${2:-50}"
KEYS="${SLUICE_BENCH_KEYS:-10000}"
scripts/setup >/dev/null
for p in wrk nginx-light; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null; }
done

BENCH_WORK="$(mktemp -d -t sluice-bench.XXXXXX)"
OUT=$BENCH_WORK
BENCH_PIDS=()
trap bench_cleanup EXIT

UP=$(bench_free_port); RP=$(bench_free_port); GP=$(bench_free_port); NP=$(bench_free_port)
build/sluice-echo-upstream --listen 127.0.0.1:$UP --threads 1 & BENCH_PIDS+=($!)
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT" --logfile "$OUT/redis.log" & BENCH_PIDS+=($!)

{
  echo "listen: 127.0.0.1:$GP"
  echo "workers: ${SLUICE_BENCH_WORKERS:-1}"
  echo "store: {type: redis, address: 127.0.0.1:$RP, timeout: 50ms, layout: ${SLUICE_BENCH_LAYOUT:-hash}}"
  echo "upstreams: {api: {url: \"http://127.0.0.1:$UP\"}}"
  echo "identity: {api_key: {header: X-API-Key}, unknown_key: reject}"
  echo "plans: {bench: {limits: [{name: bench_plan, rate: 1/1h, burst: 1000000}]}}"
  echo "api_keys:"
  for i in $(seq "$KEYS"); do echo "  bench-key-$i: bench"; done
  echo "routes:"
  echo "  - name: items"
  echo "    match: {path_prefix: /v1/items}"
  echo "    upstream: api"
  echo "    limits: [{name: bench_items, by: api_key, rate: 1/1h, burst: 1000000}]"
} > "$OUT/rules.yaml"

cat > "$OUT/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $OUT/nginx.pid;
error_log $OUT/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream api { server 127.0.0.1:$UP; keepalive 64; }
  server {
    listen 127.0.0.1:$NP;
    location / { proxy_pass http://api; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGINX

bench_wait_port $UP; bench_wait_port $RP
build/sluice --config "$OUT/rules.yaml" --log-level warn & BENCH_PIDS+=($!)
nginx -c "$OUT/nginx.conf" -p "$OUT" & BENCH_PIDS+=($!)
bench_wait_port $GP; bench_wait_port $NP

run() {  # name port
  local name=$1 port=$2
  SLUICE_BENCH_KEYS=$KEYS wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s bench/keys.lua \
    "http://127.0.0.1:$port/v1/items" > "$OUT/$name.txt" 2>&1
  local rps p99 non2xx sock total
  total=$(awk '/ requests in / {print $1}' "$OUT/$name.txt")
  ((${total:-0} > 0)) || { cat "$OUT/$name.txt" >&2; bench_measured_nothing load.sh "$name: wrk completed no request"; }
  rps=$(awk '/Requests\/sec/ {print $2}' "$OUT/$name.txt")
  p99=$(awk '$1=="99%" {print $2}' "$OUT/$name.txt")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$OUT/$name.txt"); non2xx=${non2xx:-0}
  ((non2xx < total)) || bench_measured_nothing load.sh "$name: none of $total requests answered 2xx"
  sock=$(awk -F'[ ,]+' '/Socket errors/ {print $4"/"$6"/"$8"/"$10}' "$OUT/$name.txt"); sock=${sock:-0/0/0/0}
  printf '%-8s %12s req/s   p99 %-9s non-2xx %-6s socket errors (connect/read/write/timeout) %s\n' \
    "$name" "$rps" "$p99" "$non2xx" "$sock"
  eval "RPS_$name=$rps"
}

echo "sluice load run: ${DURATION}s each, $CONNS connections, wrk -t2, $KEYS API keys, $(nproc) cores"
run direct $UP
run nginx $NP
run gateway $GP
awk -v g="$RPS_gateway" -v d="$RPS_direct" -v n="$RPS_nginx" \
  'BEGIN { printf "ratio gateway/direct %.2f   gateway/nginx %.2f   nginx/direct %.2f\n", g/d, g/n, n/d }'
echo "redis keys after the run: $(redis-cli -p $RP dbsize)"
