#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The accuracy harness (issue 5; the cluster runs, issue 11): K gateway processes sharing one
# store, C concurrent clients on M keys for T seconds with mixed costs (1 and 3), every admitted
# request's store decision time recorded at the upstream; per algorithm, the largest number of
# units admitted for a key divided by what the rule promises (bench/accuracy_analysis.hpp has the
# definitions), for the whole run (cold start included) and for the steady state after a warm-up
# of 2 windows; and the overshoot in units (the most admitted above the promise).
#
#   bench/accuracy.sh [BUILD_DIR=build] [T=10] [C=32] [M=4] [RUNS=greedy,even,edge]
#
# RUNS is a comma list of greedy, even, edge, cluster, lease, lease-stall, shards, calendar,
# settle and concurrency (each described below), given as the fifth argument or as the
# environment variable RUNS (the argument wins when both are given): e.g.
# `bench/accuracy.sh build 10 32 4 settle,concurrency` or `RUNS=cluster,lease,shards bench/accuracy.sh`.
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
# On a Redis Cluster of three masters (no replicas; started by the script on free loopback
# ports, stopped by pid), K = 3 gateways on `store.type: redis-cluster` with every master as a
# seed; after each run, the sluice keys each master held during it ("keys per master a/b/c",
# sampled every 0.5 s):
# M is M_CLUSTER (default 8) for these runs:
# - cluster: greedy for every algorithm at 20/1s, even for the sliding counter at 100/1s (the
#   exact modes: ratio <= 1.00, the sliding counter's cold start excepted);
# - lease: the token bucket (20/1s, burst 10) with `lease: 4`, greedy: the overshoot in units
#   next to the stated bound, lease × workers × instances = 4 × 1 × 3 = 12;
# - lease-stall: leases filled, then stalled: the token bucket at 200/1s (burst 100) with
#   `lease: 10` (lease_time 250 ms, the default), the driver's --mode stall: rounds of 1.5 s in
#   which each gateway first takes a lease of every key (one request of cost 1 each: 9 tokens
#   held ahead), all clients stay quiet for 200 ms (the bucket refills the 30 tokens the leases
#   took in 150 ms; the leases are still live), send greedy for 300 ms (the held tokens are
#   spent on top of the bucket's full burst), then rest 1 s. The overshoot in units next to the
#   stated bound, 10 × 1 × 3 = 30 (what the gateways can hold ahead is 3 × 9 = 27);
# - shards: one `by: global` token bucket (30/1s, burst 15) with `shards: 3`, greedy, every
#   admission measured as one key; the stated bound: never above the limit (0 units); the same
#   limit without shards first, for comparison.
# - calendar (not in the default RUNS): a calendar quota (algorithm calendar, 50/month per key)
#   across a month boundary on a stepped store clock: a redis-server run under the test preload
#   tests/preload/clock_step.cpp (build the sluice_test_clock_step target) whose wall clock is
#   set T/2 s before the next 1st of a month 00:00 UTC; K = 2 gateways, greedy; the driver's
#   --calendar-boundary-ms line: the most units a key got before and after the boundary (at
#   most 50 each: exact=yes) and late_ms, how long after the boundary the last key was first
#   admitted again.
# - settle (not in the default RUNS): settled costs, a fixed window of SETTLE_N (default 1000)
#   units per 1 s per key with `charge: {reserve: 50, settle: {header: X-Usage-Tokens}}`, K = 2
#   gateways, greedy on M keys; the driver (the upstream) reports each request's cost in
#   X-Usage-Tokens, chosen per request from a hash of client and request number. Two runs:
#   costs 1-50 (never above the reservation: the settled total per key per window at most N,
#   ratio <= 1.000 exact) and costs 25-100 (up to 50 above it: the overshoot within the stated
#   bound, requests in flight (C) x largest excess). Settled total = the costs the upstream
#   reported for the requests decided in that window.
# - concurrency (not in the default RUNS): `algorithm: concurrency, max_in_flight: 4` on one
#   key, K = 3 gateways, C clients, the upstream holding each answer 200 ms (a client pauses
#   10 ms after a 429); the upstream samples its in-flight count at every arrival: the maximum
#   must stay at most 4; the mean, admitted and refused are reported.
# Each lease, lease-stall, shards, settle or concurrency run that breaks its bound (driver
# exit 1) or measures nothing (exit 3) is reported and the script goes on; it exits with the
# first such status at the end. Any other run that measures nothing stops the script (exit 3).
# `lease` and `shards` are rules-file fields; a build whose loader does not know one says so
# and skips that run (the message names the loader's error).
# Output: one line per run from sluice-accuracy. C must be a multiple of M (even traffic).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
[[ ${1:-} == -h || ${1:-} == --help ]] && bench_help "$0"
BUILD=${1:-build}
T=${2:-10}
C=${3:-32}
M=${4:-4}
RUNS=${5:-${RUNS:-greedy,even,edge}}
SLUICE=$BUILD/sluice
DRIVER=$BUILD/sluice-accuracy
[[ -x $SLUICE && -x $DRIVER ]] || { echo "build sluice and sluice-accuracy in $BUILD first" >&2; exit 1; }
(( C % M == 0 )) || { echo "C ($C) must be a multiple of M ($M)" >&2; exit 1; }

BENCH_WORK=$(mktemp -d)
BENCH_PIDS=()
trap bench_cleanup EXIT
WORK=$BENCH_WORK
if [[ ,$RUNS, == *,greedy,* || ,$RUNS, == *,even,* || ,$RUNS, == *,edge,* || ,$RUNS, == *,settle,* ||
      ,$RUNS, == *,concurrency,* ]]; then
  bench_redis redis
  RPORT=$REDIS_PORT
fi
CLUSTER_UP=0
need_cluster() {
  ((CLUSTER_UP)) && return 0
  bench_cluster 3
  CLUSTER_UP=1
  echo "redis cluster: 3 masters on 127.0.0.1:$(IFS=,; echo "${CLUSTER_PORTS[*]}") (no replicas)"
}

limit_for() {  # limit_for ALGORITHM N [BY] [EXTRA_FIELDS]
  local by=${3:-"header:X-Client"} extra=${4:+, $4}
  case $1 in
    token_bucket) echo "{name: acc, by: \"$by\", rate: $2/1s, burst: $(( $2 / 2 ))$extra}" ;;
    calendar) echo "{name: acc, by: \"$by\", algorithm: calendar, rate: $2/month$extra}" ;;
    concurrency) echo "{name: acc, by: \"$by\", algorithm: concurrency, max_in_flight: $2, slot_ttl: 5s$extra}" ;;
    *) echo "{name: acc, by: \"$by\", algorithm: $1, rate: $2/1s$extra}" ;;
  esac
}

# run ALGORITHM K MODE N [STORE=redis|cluster] [BY] [EXTRA_FIELDS] [DRIVER_ARGS...]
run() {
  local algo=$1 k=$2 mode=$3 n=$4 store_kind=${5:-redis} by=${6:-} fields=${7:-}
  shift $(( $# < 7 ? $# : 7 ))
  local up gateways="" limit extra=("$@") store
  up=$(bench_free_port)
  limit=$(limit_for "$algo" "$n" "$by" "$fields")
  if [[ $store_kind == cluster ]]; then
    bench_cluster_flush
    store="{type: redis-cluster, nodes: $CLUSTER_SEEDS, timeout: 100ms}"
  else
    redis-cli -p "$RPORT" FLUSHALL >/dev/null
    store="{type: redis, address: \"127.0.0.1:$RPORT\", timeout: 100ms}"
  fi
  # The gateways are BENCH_PIDS from here on (stopped on exit), taken off it after the run.
  local base=${#BENCH_PIDS[@]} gw_pids=()
  for i in $(seq "$k"); do
    local port
    port=$(bench_free_port)
    cat >"$WORK/gw$i.yaml" <<YAML
listen: 127.0.0.1:$port
workers: 1
store: $store
decision_time_header: X-Sluice-Decided-At
upstreams: {api: {url: "http://127.0.0.1:$up"}}
routes:
  - {name: light, match: {path_prefix: /a}, upstream: api, cost: 1, on_store_failure: fail_closed, limits: [$limit]}
  - {name: heavy, match: {path_prefix: /b}, upstream: api, cost: 3, on_store_failure: fail_closed, limits: [$limit]}
YAML
    "$SLUICE" --config "$WORK/gw$i.yaml" --log-level warn >"$WORK/gw$i.log" 2>&1 &
    gw_pids+=($!)
    BENCH_PIDS+=($!)
    bench_wait_port "$port" "$!"
    gateways+="${gateways:+,}127.0.0.1:$port"
  done
  [[ $mode == even ]] && extra+=(--offered 2.5 --start-phase-ms 600)
  if [[ $store_kind == cluster ]]; then
    # The gateways' connections to every master are up once /readyz would say so; a short
    # pause is enough on loopback (a check before it fails closed and shows as "other").
    sleep 0.5
  fi
  local sampler=""
  if [[ $store_kind == cluster ]]; then
    # Buckets expire soon after their last check: the keys each master holds, sampled every
    # 0.5 s during the run.
    rm -f "$WORK"/keys.*
    ( for _ in $(seq $(( 2 * T + 4 ))); do
        for p in "${CLUSTER_PORTS[@]}"; do redis-cli -p "$p" --scan --pattern 'sl:*' >>"$WORK/keys.$p"; done
        sleep 0.5
      done ) &
    sampler=$!
  fi
  # The driver's status is the run's (returned once the gateways are stopped).
  local status=0
  "$DRIVER" --gateways "$gateways" --upstream-port "$up" --algorithm "$algo" --rate "$n" \
    --period-ms 1000 --burst $(( n / 2 )) --clients "$C" --keys "$M" --seconds "$T" --mode "$mode" \
    --edge-ms 100 --warmup-ms 2000 "${extra[@]}" || status=$?
  if [[ -n $sampler ]]; then
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    local per=""
    for p in "${CLUSTER_PORTS[@]}"; do per+="${per:+/}$(sort -u "$WORK/keys.$p" 2>/dev/null | wc -l)"; done
    echo "  keys per master $per${fields:+ ($fields)}"
  fi
  for p in "${gw_pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  BENCH_PIDS=("${BENCH_PIDS[@]:0:base}")
  return "$status"
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
# On the cluster, 8 keys (M_CLUSTER): with the hash layout, client-0 .. client-3's buckets of a
# limit land on two masters only, whatever its name (the group keys differ only in their
# `#<g>` ends, and CRC16 is linear, so their slots stay as far apart for every name);
# client-0 .. client-7's are on all three.
M_CLUSTER=${M_CLUSTER:-8}
if [[ ,$RUNS, == *,cluster,* || ,$RUNS, == *,lease,* || ,$RUNS, == *,lease-stall,* || ,$RUNS, == *,shards,* ]]; then
  (( C % M_CLUSTER == 0 )) || { echo "C ($C) must be a multiple of M_CLUSTER ($M_CLUSTER)" >&2; exit 1; }
  M=$M_CLUSTER
fi
if [[ ,$RUNS, == *,cluster,* ]]; then
  need_cluster
  for algo in token_bucket sliding_log fixed_window sliding_window; do run "$algo" 3 greedy 20 cluster; done
  run sliding_window 3 even 100 cluster
fi
BENCH_STATUS=0
# A run whose bound broke (1) or that measured nothing (3): reported, the script goes on.
bounded_run() {
  local rc=0
  run "$@" || rc=$?
  if ((rc)); then
    echo "  FAILED: exit $rc ($( ((rc == 3)) && echo "measured nothing" || echo "bound broken"))"
    ((BENCH_STATUS)) || BENCH_STATUS=$rc
  fi
}
LEASE=4
if [[ ,$RUNS, == *,lease,* ]]; then
  if bench_supports lease "{name: l, by: \"header:X-Client\", rate: 20/1s, burst: 10, lease: $LEASE}"; then
    need_cluster
    # Stated bound: lease × workers × instances units above the limit in any window.
    bounded_run token_bucket 3 greedy 20 cluster "" "lease: $LEASE" --bound-units $(( LEASE * 1 * 3 ))
  else
    echo "lease: skipped: this build's rules loader does not accept \`lease: $LEASE\` on a token bucket ($BENCH_UNSUPPORTED_WHY)"
  fi
fi
if [[ ,$RUNS, == *,lease-stall,* ]]; then
  STALL_LEASE=10
  if bench_supports lease "{name: l, by: \"header:X-Client\", rate: 200/1s, burst: 100, lease: $STALL_LEASE}"; then
    need_cluster
    # Stated bound: lease × workers × instances units above the limit in any interval.
    bounded_run token_bucket 3 stall 200 cluster "" "lease: $STALL_LEASE" \
      --stall-quiet-ms 200 --stall-burst-ms 300 --stall-rest-ms 1000 --bound-units $(( STALL_LEASE * 1 * 3 ))
  else
    echo "lease-stall: skipped: this build's rules loader does not accept \`lease: $STALL_LEASE\` on a token bucket ($BENCH_UNSUPPORTED_WHY)"
  fi
fi
if [[ ,$RUNS, == *,shards,* ]]; then
  if bench_supports shards "{name: s, by: global, rate: 30/1s, burst: 15, shards: 3}"; then
    need_cluster
    bounded_run token_bucket 3 greedy 30 cluster global "" --global 1 --bound-units 0
    # Stated bound: never above the limit.
    bounded_run token_bucket 3 greedy 30 cluster global "shards: 3" --global 1 --bound-units 0
  else
    echo "shards: skipped: this build's rules loader does not accept \`shards: 3\` on a by: global limit ($BENCH_UNSUPPORTED_WHY)"
  fi
fi
if [[ ,$RUNS, == *,calendar,* ]]; then
  PRELOAD=$BUILD/tests/libsluice_test_clock_step.so
  if [[ ! -f $PRELOAD ]]; then
    echo "calendar: skipped: $PRELOAD is missing (build the sluice_test_clock_step target)"
  else
    # The next 1st of a month, 00:00 UTC; Redis's clock is set T/2 s before it (whole seconds).
    boundary_s=$(date -u -d "$(date -u +%Y-%m-01) +1 month" +%s)
    echo $(( boundary_s - $(date +%s) - T / 2 )) >"$WORK/clock_offset"
    CPORT=$(bench_free_port)
    mkdir -p "$WORK/calendar"
    LD_PRELOAD=$PRELOAD SLUICE_CLOCK_OFFSET_FILE=$WORK/clock_offset \
      redis-server --port "$CPORT" --bind 127.0.0.1 --save "" --appendonly no \
      --dir "$WORK/calendar" >"$WORK/calendar/redis.log" 2>&1 &
    BENCH_PIDS+=($!)
    bench_wait_port "$CPORT"
    SAVED_RPORT=${RPORT:-}
    RPORT=$CPORT
    run calendar 2 greedy 50 redis "" "" --calendar-boundary-ms $(( boundary_s * 1000 ))
    RPORT=$SAVED_RPORT
  fi
fi
if [[ ,$RUNS, == *,settle,* ]]; then
  SETTLE_N=${SETTLE_N:-1000}
  SETTLE_RESERVE=50
  charge="charge: {reserve: $SETTLE_RESERVE, settle: {header: X-Usage-Tokens}}"
  # (a) every cost at most the reservation: exact; (b) up to 50 above it: bounded.
  for costs in 1-50 25-100; do
    bounded_run fixed_window 2 greedy "$SETTLE_N" redis "" "$charge" \
      --settle-reserve "$SETTLE_RESERVE" --settle-costs "$costs"
  done
fi
if [[ ,$RUNS, == *,concurrency,* ]]; then
  SAVED_M=$M
  M=1
  bounded_run concurrency 3 greedy "${CONC_N:-4}" redis "" "" --hold-ms 200 --refused-pause-ms 10
  M=$SAVED_M
fi
exit "$BENCH_STATUS"
