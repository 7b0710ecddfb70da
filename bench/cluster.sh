#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Redis Cluster benchmarks (issue 11), all in one run, loopback only:
#
#  A. one Redis vs a three-master cluster at the same load: wrk (bench/compare/wrk.lua, 10,000
#     API keys, a per-key token bucket no key reaches: 1/1h, burst 1,000,000, so every bucket
#     lives through the run) against sluice on `type: redis` and on
#     `type: redis-cluster`: req/s, latency, and per Redis node the checks it ran and its CPU
#     (INFO cpu and INFO commandstats of each master, before and after each run).
#  B. one hot global key (every request charged to one `by: global` bucket, never reached) on
#     the cluster: plain, with `lease: 100` and with `shards: 3`; per node, the checks and CPU
#     (a hot key is one master's work; leasing cuts round trips, sharding spreads them).
#  C. a request with three limits (three `by: global` buckets, never reached) whose buckets
#     live on three different masters vs on one master, and one limit as the base line, at a
#     low load (wrk -c4): p50/p99 and the gateway's own store check time (the mean of
#     sluice_store_check_duration_seconds). Groups sent in parallel cost about one round trip
#     more than a single slot (the two steps of a split check), not three. The limit names
#     are picked by a probe: a gateway with 24 candidate limits answers one request each, then
#     every master is asked which buckets it holds.
#  D. C again with every master behind a reply delay of 1 ms (bench/delay_proxy.py; each master
#     announces the proxy's port with `cluster-announce-port`): on loopback a round trip costs
#     CPU only, so C cannot tell parallel from sequential on 2 cores; with each round trip 1 ms
#     long, three groups one after another would cost three times one group.
#
#   bench/cluster.sh [--build-dir DIR] [--seconds S] [--rounds R] [--connections C] [--record]
#
# Rounds are interleaved (each round runs every case of a section once); figures are the
# median of the rounds for req/s and latency, the totals over the rounds for CPU and checks.
# With 2 CPUs or more, wrk and the upstream run on the first CPU, sluice and every Redis node
# on the second (taskset). `lease` and `shards` are rules-file fields: a build whose loader
# does not know one prints its row as skipped, with the loader's message. Bounded: each wrk run
# has -d, the whole script runs under `timeout`, every process it starts is stopped by pid.
set -euo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
ORIG_ARGS=("$@")
cd "$(dirname "$0")/.."
BUILD=build SECS=6 ROUNDS=3 CONNS=50 RECORD=0
while (($#)); do
  case $1 in
    --build-dir) BUILD=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --record) RECORD=1; shift ;;
    -h | --help) sed -n '2,30p' "$SELF"; exit 0 ;;
    *) echo "cluster.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $SECS =~ ^[0-9]+$ && $ROUNDS =~ ^[0-9]+$ && $CONNS =~ ^[0-9]+$ ]] ||
  { echo "cluster.sh: --seconds, --rounds and --connections are whole numbers" >&2; exit 2; }
SLUICE=$BUILD/sluice
UPSTREAM_BIN=$BUILD/sluice-echo-upstream
for b in "$SLUICE" "$UPSTREAM_BIN"; do
  [[ -x $b ]] || { echo "cluster.sh: $b is not built (cmake --build $BUILD --target sluice sluice-echo-upstream)" >&2; exit 2; }
done
for t in wrk redis-server redis-cli taskset curl python3; do
  command -v "$t" >/dev/null || { echo "cluster.sh: $t is missing (scripts/setup; wrk: apt-get install wrk)" >&2; exit 2; }
done
if [[ -z ${CLUSTER_GUARDED:-} ]]; then
  export CLUSTER_GUARDED=1
  # 14 cases of (ROUNDS runs + one warm-up) plus start-up and the probe.
  exec timeout -k 15 $((180 + 14 * (ROUNDS + 1) * (SECS + 5))) "$SELF" "${ORIG_ARGS[@]}"
fi

source bench/lib.sh
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
BENCH_WORK=$(mktemp -d -t sluice-cluster.XXXXXX)
BENCH_PIDS=()
trap 'bench_guarded_exit cluster.sh' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
KEYS=10000
CLK_TCK=$(getconf CLK_TCK)

# --- CPUs ---------------------------------------------------------------------------------------
read -r -a CPUS <<<"$(taskset -c -p $$ | awk -F': ' '{ print $2 }' | tr ',' '\n' |
  awk -F- '{ b = $1; e = (NF > 1 ? $2 : $1); for (i = b; i <= e; i++) printf "%d ", i }')"
if ((${#CPUS[@]} >= 2)); then
  LOAD_CPU=${CPUS[0]} SUT_CPU=${CPUS[1]}
  PIN_TEXT="wrk and the upstream on CPU $LOAD_CPU, sluice and every Redis node on CPU $SUT_CPU (taskset)"
else
  LOAD_CPU="" SUT_CPU=""
  PIN_TEXT="no pinning (one CPU)"
fi
pin() {  # pin CPU PID...: every thread of each process
  [[ -n $1 ]] || return 0
  local cpu=$1 p
  shift
  for p in "$@"; do taskset -a -p -c "$cpu" "$p" >/dev/null; done
}
on_load_cpu() { if [[ -n $LOAD_CPU ]]; then taskset -c "$LOAD_CPU" "$@"; else "$@"; fi; }
# For background processes: `"${LOAD_PREFIX[@]}" cmd &` makes $! the process itself (taskset
# execs it), so it is stopped by pid; a function run with `&` would leave $! a subshell's.
LOAD_PREFIX=()
[[ -n $LOAD_CPU ]] && LOAD_PREFIX=(taskset -c "$LOAD_CPU")

# --- the stores and the upstream -----------------------------------------------------------------
UP=$(bench_free_port)
"${LOAD_PREFIX[@]}" "$UPSTREAM_BIN" --listen "127.0.0.1:$UP" --threads 1 >"$BENCH_WORK/upstream.log" 2>&1 &
BENCH_PIDS+=($!)
bench_redis single
SINGLE_PORT=$REDIS_PORT
bench_cluster 3
pin "$SUT_CPU" "$REDIS_PID" "${CLUSTER_PIDS[@]}"
bench_wait_port "$UP"

# --- gateways ------------------------------------------------------------------------------------
declare -A GW_PORT GW_ADMIN GW_PID
start_gateway() {  # start_gateway NAME RULES_FILE (its listen/admin lines are filled in here)
  local name=$1 file=$2
  GW_PORT[$name]=$(bench_free_port)
  GW_ADMIN[$name]=$(bench_free_port)
  sed -i "s|@PORT@|${GW_PORT[$name]}|; s|@ADMIN_PORT@|${GW_ADMIN[$name]}|" "$file"
  "$SLUICE" --check-config "$file" >/dev/null || { echo "cluster.sh: sluice refuses $file" >&2; exit 1; }
  "$SLUICE" --config "$file" --no-watch --log-level warn >"$BENCH_WORK/$name.log" 2>&1 &
  GW_PID[$name]=$!
  BENCH_PIDS+=($!)
  pin "$SUT_CPU" "$!"
  bench_wait_port "${GW_PORT[$name]}"
  for _ in $(seq 100); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${GW_ADMIN[$name]}/readyz") == 200 ]] && return 0
    sleep 0.1
  done
  tail -20 "$BENCH_WORK/$name.log" >&2
  echo "cluster.sh: gateway $name never became ready" >&2
  exit 1
}
stop_gateway() {  # stop_gateway NAME
  local p=${GW_PID[$1]}
  kill "$p" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
}
api_keys_yaml() { awk -v n="$KEYS" 'BEGIN { print "api_keys:"; for (i = 0; i < n; i++) printf "  key-%d: bench\n", i }'; }

# Section A's gateways: bench/compare/sluice.yaml (one per-key token bucket), on each store.
for s in single cluster; do
  if [[ $s == single ]]; then store="{type: redis, address: 127.0.0.1:$SINGLE_PORT, timeout: 50ms}"
  else store="{type: redis-cluster, nodes: $CLUSTER_SEEDS, timeout: 50ms}"; fi
  sed -e "s|@STORE@|$store|" -e "s|@HEADERS@|[x-ratelimit, ietf]|" -e "s|@UPSTREAM_PORT@|$UP|" \
    -e "s|@SLUICE_RATE@|1/1h|" -e "s|@SLUICE_BURST@|1000000|" -e "s|@LIMIT_NAME@|per_key|" \
    -e "s|@EXTRA@||" bench/compare/sluice.yaml \
    >"$BENCH_WORK/$s.yaml"
  api_keys_yaml >>"$BENCH_WORK/$s.yaml"
  start_gateway "$s" "$BENCH_WORK/$s.yaml"
done

# --- the probe: which master holds which limit's global bucket ------------------------------------
{
  echo "listen: 127.0.0.1:@PORT@"
  echo "admin: 127.0.0.1:@ADMIN_PORT@"
  echo "workers: 1"
  echo "store: {type: redis-cluster, nodes: $CLUSTER_SEEDS, timeout: 50ms}"
  echo "upstreams: {api: {url: \"http://127.0.0.1:$UP\"}}"
  echo "routes:"
  for i in $(seq 0 23); do
    echo "  - {name: p$i, match: {path_prefix: /p$i/}, upstream: api, limits: [{name: three_$i, by: global, rate: 1/1h, burst: 100000000}]}"
  done
} >"$BENCH_WORK/probe.yaml"
start_gateway probe "$BENCH_WORK/probe.yaml"
for i in $(seq 0 23); do curl -s -o /dev/null "http://127.0.0.1:${GW_PORT[probe]}/p$i/"; done
stop_gateway probe
declare -A MASTER_OF
for m in "${!CLUSTER_PORTS[@]}"; do
  while read -r key; do
    name=${key#sl:\{}
    name=${name%%|*}
    [[ -n $name ]] && MASTER_OF[$name]=$m
  done < <(redis-cli -p "${CLUSTER_PORTS[$m]}" --scan --pattern 'sl:{three_*')
done
SPREAD=() SAME=()
declare -A SEEN
per_master=()
for i in $(seq 0 23); do
  m=${MASTER_OF[three_$i]:-}
  [[ -n $m ]] || continue
  if [[ -z ${SEEN[$m]:-} && ${#SPREAD[@]} -lt 3 ]]; then SEEN[$m]=1; SPREAD+=("three_$i"); fi
  per_master[$m]+="three_$i "
done
for m in "${!per_master[@]}"; do
  read -r -a names <<<"${per_master[$m]}"
  if ((${#names[@]} >= 3)); then SAME=("${names[@]:0:3}"); SAME_MASTER=$m; break; fi
done
((${#SPREAD[@]} == 3 && ${#SAME[@]} == 3)) ||
  { echo "cluster.sh: the probe found no three limits on three masters and three on one" >&2; exit 1; }
bench_cluster_flush

# --- sections B and C: one gateway on the cluster ---------------------------------------------
declare -A SKIPPED
if ! bench_supports lease "{name: l, by: global, rate: 1/1h, burst: 100000000, lease: 100}"; then
  SKIPPED[hot-lease]="skipped: this build's rules loader does not accept \`lease: 100\` ($BENCH_UNSUPPORTED_WHY)"
fi
if ! bench_supports shards "{name: s, by: global, rate: 1/1h, burst: 100000000, shards: 3}"; then
  SKIPPED[hot-shards]="skipped: this build's rules loader does not accept \`shards: 3\` ($BENCH_UNSUPPORTED_WHY)"
fi
glimit() { echo "{name: $1, by: global, rate: 1/1h, burst: 100000000${2:+, $2}}"; }
hot_rules() {  # hot_rules SEEDS: sections B, C and D's routes
  {
    echo "listen: 127.0.0.1:@PORT@"
    echo "admin: 127.0.0.1:@ADMIN_PORT@"
    echo "workers: 1"
    echo "store: {type: redis-cluster, nodes: $1, timeout: 50ms}"
    echo "upstreams: {api: {url: \"http://127.0.0.1:$UP\"}}"
    echo "routes:"
    echo "  - {name: hot, match: {path_prefix: /hot/}, upstream: api, limits: [$(glimit hot)]}"
    [[ -z ${SKIPPED[hot-lease]:-} ]] &&
      echo "  - {name: hot_lease, match: {path_prefix: /hot-lease/}, upstream: api, limits: [$(glimit hot_lease "lease: 100")]}"
    [[ -z ${SKIPPED[hot-shards]:-} ]] &&
      echo "  - {name: hot_shards, match: {path_prefix: /hot-shards/}, upstream: api, limits: [$(glimit hot_shards "shards: 3")]}"
    echo "  - {name: one, match: {path_prefix: /one/}, upstream: api, limits: [$(glimit "${SPREAD[0]}")]}"
    echo "  - {name: same, match: {path_prefix: /same/}, upstream: api, limits: [$(glimit "${SAME[0]}"), $(glimit "${SAME[1]}"), $(glimit "${SAME[2]}")]}"
    echo "  - {name: spread, match: {path_prefix: /spread/}, upstream: api, limits: [$(glimit "${SPREAD[0]}"), $(glimit "${SPREAD[1]}"), $(glimit "${SPREAD[2]}")]}"
  }
}
hot_rules "$CLUSTER_SEEDS" >"$BENCH_WORK/hot.yaml"
start_gateway hot "$BENCH_WORK/hot.yaml"

# --- measurement ---------------------------------------------------------------------------------
node_ports() { if [[ $1 == single ]]; then echo "$SINGLE_PORT"; else echo "${CLUSTER_PORTS[*]}"; fi; }
node_sample() {  # node_sample PORT: "<cpu µs> <script calls> <script µs>"
  {
    redis-cli -p "$1" INFO cpu
    redis-cli -p "$1" INFO commandstats
  } | tr -d '\r' | awk -F'[:=,]' '
    $1 == "used_cpu_sys" || $1 == "used_cpu_user" { cpu += $2 * 1e6 }
    $1 ~ /^cmdstat_(fcall|fcall_ro|evalsha|eval)$/ { calls += $3; usec += $5 }
    END { printf "%.0f %d %d\n", cpu, calls, usec }'
}
metric() {  # metric GATEWAY NAME: the sum of a metric's samples (all labels)
  curl -s --max-time 5 "http://127.0.0.1:${GW_ADMIN[$1]}/metrics" |
    awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%.6f\n", s }'
}
RESULTS=$BENCH_WORK/results.tsv NODES=$BENCH_WORK/nodes.tsv
: >"$RESULTS"
: >"$NODES"
# run_case SECTION CASE GATEWAY PATH CONNECTIONS ROUND: one wrk run; a line in results.tsv
# (section case round rps p50 p99 non2xx socket_errors sluice_ticks requests check_s checks
# split) and one per node in nodes.tsv (section case round node cpu_us calls usec).
run_case() {
  local sec=$1 case=$2 gw=$3 path=$4 conns=$5 round=$6 store ports f t0 t1 c0 c1 n0 n1 s0 s1
  store=$([[ $gw == single ]] && echo single || echo cluster)
  ports=$(node_ports "$store")
  declare -A before
  for p in $ports; do before[$p]=$(node_sample "$p"); done
  t0=$(bench_tree_ticks "${GW_PID[$gw]}")
  c0=$(metric "$gw" sluice_store_check_duration_seconds_sum)
  n0=$(metric "$gw" sluice_store_check_duration_seconds_count)
  s0=$(metric "$gw" sluice_store_split_checks_total)
  f=$BENCH_WORK/wrk.$sec.$case.$round
  COMPARE_KEYS=$KEYS COMPARE_PATH=$path on_load_cpu wrk -t1 -c"$conns" -d"${SECS}s" --timeout 2s \
    -s bench/compare/wrk.lua "http://127.0.0.1:${GW_PORT[$gw]}/" >"$f" 2>&1 ||
    { cat "$f" >&2; echo "cluster.sh: wrk failed ($sec $case)" >&2; exit 1; }
  t1=$(bench_tree_ticks "${GW_PID[$gw]}")
  c1=$(metric "$gw" sluice_store_check_duration_seconds_sum)
  n1=$(metric "$gw" sluice_store_check_duration_seconds_count)
  s1=$(metric "$gw" sluice_store_split_checks_total)
  for p in $ports; do
    read -r a0 b0 u0 <<<"${before[$p]}"
    read -r a1 b1 u1 <<<"$(node_sample "$p")"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$sec" "$case" "$round" "$p" $((a1 - a0)) $((b1 - b0)) $((u1 - u0)) >>"$NODES"
  done
  awk -v sec="$sec" -v case="$case" -v round="$round" -v ticks=$((t1 - t0)) \
    -v cs="$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')" \
    -v cn="$(awk -v a="$n0" -v b="$n1" 'BEGIN { print b - a }')" \
    -v nsplit="$(awk -v a="$s0" -v b="$s1" 'BEGIN { print b - a }')" '
    $1 == "cmp" && $2 == "requests" { n = $3 }
    $1 == "cmp" && $2 == "rps" { rps = $3 }
    $1 == "cmp" && $2 == "non2xx" { non2xx = $3 }
    $1 == "cmp" && $2 == "socket_errors" { sock = $3 + $4 + $5 + $6 }
    $1 == "cmp" && $2 == "lat" && $3 == "50" { p50 = $4 }
    $1 == "cmp" && $2 == "lat" && $3 == "99" { p99 = $4 }
    END {
      # Measured nothing: no request completed, none answered 2xx, or no store check made.
      if (n == "" || n == 0) { print "cluster.sh: " case ": wrk counted no request" > "/dev/stderr"; exit 1 }
      if (non2xx == n) { print "cluster.sh: " case ": no request answered 2xx" > "/dev/stderr"; exit 1 }
      if (cn <= 0) { print "cluster.sh: " case ": the gateway made no store check" > "/dev/stderr"; exit 1 }
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", sec, case, round, rps, p50, p99,
      non2xx, sock, ticks, n, cs, cn, nsplit }' "$f" >>"$RESULTS" || { cat "$f" >&2; exit 1; }
  tail -1 "$RESULTS" | awk -F'\t' '{ printf "  [%s round %s] %-12s %8.0f req/s  p50 %.2f ms  p99 %.2f ms  non-2xx %d  socket errors %d\n",
    $1, $3, $2, $4, $5 / 1000, $6 / 1000, $7, $8 }' >&2
}
warm() {  # warm GATEWAY PATH CONNECTIONS: 2 s of unrecorded load (buckets exist, caches warm)
  COMPARE_KEYS=$KEYS COMPARE_PATH=$2 on_load_cpu wrk -t1 -c"$3" -d2s --timeout 2s \
    -s bench/compare/wrk.lua "http://127.0.0.1:${GW_PORT[$1]}/" >/dev/null 2>&1 || true
}

LOADAVG=()
declare -A CASE_GW CASE_PATH CASE_CONNS
# shellcheck disable=SC2034 # (used through declare -n)
CASES_A=(single cluster) CASES_B=(hot hot-lease hot-shards) CASES_C=(one same spread)
# shellcheck disable=SC2034
CASES_D=(d-one d-same d-spread)
CASE_GW=([single]=single [cluster]=cluster [hot]=hot [hot-lease]=hot [hot-shards]=hot [one]=hot [same]=hot [spread]=hot
  [d-one]=delayed [d-same]=delayed [d-spread]=delayed)
CASE_PATH=([single]=/ [cluster]=/ [hot]=/hot/ [hot-lease]=/hot-lease/ [hot-shards]=/hot-shards/ [one]=/one/ [same]=/same/ [spread]=/spread/
  [d-one]=/one/ [d-same]=/same/ [d-spread]=/spread/)
for c in single cluster hot hot-lease hot-shards; do CASE_CONNS[$c]=$CONNS; done
for c in one same spread d-one d-same d-spread; do CASE_CONNS[$c]=4; done
DELAY_MS=1
run_sections() {  # run_sections SECTION...
for sec in "$@"; do
  declare -n cases="CASES_$sec"
  LOADAVG+=("$sec $(cut -d' ' -f1 /proc/loadavg)")
  echo "section $sec: ${cases[*]}" >&2
  for c in "${cases[@]}"; do
    [[ -n ${SKIPPED[$c]:-} ]] && { echo "  $c: ${SKIPPED[$c]}" >&2; continue; }
    warm "${CASE_GW[$c]}" "${CASE_PATH[$c]}" "${CASE_CONNS[$c]}"
  done
  for ((r = 1; r <= ROUNDS; r++)); do
    for c in "${cases[@]}"; do
      [[ -n ${SKIPPED[$c]:-} ]] && continue
      run_case "$sec" "$c" "${CASE_GW[$c]}" "${CASE_PATH[$c]}" "${CASE_CONNS[$c]}" "$r"
      sleep 1
    done
  done
  unset -n cases
done
}
run_sections A B C

# --- section D: C again behind a reply delay of DELAY_MS ms on every master ----------------------
# Every master announces a delay proxy's port (cluster-announce-port), so a gateway started now
# reaches each master through it and every round trip to a master takes DELAY_MS more: three
# groups sent one after another would take three times as long as one, in parallel about as
# long. The other gateways are stopped first (they would follow the announced ports too).
for g in single cluster hot; do stop_gateway "$g"; done
PROXY_PORTS=() pairs=() PROXY_SEEDS=""
for p in "${CLUSTER_PORTS[@]}"; do
  q=$(bench_free_port)
  PROXY_PORTS+=("$q")
  pairs+=("$q:$p")
  PROXY_SEEDS+="${PROXY_SEEDS:+, }\"127.0.0.1:$q\""
done
"${LOAD_PREFIX[@]}" python3 bench/delay_proxy.py --delay-ms "$DELAY_MS" "${pairs[@]}" >"$BENCH_WORK/proxy.log" 2>&1 &
BENCH_PIDS+=($!)
for q in "${PROXY_PORTS[@]}"; do bench_wait_port "$q"; done
for i in "${!CLUSTER_PORTS[@]}"; do
  redis-cli -p "${CLUSTER_PORTS[$i]}" CONFIG SET cluster-announce-port "${PROXY_PORTS[$i]}" >/dev/null
done
announced=0
for _ in $(seq 100); do
  announced=1
  for n in "${CLUSTER_PORTS[@]}"; do
    slots=$(redis-cli -p "$n" CLUSTER SLOTS)
    for p in "${CLUSTER_PORTS[@]}"; do grep -qx "$p" <<<"$slots" && announced=0; done
  done
  ((announced)) && break
  sleep 0.1
done
((announced)) || { echo "cluster.sh: the masters never announced the proxies' ports" >&2; exit 1; }
hot_rules "[$PROXY_SEEDS]" >"$BENCH_WORK/delayed.yaml"
start_gateway delayed "$BENCH_WORK/delayed.yaml"
run_sections D

# --- report --------------------------------------------------------------------------------------
# summary: per section and case, median req/s, p50, p99 over the rounds; totals of the rest.
summary() {
  awk -F'\t' -v tck="$CLK_TCK" '
    function med(key, col,   m, i, j, t, a) {
      m = cnt[key]; for (i = 1; i <= m; i++) a[i] = v[key, col, i] + 0
      for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    { key = $1 SUBSEP $2; if (!(key in cnt)) ord[++nk] = key; c = ++cnt[key]
      for (col = 4; col <= 6; col++) v[key, col, c] = $col
      err[key] += $7 + $8; ticks[key] += $9; req[key] += $10; cs[key] += $11; cn[key] += $12; sp[key] += $13 }
    END { for (k = 1; k <= nk; k++) { key = ord[k]; split(key, f, SUBSEP)
      printf "%s\t%s\t%.0f\t%.2f\t%.2f\t%d\t%.1f\t%d\t%.1f\t%.3f\n", f[1], f[2], med(key, 4), med(key, 5) / 1000,
        med(key, 6) / 1000, err[key], req[key] ? ticks[key] * 1e6 / tck / req[key] : 0, req[key],
        cn[key] ? cs[key] / cn[key] * 1e6 : 0, req[key] ? sp[key] / req[key] : 0 } }' "$RESULTS"
}
SUMMARY=$BENCH_WORK/summary.tsv
summary >"$SUMMARY"
node_table() {  # node_table SECTION: per case and node, totals over the rounds
  awk -F'\t' -v sec="$1" -v single="$SINGLE_PORT" -v ports="${CLUSTER_PORTS[*]}" '
    BEGIN { np = split(ports, pl, " "); for (i = 1; i <= np; i++) name[pl[i]] = "master " i " (:" pl[i] ")"; name[single] = "one Redis (:" single ")" }
    FILENAME == ARGV[1] { req[$1, $2] = $8; next }
    $1 == sec { key = $2 SUBSEP $4; if (!(key in cpu)) ord[++nk] = key; cpu[key] += $5; calls[key] += $6; usec[key] += $7; tot[$2] += $6 }
    END { for (k = 1; k <= nk; k++) { split(ord[k], f, SUBSEP); key = ord[k]; r = req[sec, f[1]]
      printf "| %s | %s | %s | %.0f %% | %.2f | %s | %.2f |\n", f[1], name[f[2]], calls[key],
        tot[f[1]] ? 100 * calls[key] / tot[f[1]] : 0, r ? calls[key] / r : 0,
        calls[key] ? sprintf("%.1f", cpu[key] / calls[key]) : "—", r ? cpu[key] / r : 0 } }' "$SUMMARY" "$NODES"
}
git_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain -- src include lua 2>/dev/null) ]] && git_rev+=" + uncommitted changes"
REPORT=$BENCH_WORK/report.md
{
  echo "## Redis Cluster — \`bench/cluster.sh${ORIG_ARGS[*]:+ ${ORIG_ARGS[*]}}\` ($(date -u +%Y-%m-%d))"
  echo
  echo "All on loopback on one $(nproc)-core machine **shared with another engineer's builds** (the load" \
    "average at the start of each section: $(IFS=,; echo "${LOADAVG[*]}" | sed 's/,/, /g')), so the absolute" \
    "figures are noisy; the comparisons inside one section ran interleaved, in the same minutes. $PIN_TEXT." \
    "sluice $("$SLUICE" --version | awk '{ print $2 }') (build $git_rev, \`workers: 1\`), redis-server" \
    "$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') (\`--save \"\" --appendonly no\`); the cluster: three" \
    "masters, no replicas, \`redis-cli --cluster create\`, the slots split evenly. wrk -t1 with" \
    "bench/compare/wrk.lua (10,000 API keys in turn), ${SECS}s a run, $ROUNDS interleaved rounds after a 2 s" \
    "warm-up per case; req/s, p50 and p99 are medians of the rounds, the rest totals over them." \
    "Per node: \`INFO commandstats\` (FCALL/EVALSHA calls: the checks the node ran) and \`INFO cpu\`" \
    "(used_cpu_user + used_cpu_sys) before and after each run; sluice CPU from /proc (utime + stime)."
  echo
  echo "### A. One Redis vs a three-master cluster, the same load (wrk -c$CONNS, a per-API-key token bucket never reached)"
  echo
  echo "| store | req/s | p50 ms | p99 ms | errors | sluice CPU µs/req |"
  echo "|---|---|---|---|---|---|"
  awk -F'\t' '$1 == "A" { printf "| %s | %s | %.2f | %.2f | %d | %.1f |\n", $2 == "single" ? "one Redis (`type: redis`)" : "three masters (`type: redis-cluster`)", $3, $4, $5, $6, $7 }' "$SUMMARY"
  echo
  echo "| store | node | checks | share | checks/req | node CPU µs/check | node CPU µs/req |"
  echo "|---|---|---|---|---|---|---|"
  node_table A
  echo
  echo "### B. One hot global key on the cluster (wrk -c$CONNS, every request charged to one \`by: global\` bucket, never reached)"
  echo
  echo "| case | req/s | p50 ms | p99 ms | errors | sluice CPU µs/req |"
  echo "|---|---|---|---|---|---|"
  for c in hot hot-lease hot-shards; do
    if [[ -n ${SKIPPED[$c]:-} ]]; then echo "| $c | ${SKIPPED[$c]} | | | | |"; continue; fi
    awk -F'\t' -v c="$c" '$1 == "B" && $2 == c { printf "| %s | %s | %.2f | %.2f | %d | %.1f |\n", $2, $3, $4, $5, $6, $7 }' "$SUMMARY"
  done
  echo
  echo "| case | node | checks | share | checks/req | node CPU µs/check | node CPU µs/req |"
  echo "|---|---|---|---|---|---|---|"
  node_table B
  echo
  echo "### C. Three limits on three masters vs on one master (wrk -c4; \`by: global\` buckets, never reached)"
  echo
  echo "Limits: one: \`${SPREAD[0]}\`; same master (master $((SAME_MASTER + 1))): \`${SAME[*]}\`; three masters: \`${SPREAD[*]}\` (picked by the probe)."
  echo
  echo "| case | req/s | p50 ms | p99 ms | errors | store check mean µs | split checks/req | sluice CPU µs/req |"
  echo "|---|---|---|---|---|---|---|---|"
  awk -F'\t' '$1 == "C" { printf "| %s | %s | %.2f | %.2f | %d | %.1f | %.2f | %.1f |\n", $2 == "one" ? "one limit" : $2 == "same" ? "three limits, one master" : "three limits, three masters", $3, $4, $5, $6, $9, $10, $7 }' "$SUMMARY"
  echo
  echo "### D. The same three cases, every master behind a reply delay of $DELAY_MS ms (bench/delay_proxy.py, \`cluster-announce-port\`)"
  echo
  echo "A split check is two steps (peek every group, then commit), so one limit costs one delayed round trip and three" \
    "limits at least two; three groups sent one after another would cost six."
  echo
  echo "| case | req/s | p50 ms | p99 ms | errors | store check mean ms | ÷ delay | split checks/req |"
  echo "|---|---|---|---|---|---|---|---|"
  awk -F'\t' -v d="$DELAY_MS" '$1 == "D" { printf "| %s | %s | %.2f | %.2f | %d | %.2f | %.1f | %.2f |\n", $2 == "d-one" ? "one limit" : $2 == "d-same" ? "three limits, one master" : "three limits, three masters", $3, $4, $5, $6, $9 / 1000, $9 / 1000 / d, $10 }' "$SUMMARY"
} >"$REPORT"
cat "$REPORT"
if ((RECORD)); then
  { echo; cat "$REPORT"; } >>bench/RESULTS.md
  echo "appended to bench/RESULTS.md" >&2
fi
