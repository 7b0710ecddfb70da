#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# First load run: wrk on loopback, side by side in one run:
#   direct   wrk -> echo upstream
#   nginx    wrk -> nginx (plain proxy_pass, no limiting) -> echo upstream
#   gateway  wrk -> sluice (Redis store, 10,000 distinct API keys, two limits each: a plan limit
#            and a route limit, bursts of 1,000,000 that are never reached) -> upstream
# SLUICE_BENCH_WORKERS sets the gateway's workers (default 1: on 2 cores wrk, redis and the
# upstream need the rest). SLUICE_BENCH_LAYOUT sets store.layout (hash, the default, or key).
# Prints requests/s, p99 latency, non-2xx and socket errors for each, and the ratios.
# Usage: bench/load.sh [seconds=10] [connections=50]
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNS="${2:-50}"
KEYS="${SLUICE_BENCH_KEYS:-10000}"
scripts/setup >/dev/null
for p in wrk nginx-light; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null; }
done

OUT="$(mktemp -d -t sluice-bench.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
  shuf -i 20000-60000 -n 1; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

UP=$(free_port); RP=$(free_port); GP=$(free_port); NP=$(free_port)
build/sluice-echo-upstream --listen 127.0.0.1:$UP --threads 1 & pids+=($!)
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT" --logfile "$OUT/redis.log" & pids+=($!)

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

wait_port $UP; wait_port $RP
build/sluice --config "$OUT/rules.yaml" --log-level warn & pids+=($!)
nginx -c "$OUT/nginx.conf" -p "$OUT" & pids+=($!)
wait_port $GP; wait_port $NP

run() {  # name port
  local name=$1 port=$2
  SLUICE_BENCH_KEYS=$KEYS wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s bench/keys.lua \
    "http://127.0.0.1:$port/v1/items" > "$OUT/$name.txt" 2>&1
  local rps p99 non2xx sock
  rps=$(awk '/Requests\/sec/ {print $2}' "$OUT/$name.txt")
  p99=$(awk '$1=="99%" {print $2}' "$OUT/$name.txt")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$OUT/$name.txt"); non2xx=${non2xx:-0}
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
