#!/usr/bin/env bash
# The accuracy harness (issue 5): K gateway processes sharing one Redis, C concurrent clients
# on M keys for T seconds with mixed costs (1 and 3), every admitted request's store decision
# time recorded at the upstream; per algorithm, the largest number of units admitted for a key
# divided by what the rule promises (bench/accuracy_analysis.hpp has the definitions).
#
#   bench/accuracy.sh [BUILD_DIR=build] [T=10] [C=32] [M=4]
#
# Every limit is 20 units per 1 s window (token bucket: 20/1s, burst 10); each gateway runs
# one worker. Traffic: `greedy` (closed-loop clients, as fast as answers come) for every
# algorithm with K = 1, 2, 4; `paced` (even: each client once every INTERVAL ms, offering
# about 2x the limit per key) for the sliding counter; `edge` (adversarial: only in the last
# 100 ms of each window) for the window algorithms with K = 2. Output: one line per run from
# sluice-accuracy.
set -euo pipefail
BUILD=${1:-build}
T=${2:-10}
C=${3:-32}
M=${4:-4}
SLUICE=$BUILD/sluice
DRIVER=$BUILD/sluice-accuracy
[[ -x $SLUICE && -x $DRIVER ]] || { echo "build sluice and sluice-accuracy in $BUILD first" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (echo > /dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; return 1; }

WORK=$(mktemp -d)
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
GW_PIDS=()
cleanup() {
  for p in "${GW_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  kill "$REDIS_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
wait_port "$RPORT"

limit_for() {
  case $1 in
    token_bucket) echo '{name: acc, by: "header:X-Client", rate: 20/1s, burst: 10}' ;;
    *) echo "{name: acc, by: \"header:X-Client\", algorithm: $1, rate: 20/1s}" ;;
  esac
}

run() {  # run ALGORITHM K MODE
  local algo=$1 k=$2 mode=$3 up gateways="" limit
  up=$(free_port)
  limit=$(limit_for "$algo")
  redis-cli -p "$RPORT" FLUSHALL >/dev/null
  GW_PIDS=()
  for i in $(seq "$k"); do
    local port
    port=$(free_port)
    cat >"$WORK/gw$i.yaml" <<YAML
listen: 127.0.0.1:$port
workers: 1
store: {type: redis, address: "127.0.0.1:$RPORT", timeout: 100ms}
decision_time_header: X-Sluice-Decided-At
upstreams: {api: {url: "http://127.0.0.1:$up"}}
routes:
  - {name: light, match: {path_prefix: /a}, upstream: api, cost: 1, on_store_failure: fail_closed, limits: [$limit]}
  - {name: heavy, match: {path_prefix: /b}, upstream: api, cost: 3, on_store_failure: fail_closed, limits: [$limit]}
YAML
    "$SLUICE" --config "$WORK/gw$i.yaml" --log-level warn >"$WORK/gw$i.log" 2>&1 &
    GW_PIDS+=($!)
    wait_port "$port"
    gateways+="${gateways:+,}127.0.0.1:$port"
  done
  "$DRIVER" --gateways "$gateways" --upstream-port "$up" --algorithm "$algo" --rate 20 \
    --period-ms 1000 --burst 10 --clients "$C" --keys "$M" --seconds "$T" --mode "$mode" \
    --edge-ms 100 --interval-ms "$INTERVAL"
  for p in "${GW_PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  GW_PIDS=()
}

# Paced (even) traffic offers about 2x the limit per key: C clients every INTERVAL ms on M keys.
INTERVAL=$(( C * 1000 / (M * 40) ))
for algo in token_bucket sliding_log fixed_window sliding_window; do
  for k in 1 2 4; do run "$algo" "$k" greedy; done
done
for k in 1 2 4; do run sliding_window "$k" paced; done
for algo in fixed_window sliding_window sliding_log; do run "$algo" 2 edge; done
