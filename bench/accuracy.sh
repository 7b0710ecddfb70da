#!/usr/bin/env bash
# The accuracy harness (issue 5): K gateway processes sharing one Redis, C concurrent clients
# on M keys for T seconds with mixed costs (1 and 3), every admitted request's store decision
# time recorded at the upstream; per algorithm, the largest number of units admitted for a key
# divided by what the rule promises (bench/accuracy_analysis.hpp has the definitions), for the
# whole run (cold start included) and for the steady state after a warm-up of 2 windows.
#
#   bench/accuracy.sh [BUILD_DIR=build] [T=10] [C=32] [M=4] [RUNS=greedy,even,edge]
#
# Each gateway runs one worker; every window is 1 s. Traffic (sluice-accuracy --mode):
# - greedy: closed-loop clients, as fast as answers come, a random key and route per request;
#   every algorithm with K = 1, 2, 4; every limit 20 units per 1 s (token bucket: burst 10).
# - even: each key's requests evenly spaced at 2.5x the limit (C/M clients per key taking
#   turns, a quarter of requests costing 3), started 600 ms into a window (so the cold start is
#   the adversarial burst late in a window, reproducibly); the sliding counter with K = 1, 2, 4
#   at 100/1s and at 20/1s (where one cost-3 request is 15 % of the limit), the other
#   algorithms at 100/1s with K = 2. The steady-state ratio (after the 2-window warm-up) is
#   the "even traffic" figure; the whole-run ratio is the cold start.
# - edge: adversarial, only in the last 100 ms of each window; the window algorithms, K = 2,
#   20/1s.
# Output: one line per run from sluice-accuracy. C must be a multiple of M (even traffic).
set -euo pipefail
BUILD=${1:-build}
T=${2:-10}
C=${3:-32}
M=${4:-4}
RUNS=${5:-greedy,even,edge}
SLUICE=$BUILD/sluice
DRIVER=$BUILD/sluice-accuracy
[[ -x $SLUICE && -x $DRIVER ]] || { echo "build sluice and sluice-accuracy in $BUILD first" >&2; exit 1; }
(( C % M == 0 )) || { echo "C ($C) must be a multiple of M ($M)" >&2; exit 1; }

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

limit_for() {  # limit_for ALGORITHM N
  case $1 in
    token_bucket) echo "{name: acc, by: \"header:X-Client\", rate: $2/1s, burst: $(( $2 / 2 ))}" ;;
    *) echo "{name: acc, by: \"header:X-Client\", algorithm: $1, rate: $2/1s}" ;;
  esac
}

run() {  # run ALGORITHM K MODE N
  local algo=$1 k=$2 mode=$3 n=$4 up gateways="" limit extra=()
  up=$(free_port)
  limit=$(limit_for "$algo" "$n")
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
  [[ $mode == even ]] && extra=(--offered 2.5 --start-phase-ms 600)
  "$DRIVER" --gateways "$gateways" --upstream-port "$up" --algorithm "$algo" --rate "$n" \
    --period-ms 1000 --burst $(( n / 2 )) --clients "$C" --keys "$M" --seconds "$T" --mode "$mode" \
    --edge-ms 100 --warmup-ms 2000 "${extra[@]}"
  for p in "${GW_PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  GW_PIDS=()
}

if [[ ,$RUNS, == *,greedy,* ]]; then
  for algo in token_bucket sliding_log fixed_window sliding_window; do
    for k in 1 2 4; do run "$algo" "$k" greedy 20; done
  done
fi
if [[ ,$RUNS, == *,even,* ]]; then
  for n in 100 20; do
    for k in 1 2 4; do run sliding_window "$k" even "$n"; done
  done
  for algo in token_bucket sliding_log fixed_window; do run "$algo" 2 even 100; done
fi
if [[ ,$RUNS, == *,edge,* ]]; then
  for algo in fixed_window sliding_window sliding_log; do run "$algo" 2 edge 20; done
fi
