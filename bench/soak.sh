#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak run: sluice under mixed traffic for a bounded time while faults are injected on a
# schedule, sampled every minute; fails on growth beyond the stated bounds or on a 5xx that
# no injected fault explains.
#
#   bench/soak.sh [--minutes N] [--binary PATH] [--plot-dir DIR] [--record]
#
# Gateways (one process each, all on loopback): `memory` (the memory store), `redis` (one
# redis-server), `cluster` (a three-master Redis Cluster) and `tls` (the memory store behind
# a TLS listener with the soak's own certificate). Upstreams: the bench echo server
# (/v1/items), the OpenAI-style streaming upstream of the tests (/v1/chat/completions,
# text/event-stream) and the tests' WebSocket echo (/ws).
#
# Traffic every minute, on each of memory, redis and cluster: wrk -c4 on /v1/items over 1,000
# keys (admitted), wrk -c1 on one key of a 1-per-hour limit (refused: 429), and
# bench/soak_client.py (streamed and slowly read completions, WebSocket, malformed requests,
# oversized heads, slowloris, clients that vanish mid-body and mid-stream); on tls, the same
# client's TLS requests.
#
# Faults, minute m (from 1), m mod 5: 1 rules reloaded on every gateway (POST /admin/reload
# after the file changed: no 5xx may come of it), 2 Redis killed (SIGKILL) and restarted 3 s
# later on its port, 3 the echo upstream frozen (SIGSTOP) for 6 s (its timeout is 5 s: 504s),
# 4 the echo upstream killed and restarted 2 s later, 0 one cluster master frozen for 3 s (the
# stores' timeout is 50 ms: each route's failure policy answers). A fault's window runs from
# just before it to 5 s after it ends; a gateway's 5xx (sluice_http_request_duration_seconds
# {code_class="5xx"}) outside the windows of the faults that touch it fail the run.
#
# Sampled after each minute, once the minute's clients are gone: each gateway's resident
# memory (PSS of its process), open descriptors, client connections and tunnels open, and
# Redis's used_memory. Bounds, failing the run: after every minute client connections and
# tunnels back to 0 and descriptors at most 32 above the first minute's idle count (the
# upstream pool keeps up to its max_idle connections); resident memory at the end at most
# 25 % + 16 MiB above the end of minute 2. Plots (gnuplot PNG) go to DIR (default bench):
# soak-rss.png, soak-fds.png. The whole run is bounded by `timeout`; everything it starts is
# stopped by pid.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=bench/lib.sh
source bench/lib.sh

MINUTES=30
BINARY=build/sluice
PLOT_DIR=bench
RECORD=0
usage() { awk 'NR > 2 && /^#/ { sub(/^# ?/, ""); print; next } NR > 2 { exit }' "$0"; }
while (($#)); do
  case $1 in
    --minutes) MINUTES=$2; shift 2 ;;
    --binary) BINARY=$2; shift 2 ;;
    --plot-dir) PLOT_DIR=$2; shift 2 ;;
    --record) RECORD=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; echo "soak: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $MINUTES =~ ^[0-9]+$ ]] && ((MINUTES >= 2)) || { echo "soak: --minutes must be at least 2" >&2; exit 2; }
if [[ -z ${SOAK_BOUNDED:-} ]]; then
  export SOAK_BOUNDED=1
  exec timeout -k 20 $((MINUTES * 75 + 180)) "$0" "$@" --minutes "$MINUTES" --binary "$BINARY" \
    --plot-dir "$PLOT_DIR" $( ((RECORD)) && echo --record)
fi
for tool in wrk gnuplot openssl redis-server python3; do
  command -v "$tool" >/dev/null || { echo "soak: needs $tool (apt-get install wrk gnuplot-nox ...)" >&2; exit 2; }
done
[[ -x $BINARY ]] || { echo "soak: no gateway at $BINARY (build it: cmake --build build)" >&2; exit 2; }
# Debian's python3: the tests' servers use its packages (python3-websockets).
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
ECHO=$(dirname "$BINARY")/sluice-echo-upstream
[[ -x $ECHO ]] || ECHO=build/sluice-echo-upstream

BENCH_WORK=$(mktemp -d -t sluice-soak.XXXXXX)
BENCH_PIDS=()
ECHO_PID=""
cleanup() {
  for p in "${BENCH_PIDS[@]}" $ECHO_PID; do kill -CONT "$p" 2>/dev/null || true; done
  bench_stop_all
  [[ -n $ECHO_PID ]] && kill "$ECHO_PID" 2>/dev/null || true
  rm -rf "$BENCH_WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
W=$BENCH_WORK
say() { echo "soak: $*" >&2; }

# --- upstreams, stores, certificate -----------------------------------------------------------
ECHO_PORT=$(bench_free_port)
start_echo() {
  "$ECHO" --listen "127.0.0.1:$ECHO_PORT" --threads 1 >>"$W/echo.log" 2>&1 &
  ECHO_PID=$!
  bench_wait_port "$ECHO_PORT" "$ECHO_PID"
}
start_echo
# A python server that prints "port N" once listening: its port.
python_upstream() { # name command...
  local name=$1
  shift
  "$@" >"$W/$name.out" 2>"$W/$name.err" &
  BENCH_PIDS+=($!)
  for _ in $(seq 100); do
    grep -q '^port ' "$W/$name.out" 2>/dev/null && { awk '/^port / { print $2; exit }' "$W/$name.out"; return; }
    sleep 0.1
  done
  echo "soak: $name never listened" >&2
  return 1
}
STREAM_PORT=$(python_upstream stream "$PY" tests/support/openai_upstream.py --delay-ms 20 --chunks 8)
WS_PORT=$(python_upstream ws "$PY" tests/support/ws_echo.py --count-file "$W/ws.count" \
  --lifetime $((MINUTES * 75 + 120)))
bench_redis redis
bench_cluster 3
openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -days 2 \
  -keyout "$W/tls.key" -out "$W/tls.pem" >/dev/null 2>&1

# --- gateways -----------------------------------------------------------------------------------
declare -A PORT ADMIN GPID STORE
STORE[memory]="{type: memory}"
STORE[redis]="{type: redis, address: \"127.0.0.1:$REDIS_PORT\", timeout: 50ms}"
STORE[cluster]="{type: redis-cluster, nodes: $CLUSTER_SEEDS, timeout: 50ms}"
STORE[tls]="{type: memory}"
GATEWAYS=(memory redis cluster tls)
rules() { # gateway generation
  local g=$1 tls=""
  [[ $g == tls ]] && tls="tls: {certificates: [{cert: $W/tls.pem, key: $W/tls.key}]}"
  cat <<YAML
# soak rules, generation $2
listen: 127.0.0.1:${PORT[$g]}
admin: 127.0.0.1:${ADMIN[$g]}
workers: 2
store: ${STORE[$g]}
$tls
client: {header_timeout: 5s}
upstreams:
  echo: {url: "http://127.0.0.1:$ECHO_PORT", timeout: 5s}
  stream: {url: "http://127.0.0.1:$STREAM_PORT", timeout: 10s}
  ws: {url: "http://127.0.0.1:$WS_PORT"}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: echo
    limits:
      - {name: soak_items, by: "header:X-API-Key", rate: 100000/1s, burst: 100000}
  - name: tight
    match: {path_prefix: /v1/tight}
    upstream: echo
    limits:
      - {name: soak_tight, by: "header:X-API-Key", rate: 1/1h, burst: 1}
  - name: chat
    match: {path_prefix: /v1/chat}
    upstream: stream
    limits:
      - {name: soak_chat, by: "header:X-API-Key", rate: 100000/1s, burst: 100000}
  - name: ws
    match: {path_prefix: /ws}
    upstream: ws
YAML
}
for g in "${GATEWAYS[@]}"; do
  PORT[$g]=$(bench_free_port)
  ADMIN[$g]=$(bench_free_port)
  rules "$g" 0 >"$W/$g.yaml"
  "$BINARY" --config "$W/$g.yaml" --log-level warn >"$W/$g.log" 2>&1 &
  GPID[$g]=$!
  BENCH_PIDS+=("${GPID[$g]}")
done
for g in "${GATEWAYS[@]}"; do
  bench_wait_port "${ADMIN[$g]}" "${GPID[$g]}"
  for _ in $(seq 100); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${ADMIN[$g]}/readyz") == 200 ]] && break
    sleep 0.1
  done
done
say "gateways up: $(for g in "${GATEWAYS[@]}"; do printf '%s :%s ' "$g" "${PORT[$g]}"; done)"

metric() { # gateway name-and-labels-regex: the sum of the matching samples
  curl -s --max-time 5 "http://127.0.0.1:${ADMIN[$1]}/metrics" |
    awk -v re="$2" '$0 !~ /^#/ && $0 ~ re { s += $NF } END { printf "%.0f\n", s }'
}
five_xx() { metric "$1" '^sluice_http_request_duration_seconds_count\{.*code_class="5xx"'; }
fds() { ls "/proc/${GPID[$1]}/fd" 2>/dev/null | wc -l; }
idle_wait() { # gateway: until no client connection and no tunnel is open (30 s at most)
  for _ in $(seq 300); do
    (($(metric "$1" '^sluice_client_connections_open ') == 0 && $(metric "$1" '^sluice_tunnels_open ') == 0)) && return 0
    sleep 0.1
  done
  return 1
}

cat >"$W/keys.lua" <<'LUA'
local n, i = 1000, 0
request = function()
  i = i % n + 1
  return wrk.format("GET", "/v1/items/" .. i, {["X-API-Key"] = "soak-key-" .. i})
end
LUA

# --- faults ---------------------------------------------------------------------------------------
fault_of() { case $(($1 % 5)) in 1) echo reload ;; 2) echo redis-restart ;; 3) echo upstream-freeze ;;
  4) echo upstream-kill ;; 0) echo cluster-freeze ;; esac; }
touches() { # fault gateway: whether the fault explains that gateway's 5xx
  case $1 in
    reload) return 1 ;;
    redis-restart) [[ $2 == redis ]] ;;
    cluster-freeze) [[ $2 == cluster ]] ;;
    upstream-*) [[ $2 != tls ]] || return 0 ;;
  esac
}
inject() { # fault minute
  case $1 in
    reload)
      for g in "${GATEWAYS[@]}"; do
        rules "$g" "$2" >"$W/$g.yaml"
        curl -s -o /dev/null -X POST "http://127.0.0.1:${ADMIN[$g]}/admin/reload"
      done ;;
    redis-restart)
      kill -KILL "$REDIS_PID"
      wait "$REDIS_PID" 2>/dev/null || true
      sleep 3
      redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$W/redis" >>"$W/redis/redis.log" 2>&1 &
      REDIS_PID=$!
      BENCH_PIDS+=("$REDIS_PID")
      bench_wait_port "$REDIS_PORT" "$REDIS_PID" ;;
    upstream-freeze)
      kill -STOP "$ECHO_PID"; sleep 6; kill -CONT "$ECHO_PID" ;;
    upstream-kill)
      kill -KILL "$ECHO_PID"; wait "$ECHO_PID" 2>/dev/null || true; sleep 2; start_echo ;;
    cluster-freeze)
      kill -STOP "${CLUSTER_PIDS[0]}"; sleep 3; kill -CONT "${CLUSTER_PIDS[0]}" ;;
  esac
}

# --- the minutes ------------------------------------------------------------------------------------
SAMPLES="$W/samples.tsv" # minute gateway rss_kib fds conns tunnels 5xx unexplained redis_kib
: >"$SAMPLES"
declare -A BASE_FDS RSS2 UNEXPLAINED
failures=()
for ((m = 1; m <= MINUTES; m++)); do
  fault=$(fault_of "$m")
  declare -A X0=() X1=() X2=()
  for g in "${GATEWAYS[@]}"; do X0[$g]=$(five_xx "$g"); done
  jobs_pids=()
  for g in memory redis cluster; do
    wrk -t1 -c4 -d50s --timeout 5s -s "$W/keys.lua" "http://127.0.0.1:${PORT[$g]}" >"$W/wrk.$g.$m" 2>&1 &
    jobs_pids+=($!)
    wrk -t1 -c1 -d50s --timeout 5s -H "X-API-Key: soak-refused" "http://127.0.0.1:${PORT[$g]}/v1/tight" \
      >"$W/wrk-tight.$g.$m" 2>&1 &
    jobs_pids+=($!)
    "$PY" bench/soak_client.py --port "${PORT[$g]}" --ws --seconds 45 >"$W/client.$g.$m" 2>&1 &
    jobs_pids+=($!)
  done
  "$PY" bench/soak_client.py --port "${PORT[tls]}" --tls-port "${PORT[tls]}" --tls-only --seconds 45 \
    >"$W/client.tls.$m" 2>&1 &
  jobs_pids+=($!)
  sleep 20
  for g in "${GATEWAYS[@]}"; do X1[$g]=$(five_xx "$g"); done
  inject "$fault" "$m"
  sleep 5
  for g in "${GATEWAYS[@]}"; do X2[$g]=$(five_xx "$g"); done
  for p in "${jobs_pids[@]}"; do wait "$p" || true; done
  redis_kib=$(($(redis-cli -p "$REDIS_PORT" INFO memory 2>/dev/null | awk -F: '/^used_memory:/ { print $2 + 0 }') / 1024))
  for g in "${GATEWAYS[@]}"; do
    idle_wait "$g" || failures+=("minute $m, $g: client connections or tunnels still open 30 s after the traffic")
    x3=$(five_xx "$g")
    outside=$(((X1[$g] - X0[$g]) + (x3 - X2[$g])))
    inside=$((X2[$g] - X1[$g]))
    touches "$fault" "$g" || outside=$((outside + inside))
    UNEXPLAINED[$g]=$((${UNEXPLAINED[$g]:-0} + outside))
    ((outside == 0)) || failures+=("minute $m, $g: $outside 5xx outside the window of the fault ($fault)")
    f=$(fds "$g")
    [[ -n ${BASE_FDS[$g]:-} ]] || BASE_FDS[$g]=$f
    ((f <= BASE_FDS[$g] + 32)) || failures+=("minute $m, $g: $f descriptors at idle, first minute $((BASE_FDS[$g]))")
    rss=$(bench_tree_rss_kb "${GPID[$g]}")
    ((m == 2)) && RSS2[$g]=$rss
    printf '%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n' "$m" "$g" "$rss" "$f" \
      "$(metric "$g" '^sluice_client_connections_open ')" "$(metric "$g" '^sluice_tunnels_open ')" \
      "$x3" "$outside" "$redis_kib" >>"$SAMPLES"
  done
  say "minute $m/$MINUTES ($fault): $(awk -v m="$m" '$1 == m { printf "%s rss %d MiB fds %d 5xx %d; ", $2, $3 / 1024, $4, $7 }' "$SAMPLES")"
done
for g in "${GATEWAYS[@]}"; do
  last=$(awk -v g="$g" '$2 == g { r = $3 } END { print r }' "$SAMPLES")
  bound=$((RSS2[$g] * 5 / 4 + 16384))
  ((last <= bound)) || failures+=("$g: resident memory $((last / 1024)) MiB at the end, over the bound $((bound / 1024)) MiB (minute 2: $((RSS2[$g] / 1024)) MiB)")
done
# Measured nothing: no request through wrk on a gateway.
for g in memory redis cluster; do
  n=$(cat "$W"/wrk."$g".* | awk '/requests in/ { s += $1 } END { print s + 0 }')
  ((n > 0)) || failures+=("$g: wrk completed no request")
done

# --- plots and report ---------------------------------------------------------------------------
mkdir -p "$PLOT_DIR"
for what in rss fds; do
  col=3 label="resident memory (PSS, MiB)" scale=1024
  [[ $what == fds ]] && col=4 label="open descriptors at idle" scale=1
  plots=()
  for g in "${GATEWAYS[@]}"; do
    awk -v g="$g" -v c="$col" -v s="$scale" '$2 == g { print $1, $c / s }' "$SAMPLES" >"$W/plot.$what.$g"
    plots+=("'$W/plot.$what.$g' using 1:2 with linespoints lw 2 title '$g'")
  done
  if [[ $what == rss ]]; then
    awk '$2 == "redis" { print $1, $9 / 1024 }' "$SAMPLES" >"$W/plot.redis-mem"
    plots+=("'$W/plot.redis-mem' using 1:2 with linespoints lw 2 dt 2 title 'Redis used_memory'")
  fi
  gnuplot <<GP || say "gnuplot failed for $what"
set terminal pngcairo size 900,500 font ",11" noenhanced
set output '$PLOT_DIR/soak-$what.png'
set title "soak: $label after each minute ($MINUTES minutes)"
set xlabel "minute"
set ylabel "$label"
set yrange [0:*]
set grid
set key left top
plot $(IFS=,; echo "${plots[*]}")
GP
done

REPORT="$W/report.md"
{
  echo "## Soak — \`bench/soak.sh --minutes $MINUTES\` ($(date -u +%Y-%m-%d))"
  echo
  echo "sluice $("$BINARY" --version | awk 'NR == 1 { print $2 }'), 4 gateways (memory, redis, cluster, tls; 2 workers each) on one $(nproc)-core machine; faults every minute in turn: reload, Redis restart, upstream freeze, upstream kill, cluster master freeze."
  echo
  echo "| gateway | RSS after minute 2 MiB | RSS at the end MiB | descriptors at idle, first → last | 5xx in all | 5xx outside fault windows |"
  echo "|---|---|---|---|---|---|"
  for g in "${GATEWAYS[@]}"; do
    awk -v g="$g" '$2 == g { if (!n++) f0 = $4; if ($1 == 2) r2 = $3; r = $3; f = $4; x = $7; u += $8 }
      END { printf "| %s | %.0f | %.0f | %d → %d | %d | %d |\n", g, r2 / 1024, r / 1024, f0, f, x, u }' "$SAMPLES"
  done
  echo
  echo "wrk over the whole run, per gateway: requests on /v1/items (non-2xx) and on the 1-per-hour /v1/tight (non-2xx: its 429s):"
  echo
  for g in memory redis cluster; do
    echo "- $g: $(cat "$W"/wrk."$g".* | awk '/requests in/ { n += $1 } /Non-2xx/ { x += $NF } END { printf "%d (%d)", n, x }')," \
      "$(cat "$W"/wrk-tight."$g".* | awk '/requests in/ { n += $1 } /Non-2xx/ { x += $NF } END { printf "%d (%d)", n, x }')"
  done
  echo
  echo "Clients of the last minute (answers by status):"
  echo
  for g in memory redis cluster tls; do echo "- $g: $(tail -1 "$W/client.$g.$MINUTES")"; done
  echo
  echo "![resident memory](soak-rss.png) ![descriptors](soak-fds.png)"
  echo
  if ((${#failures[@]})); then
    echo "**FAILED**:"
    for f in "${failures[@]}"; do echo "- $f"; done
  else
    echo "Passed: memory and descriptors within their bounds, every 5xx inside an injected fault's window."
  fi
} >"$REPORT"
cat "$REPORT"
if ((${#failures[@]})); then
  # The evidence outlives the temporary directory: each gateway's log (its warnings name every
  # upstream and store failure), the samples and the clients' tallies.
  keep="bench/out/soak-$(date -u +%Y%m%dT%H%M%S)"
  mkdir -p "$keep"
  cp "$W"/*.log "$W"/*.yaml "$SAMPLES" "$W"/client.* "$keep"/ 2>/dev/null || true
  say "logs kept in $keep"
fi
((RECORD)) && { echo; cat "$REPORT"; } >>bench/RESULTS.md
((${#failures[@]} == 0))
