#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Side-by-side comparison of rate-limiting proxies, all on loopback, in interleaved rounds:
#   direct         wrk -> upstream (Debian's nginx, 1 worker, a fixed 200 with a 3-byte body)
#   nginx          wrk -> nginx + limit_req (1 worker, per-key zone on X-API-Key) -> upstream
#   haproxy        wrk -> HAProxy (1 thread, stick-table on X-API-Key, http_req_rate(1s)) -> upstream
#   sluice-memory  wrk -> sluice (1 worker, memory store, per-API-key token bucket) -> upstream
#   sluice-redis   wrk -> sluice (1 worker, Redis store, per-API-key token bucket) -> upstream
#   sluice-settled as sluice-redis, the bucket charged after the response (`charge:` reserves 2,
#                  the upstream's X-Usage-Tokens says 1, the unit left over is refunded): not in
#                  the default set; name it in --systems
#   sluice-unbatched as sluice-redis with `store.max_batch: 1` (each check its own script
#                  call: what batching saves): not in the default set either
# and, as a mode of its own (--modes rls, bench/compare-rls.sh), sluice as Envoy's rate limit
# service (h2load -> ShouldRateLimit) against sluice's proxy path for the same limits.
# --modes h2 (bench/compare-h2.sh) is h2load against nginx (http2, limit_req) and sluice
# (http2: true, memory and Redis stores) over TLS and h2c. --modes workers2 and --modes keys
# (bench/compare-scale.sh) are 2 workers / 2 threads on 2 shared cores, and a key-count sweep.
# --syscalls adds, after the pinned rounds, each system's system calls per request (perf stat).
# Every limiter keys on the X-API-Key header; wrk sends 10,000 distinct keys (key-0 ..
# key-9999) and every limit is far above what a key is offered, so each request is checked
# and admitted. All proxies keep their upstream connections alive. Config templates, the wrk
# script and the upstream's config are in bench/compare/. Run `bench/compare.sh --help`.
set -euo pipefail

SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
ORIG_ARGS=("$@")
cd "$(dirname "$0")/.."
ROOT="$PWD"
TPL="$ROOT/bench/compare"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

ALL_SYSTEMS="direct,nginx,haproxy,sluice-memory,sluice-redis,sluice-settled,sluice-unbatched"
ROUNDS=3
DURATION=8
CONNS=50
THREADS=1
MODES="pinned,unpinned,fixed"
SYSTEMS="direct,nginx,haproxy,sluice-memory,sluice-redis"
RECORD=0
BUILD=0
SELF_CHECK=0
SYSCALLS=0
FIXED_RATE=9500
FIXED_CONNS=100
WARMUP=2
KEYS=10000
QUOTA_HEADERS=1
PLOT_DIR="bench"
BINARY="build/sluice"
BUDGET=""

usage() {
  cat <<'EOF'
Usage: bench/compare.sh [options]

Runs wrk against each system in interleaved rounds (A B C D E, A B C D E, ...) in each mode,
then prints per system and mode the median over the rounds of requests/s, p50/p99/p99.9
latency, CPU µs per request of the proxy and of Redis, Redis commands per request, the
limiter decisions per request (sluice's /metrics), errors, and the ratios to nginx + limit_req.
Draws one latency-percentile plot per mode (PNG, gnuplot) into bench/compare-<mode>.png.

Systems: direct (wrk straight at the upstream), nginx (nginx + limit_req), haproxy
(HAProxy stick-table), sluice-memory, sluice-redis, and sluice-settled (the Redis store, the
bucket charged after the response: a reservation of 2 at admission, a refund of the unit the
upstream's `X-Usage-Tokens: 1` leaves over; one settle call per request), and
sluice-unbatched (the Redis store with `max_batch: 1`: every check its own script call).

Modes:
  pinned     wrk and the upstream on the first CPU, the system under test and Redis on
             the second (taskset)
  unpinned   no pinning
  fixed      no pinning, a fixed offered load (--rate, default 9500 req/s) paced by the wrk
             script's delay(); the achieved rate is printed and checked
  h2         alone, opt-in: HTTP/2 from clients, h2load against nginx (http2, limit_req) and
             sluice (http2: true) on the memory store and on Redis, TLS (ALPN h2) and h2c, 1 and
             10 streams per connection, pinned; run by bench/compare-h2.sh with options of its
             own (see bench/compare-h2.sh --help)
  rls        alone, opt-in: sluice's rate limit service (h2load calling ShouldRateLimit with 1
             and 3 descriptors) against its proxy path (wrk) for the same limits on Redis,
             pinned; run by bench/compare-rls.sh (--rounds, --seconds, --connections,
             --warmup, --binary, --record; see bench/compare-rls.sh --help)
  workers2   alone, opt-in: sluice with `workers: 2` (memory store and Redis) against nginx with
             2 workers (+ limit_req) and HAProxy with `nbthread 2` (stick-table), no pinning:
             the load generator shares the 2 cores; run by bench/compare-scale.sh with options
             of its own (see bench/compare-scale.sh --help)
  keys       alone, opt-in: a key-count sweep (10,000, 1,000,000 and 5,000,000 distinct keys,
             picked at random) for sluice on the memory store and on Redis and nginx +
             limit_req: req/s, p99, each server's RSS, Redis used_memory; pinned; run by
             bench/compare-scale.sh

Options:
  --rounds N         rounds per mode (each round runs every system once; default 3, at least 1)
  --seconds S        duration of one wrk run in seconds (default 8)
  --connections C    wrk connections (default 50)
  --threads T        wrk threads (default 1)
  --modes LIST       comma-separated, from pinned,unpinned,fixed (default: all three)
  --systems LIST     comma-separated, from direct,nginx,haproxy,sluice-memory,sluice-redis,
                     sluice-settled,sluice-unbatched (default: all but those two; ratios need
                     nginx)
  --rate R           offered load of the fixed mode in requests/s (default 9500)
  --fixed-connections C
                     wrk connections in the fixed mode (default 100: in that mode they only cap
                     the requests in flight, the pacing sets the rate)
  --warmup S         seconds of unrecorded load per system before each mode's rounds (default 2)
  --keys N           distinct API keys (default 10000)
  --no-quota-headers run sluice with `headers: []` (no X-RateLimit-*/RateLimit fields; nginx
                     and HAProxy send none either). Default: sluice's default header sets.
  --binary PATH      the gateway binary (default build/sluice)
  --build            build the gateway first if it is missing (cmake --build build --target sluice)
  --plot-dir DIR     where the PNG plots go (default bench)
  --budget S         the overall time guard in seconds (default: computed from the options)
  --record           append the report as a dated section to bench/RESULTS.md (otherwise it
                     is only printed)
  --self-check       start every system with low limits and check that each limiter refuses a
                     key after its allowance while another key still passes, then exit
  --syscalls         after the pinned mode's rounds, one more wrk run of --seconds per system
                     under `perf stat -e 'syscalls:sys_enter_*'` on the system's processes:
                     system calls per request, in total and the five most frequent
  -h, --help         this text

Bounded: each wrk run has -d; the whole script runs under `timeout` (a budget computed from
the options); every process it starts is stopped by pid on exit, and its temp dir removed.
EOF
}

die() { echo "compare: $*" >&2; exit 1; }
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

need_val() { (($# >= 2)) || die "$1 needs a value"; }
# --modes h2 takes bench/compare-h2.sh's options: they are handed over unread.
# --modes workers2 and --modes keys take bench/compare-scale.sh's, handed over the same way.
H2_MODE=0
SCALE_MODE=0
prev=""
for a in "$@"; do
  [[ $a == --modes=h2 || ($prev == --modes && $a == h2) ]] && H2_MODE=1
  [[ $a =~ ^--modes=(workers2|keys)$ || ($prev == --modes && $a =~ ^(workers2|keys)$) ]] && SCALE_MODE=1
  prev=$a
done
while ((!H2_MODE && !SCALE_MODE && $#)); do
  opt=$1
  if [[ $opt == --*=* ]]; then set -- "${opt%%=*}" "${opt#*=}" "${@:2}"; opt=$1; fi
  case $opt in
    -h | --help) usage; exit 0 ;;
    --rounds) need_val "$@"; ROUNDS=$2; shift 2 ;;
    --seconds) need_val "$@"; DURATION=$2; shift 2 ;;
    --connections) need_val "$@"; CONNS=$2; shift 2 ;;
    --threads) need_val "$@"; THREADS=$2; shift 2 ;;
    --modes) need_val "$@"; MODES=$2; shift 2 ;;
    --systems) need_val "$@"; SYSTEMS=$2; shift 2 ;;
    --rate) need_val "$@"; FIXED_RATE=$2; shift 2 ;;
    --fixed-connections) need_val "$@"; FIXED_CONNS=$2; shift 2 ;;
    --warmup) need_val "$@"; WARMUP=$2; shift 2 ;;
    --keys) need_val "$@"; KEYS=$2; shift 2 ;;
    --no-quota-headers) QUOTA_HEADERS=0; shift ;;
    --binary) need_val "$@"; BINARY=$2; shift 2 ;;
    --build) BUILD=1; shift ;;
    --plot-dir) need_val "$@"; PLOT_DIR=$2; shift 2 ;;
    --budget) need_val "$@"; BUDGET=$2; shift 2 ;;
    --record) RECORD=1; shift ;;
    --self-check) SELF_CHECK=1; shift ;;
    --syscalls) SYSCALLS=1; shift ;;
    *) usage >&2; die "unknown option: $opt" ;;
  esac
done

for v in ROUNDS:rounds DURATION:seconds CONNS:connections THREADS:threads FIXED_RATE:rate \
  FIXED_CONNS:fixed-connections WARMUP:warmup KEYS:keys; do
  name=${v%%:*}
  is_uint "${!name}" || die "--${v#*:} must be a whole number (got '${!name}')"
done
((ROUNDS >= 1)) || die "--rounds must be at least 1"
((DURATION >= 1 && DURATION <= 600)) || die "--seconds must be 1..600"
((THREADS >= 1 && CONNS >= THREADS && FIXED_CONNS >= THREADS)) ||
  die "--connections and --fixed-connections must be >= --threads >= 1"
((KEYS >= 1 && FIXED_RATE >= 1)) || die "--keys and --rate must be positive"
IFS=, read -r -a MODE_LIST <<<"$MODES"
IFS=, read -r -a SYSTEM_LIST <<<"$SYSTEMS"
for m in "${MODE_LIST[@]}"; do
  [[ $m != h2 && $m != workers2 && $m != keys ]] || die "--modes $m runs alone"
  [[ $m =~ ^(pinned|unpinned|fixed|rls)$ ]] || die "unknown mode: $m"
done
[[ ,$MODES, != *,rls,* || $MODES == rls ]] || die "--modes rls runs alone"

for s in "${SYSTEM_LIST[@]}"; do [[ ,$ALL_SYSTEMS, == *,$s,* ]] || die "unknown system: $s"; done
((${#SYSTEM_LIST[@]})) || die "--systems is empty"
has_system() { [[ ,$SYSTEMS, == *,$1,* ]]; }
SLUICE_SYSTEMS="sluice-memory sluice-redis sluice-settled sluice-unbatched"
uses_sluice() { local s; for s in $SLUICE_SYSTEMS; do has_system "$s" && return 0; done; return 1; }
on_redis() { [[ $1 == sluice-redis || $1 == sluice-settled || $1 == sluice-unbatched ]]; }
uses_redis() { local s; for s in $SLUICE_SYSTEMS; do on_redis "$s" && has_system "$s" && return 0; done; return 1; }

# --- tools -------------------------------------------------------------------------------
# Installed before the timeout guard starts (apt-get has its own bound below).
export PATH="$PATH:/usr/sbin:/sbin"
if [[ -z ${COMPARE_GUARDED:-} ]]; then
  declare -A PKG=([wrk]=wrk [nginx]=nginx-light [haproxy]=haproxy [redis-server]=redis-server
    [redis-cli]=redis-tools [gnuplot]=gnuplot-nox [taskset]=util-linux [curl]=curl
    [timeout]=coreutils [h2load]=nghttp2-client [protoc]=protobuf-compiler [openssl]=openssl)
  missing=()
  for tool in "${!PKG[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("${PKG[$tool]}")
  done
  if ((${#missing[@]})); then
    echo "compare: installing ${missing[*]}" >&2
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    timeout 600 $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
fi

# bench/compare-h2.sh bounds itself (its budget follows its own options).
if ((H2_MODE)); then exec "$ROOT/bench/compare-h2.sh" "${ORIG_ARGS[@]}"; fi
# So does bench/compare-scale.sh.
if ((SCALE_MODE)); then exec "$ROOT/bench/compare-scale.sh" "${ORIG_ARGS[@]}"; fi
# Bounded like the other modes: 4 systems x rounds x (seconds + warm-up + 4 s) and set-up.
if [[ $MODES == rls ]]; then
  exec timeout -k 15 $((120 + 4 * ROUNDS * (DURATION + WARMUP + 4))) "$ROOT/bench/compare-rls.sh" "${ORIG_ARGS[@]}"
fi

if uses_sluice && [[ ! -x $BINARY ]]; then
  if ((BUILD)); then
    [[ -f build/build.ninja ]] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    timeout 3600 cmake --build build --target sluice -- -j"$(nproc)"
  fi
  [[ -x $BINARY ]] || die "$BINARY is not built: run \`cmake --build build -j$(nproc)\` (or scripts/setup), or pass --build"
fi

# --- overall timeout guard ------------------------------------------------------------------
if [[ -z ${COMPARE_GUARDED:-} ]]; then
  nsys=${#SYSTEM_LIST[@]} nmodes=${#MODE_LIST[@]}
  if ((SELF_CHECK)); then
    budget=180
  else
    budget=$((120 + nmodes * nsys * (ROUNDS * (DURATION + 4) + WARMUP + 4)))
    ((SYSCALLS)) && budget=$((budget + nsys * (DURATION + 10)))
    budget=$((budget + budget / 4))
  fi
  if [[ -n $BUDGET ]]; then is_uint "$BUDGET" || die "--budget must be a whole number"; budget=$BUDGET; fi
  export COMPARE_GUARDED=1
  exec timeout -k 15 "$budget" "$SELF" "${ORIG_ARGS[@]}"
fi

# --- processes, ports, cleanup ----------------------------------------------------------------
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
BENCH_WORK="$(mktemp -d -t sluice-compare.XXXXXX)"
OUT=$BENCH_WORK
chmod 755 "$OUT" # nginx's workers run as nobody and need to reach their temp dirs
BENCH_PIDS=()
trap 'bench_guarded_exit compare' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# listening NAME: until the system NAME listens on PORT[NAME] (bench_wait_port), else its log's
# tail and a clear end.
listening() { bench_wait_port "${PORT[$1]}" "${PID[$1]}" "$OUT/$1.log" || die "$1 never listened on 127.0.0.1:${PORT[$1]}"; }

declare -A PID PORT ADMIN
start() { # name command...: runs it in the background, output to $OUT/<name>.log
  local name=$1
  shift
  "$@" >"$OUT/$name.log" 2>&1 &
  PID[$name]=$!
  BENCH_PIDS+=("$!")
}


# Limits: never reached in a benchmark; in --self-check each key gets 2 requests, then refusals.
if ((SELF_CHECK)); then
  NGINX_RATE="1r/m" NGINX_BURST=1 HAPROXY_RATE=2 SLUICE_RATE="1/1h" SLUICE_BURST=2 SLUICE_RESERVE=1
else
  NGINX_RATE="1000000r/s" NGINX_BURST=1000000 HAPROXY_RATE=1000000 SLUICE_RATE="1000000/1s"
  SLUICE_BURST=1000000 SLUICE_RESERVE=2
fi
HEADERS_YAML="[x-ratelimit, ietf]"
((QUOTA_HEADERS)) || HEADERS_YAML="[]"

PORT[upstream]=$(bench_free_port)
mkdir -p "$OUT/upstream-tmp"
bench_fill "$TPL/upstream-nginx.conf" "$OUT/upstream.conf" DIR="$OUT" PORT="${PORT[upstream]}"
start upstream nginx -e "$OUT/upstream-error.log" -c "$OUT/upstream.conf" -p "$OUT"
PORT[direct]=${PORT[upstream]}

if uses_redis; then
  PORT[redis]=$(bench_free_port)
  start redis redis-server --port "${PORT[redis]}" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$OUT" --logfile "$OUT/redis-server.log"
fi
if has_system nginx; then
  PORT[nginx]=$(bench_free_port)
  mkdir -p "$OUT/nginx-limit-tmp"
  bench_fill "$TPL/nginx-limit.conf" "$OUT/nginx-limit.conf" DIR="$OUT" PORT="${PORT[nginx]}" \
    UPSTREAM_PORT="${PORT[upstream]}" NGINX_RATE="$NGINX_RATE" NGINX_BURST="$NGINX_BURST"
  start nginx nginx -e "$OUT/nginx-limit-error.log" -c "$OUT/nginx-limit.conf" -p "$OUT"
fi
if has_system haproxy; then
  PORT[haproxy]=$(bench_free_port)
  bench_fill "$TPL/haproxy.cfg" "$OUT/haproxy.cfg" PORT="${PORT[haproxy]}" \
    UPSTREAM_PORT="${PORT[upstream]}" HAPROXY_RATE="$HAPROXY_RATE"
  haproxy -c -q -f "$OUT/haproxy.cfg" || die "haproxy refuses its config"
  start haproxy haproxy -db -f "$OUT/haproxy.cfg"
fi
listening upstream
if uses_redis; then listening redis; fi

sluice_rules() { # name store-yaml [limit fields]
  bench_fill "$TPL/sluice.yaml" "$OUT/$1.yaml" PORT="${PORT[$1]}" ADMIN_PORT="${ADMIN[$1]}" \
    STORE="$2" HEADERS="$HEADERS_YAML" UPSTREAM_PORT="${PORT[upstream]}" \
    SLUICE_RATE="$SLUICE_RATE" SLUICE_BURST="$SLUICE_BURST" LIMIT_NAME="${1//-/_}" EXTRA="${3:-}"
  awk -v n="$KEYS" 'BEGIN { print "api_keys:"; for (i = 0; i < n; i++) printf "  key-%d: bench\n", i }' \
    >>"$OUT/$1.yaml"
  "$BINARY" --check-config "$OUT/$1.yaml" >/dev/null || die "sluice refuses $OUT/$1.yaml"
  start "$1" "$BINARY" --config "$OUT/$1.yaml" --no-watch --log-level warn
}
for s in $SLUICE_SYSTEMS; do
  has_system "$s" || continue
  PORT[$s]=$(bench_free_port)
  ADMIN[$s]=$(bench_free_port)
done
if has_system sluice-memory; then sluice_rules sluice-memory "{type: memory}"; fi
if has_system sluice-redis; then
  sluice_rules sluice-redis "{type: redis, address: 127.0.0.1:${PORT[redis]}, timeout: 50ms}"
fi
if has_system sluice-settled; then
  sluice_rules sluice-settled "{type: redis, address: 127.0.0.1:${PORT[redis]}, timeout: 50ms}" \
    ", charge: {reserve: $SLUICE_RESERVE, settle: {header: X-Usage-Tokens}}"
fi
if has_system sluice-unbatched; then
  sluice_rules sluice-unbatched "{type: redis, address: 127.0.0.1:${PORT[redis]}, timeout: 50ms, max_batch: 1}"
fi
for s in "${SYSTEM_LIST[@]}"; do [[ $s == direct ]] || listening "$s"; done
for s in $SLUICE_SYSTEMS; do
  has_system "$s" || continue
  for _ in $(seq 100); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${ADMIN[$s]}/readyz") == 200 ]] && break
    sleep 0.1
  done
done

status_of() { # port key: the HTTP status of one GET / with that key
  curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "X-API-Key: $2" "http://127.0.0.1:$1/"
}
metric_sum() { # system decision: sum of sluice_requests_total{decision=...} over routes
  curl -s --max-time 5 "http://127.0.0.1:${ADMIN[$1]}/metrics" |
    awk -v d="decision=\"$2\"" '/^sluice_requests_total\{/ && index($0, d) { s += $NF } END { printf "%.0f\n", s }'
}

# --- self-check: every limiter sees the key and refuses after its allowance -------------------
if ((SELF_CHECK)); then
  fails=0
  for s in "${SYSTEM_LIST[@]}"; do
    [[ $s == direct ]] && continue
    codes=()
    for _ in 1 2 3 4 5; do codes+=("$(status_of "${PORT[$s]}" key-5)"); done
    other=$(status_of "${PORT[$s]}" key-6)
    verdict=ok
    [[ ${codes[0]} == 200 && ${codes[1]} == 200 ]] || verdict="FAIL (the allowance was refused)"
    [[ " ${codes[*]:2} " == *" 429 "* ]] || verdict="FAIL (never refused key-5)"
    [[ $other == 200 ]] || verdict="FAIL (key-6 shares key-5's bucket: $other)"
    extra=""
    if [[ $s == sluice-* ]]; then
      limited=$(metric_sum "$s" limited) allowed=$(metric_sum "$s" allowed)
      extra="  /metrics: allowed $allowed, limited $limited"
      ((limited >= 3 && allowed >= 3)) || verdict="FAIL (/metrics did not count the decisions)"
    fi
    [[ $verdict == ok ]] || fails=$((fails + 1))
    printf '%-14s key-5: %s  key-6: %s  %s%s\n' "$s" "${codes[*]}" "$other" "$verdict" "$extra"
  done
  if has_system direct; then
    d=$(status_of "${PORT[upstream]}" key-5)
    printf '%-14s %s %s\n' direct "$d" "$([[ $d == 200 ]] && echo ok || echo FAIL)"
    [[ $d == 200 ]] || fails=$((fails + 1))
  fi
  ((fails == 0)) || die "self-check: $fails system(s) failed"
  echo "self-check: every limiter refuses a key after its allowance and keeps other keys apart"
  exit 0
fi

for s in "${SYSTEM_LIST[@]}"; do
  c=$(status_of "${PORT[$s]}" key-1)
  [[ $c == 200 ]] || { tail -20 "$OUT/$s.log" >&2 || true; die "$s answers $c to a first request"; }
done

# --- measurement ------------------------------------------------------------------------------
CLK_TCK=$(getconf CLK_TCK)
read -r -a CPUS <<<"$(bench_cpus)"
ALL_CPUS=$(IFS=,; echo "${CPUS[*]}")
if [[ ,$MODES, == *,pinned,* ]] && ((${#CPUS[@]} < 2)); then die "pinned mode needs 2 CPUs (have $ALL_CPUS)"; fi

tree_pids() { bench_tree_pids "$1"; } # the pid and all its descendants (bench/lib.sh)
tree_ticks() { # pid: utime+stime of the process tree, in clock ticks
  local t=0 p v
  for p in $(tree_pids "$1"); do
    v=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 }') || continue
    t=$((t + ${v:-0}))
  done
  echo "$t"
}
redis_calls() { # "<commands> <scripts> <script µs>": commands Redis has run (those a script calls
  # included, INFO itself excluded), of them the script invocations (EVAL, EVALSHA, FCALL: round
  # trips), and the CPU µs Redis spent in those calls (their commands included)
  redis-cli -p "${PORT[redis]}" info commandstats | awk -F'[:=,]' '
    /^cmdstat_/ && $1 != "cmdstat_info" { s += $3 }
    $1 ~ /^cmdstat_(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$/ { e += $3; u += $5 }
    END { printf "%.0f %.0f %.0f\n", s, e, u }'
}
set_affinity() { # system cpus: every thread of the system's process tree
  local p
  for p in $(tree_pids "${PID[$1]}"); do taskset -a -p -c "$2" "$p" >/dev/null; done
}
apply_mode() {
  local s
  if [[ $1 == pinned ]]; then
    set_affinity upstream "${CPUS[0]}"
    for s in "${SYSTEM_LIST[@]}" redis; do
      [[ $s == direct || -z ${PID[$s]:-} ]] || set_affinity "$s" "${CPUS[1]}"
    done
    WRK_PREFIX=(taskset -c "${CPUS[0]}")
  else
    for s in upstream "${SYSTEM_LIST[@]}" redis; do
      [[ $s == direct || -z ${PID[$s]:-} ]] || set_affinity "$s" "$ALL_CPUS"
    done
    WRK_PREFIX=()
  fi
  RATE=0 WRK_CONNS=$CONNS
  [[ $1 == fixed ]] && RATE=$FIXED_RATE WRK_CONNS=$FIXED_CONNS
  return 0
}

wrk_argv() { # system seconds: WRK_ARGV, the wrk command line (the mode's pinning first)
  WRK_ARGV=(env COMPARE_KEYS="$KEYS" COMPARE_RATE="$RATE" COMPARE_THREADS="$THREADS"
    "${WRK_PREFIX[@]}" wrk -t"$THREADS" -c"$WRK_CONNS" -d"${2}s" --timeout 2s -s "$TPL/wrk.lua"
    "http://127.0.0.1:${PORT[$1]}/")
}
wrk_run() { # system seconds output
  wrk_argv "$1" "$2"
  "${WRK_ARGV[@]}" >"$3" 2>&1 || { cat "$3" >&2; die "wrk failed against $1"; }
}
SYSCALLS_TSV="$OUT/syscalls.tsv"
: >"$SYSCALLS_TSV"
syscalls_run() { # system: one wrk run under perf stat on the system's processes (bench/lib.sh)
  local s=$1 f="$OUT/syscalls.$1" pids n
  pids=$(tree_pids "${PID[$s]}" | paste -sd,)
  wrk_argv "$s" "$DURATION"
  if ! bench_perf_syscalls "$f" "$pids" "${WRK_ARGV[@]}"; then
    echo "  WARNING $s: perf stat could not count system calls: $(tail -3 "$f.perf" "$f.cmd" 2>/dev/null | tr '\n' ' ')" >&2
    printf '%s\tNA\tNA\tperf could not count\n' "$s" >>"$SYSCALLS_TSV"
    return 0
  fi
  n=$(awk '$1 == "cmp" && $2 == "requests" { print $3 }' "$f.cmd")
  [[ ${n:-0} -gt 0 ]] || { cat "$f.cmd" >&2; die "$s: wrk counted no request under perf"; }
  awk -v s="$s" -v n="$n" '{ t += $1; if (NR <= 5) top = top sprintf("%s%s %.2f", top == "" ? "" : ", ", $2, $1 / n) }
    END { printf "%s\t%d\t%.2f\t%s\n", s, n, t / n, top }' "$f" >>"$SYSCALLS_TSV"
  tail -1 "$SYSCALLS_TSV" | awk -F'\t' '{ printf "  [syscalls] %-14s %s per request (%s)\n", $1, $3, $4 }' >&2
}

RESULTS="$OUT/results.tsv"
mkdir -p "$OUT/lat"
: >"$RESULTS"
run_one() { # mode system round
  local mode=$1 s=$2 r=$3 f="$OUT/wrk.$1.$2.$3.txt"
  local sut0=NA up0 redis0=NA cmds0=NA scr0=NA usec0=NA allowed0=NA sut1 up1 redis1 cmds1 scr1 usec1 allowed1
  [[ $s != direct ]] && sut0=$(tree_ticks "${PID[$s]}")
  up0=$(tree_ticks "${PID[upstream]}")
  if on_redis "$s"; then redis0=$(tree_ticks "${PID[redis]}"); read -r cmds0 scr0 usec0 < <(redis_calls); fi
  [[ $s == sluice-* ]] && allowed0=$(metric_sum "$s" allowed)
  wrk_run "$s" "$DURATION" "$f"
  [[ $s != direct ]] && sut1=$(tree_ticks "${PID[$s]}")
  up1=$(tree_ticks "${PID[upstream]}")
  if on_redis "$s"; then redis1=$(tree_ticks "${PID[redis]}"); read -r cmds1 scr1 usec1 < <(redis_calls); fi
  [[ $s == sluice-* ]] && allowed1=$(metric_sum "$s" allowed)
  grep '^cmp lat ' "$f" | awk '{ print $3, $4 }' >"$OUT/lat/$mode.$s.$r"
  awk -v mode="$mode" -v sys="$s" -v round="$r" -v tck="$CLK_TCK" \
    -v sut0="$sut0" -v sut1="${sut1:-NA}" -v up0="$up0" -v up1="$up1" \
    -v redis0="$redis0" -v redis1="${redis1:-NA}" -v cmds0="$cmds0" -v cmds1="${cmds1:-NA}" \
    -v al0="$allowed0" -v al1="${allowed1:-NA}" -v scr0="$scr0" -v scr1="${scr1:-NA}" \
    -v usec0="$usec0" -v usec1="${usec1:-NA}" '
    function per(a, b, scale) { return (a == "NA" || n == 0) ? "NA" : sprintf("%.3f", (b - a) * scale / n) }
    $1 == "cmp" && $2 == "requests" { n = $3 }
    $1 == "cmp" && $2 == "rps" { rps = $3 }
    $1 == "cmp" && $2 == "non2xx" { non2xx = $3 }
    $1 == "cmp" && $2 == "socket_errors" { sock = $3 + $4 + $5 + $6; sockd = $3 "/" $4 "/" $5 "/" $6 }
    $1 == "cmp" && $2 == "lat" && $3 == "50" { p50 = $4 }
    $1 == "cmp" && $2 == "lat" && $3 == "99" { p99 = $4 }
    $1 == "cmp" && $2 == "lat" && $3 == "99.9" { p999 = $4 }
    END {
      if (n == "") { print "no wrk summary" > "/dev/stderr"; exit 1 }
      # Measured nothing: no request completed (the system never answered), none answered
      # 2xx, or a sluice that counted no limiter decision.
      if (n == 0) { print sys ": wrk counted no request" > "/dev/stderr"; exit 1 }
      if (non2xx == n) { print sys ": no request answered 2xx (" non2xx " of " n ")" > "/dev/stderr"; exit 1 }
      if (al0 != "NA" && al1 - al0 <= 0) { print sys ": sluice counted no limiter decision" > "/dev/stderr"; exit 1 }
      us = 1e6 / tck
      printf "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mode, sys, round, rps, n,
        non2xx, sock, sockd, p50, p99, p999, per(sut0, sut1, us), per(up0, up1, us),
        per(redis0, redis1, us), per(cmds0, cmds1, 1), per(al0, al1, 1), per(scr0, scr1, 1),
        per(usec0, usec1, 1)
    }' "$f" >>"$RESULTS" || { cat "$f" >&2; die "could not read wrk's output for $s"; }
  tail -1 "$RESULTS" | awk -F'\t' '{
    printf "  [%s round %s] %-14s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  p99.9 %6.2f ms  cpu %s µs/req  redis %s µs/req  cmds/req %s  scripts/req %s  decisions/req %s  non-2xx %s  socket errors %s\n",
      $1, $3, $2, $4, $9 / 1000, $10 / 1000, $11 / 1000, $12, $14, $15, $17, $16, $6, $8 }' >&2
  local warn
  warn=$(tail -1 "$RESULTS" | awk -F'\t' -v rate="$RATE" '
    $6 > 0 || $7 > 0 { printf "errors (non-2xx %s, socket %s) ", $6, $8 }
    $16 != "NA" && $16 < 0.99 { printf "only %s limiter decisions per request ", $16 }
    rate > 0 && ($4 < rate * 0.95 || $4 > rate * 1.05) { printf "achieved %.0f req/s, offered %d ", $4, rate }')
  if [[ -n $warn && $s == sluice-* ]]; then
    warn+="(sluice so far: limited $(metric_sum "$s" limited), fail_closed $(metric_sum "$s" fail_closed))"
  fi
  [[ -z $warn ]] || echo "  WARNING $s: $warn" >&2
  return 0
}

LOADAVG=()
START_DATE=$(date -u +%Y-%m-%d)
for mode in "${MODE_LIST[@]}"; do
  apply_mode "$mode"
  LOADAVG+=("$mode $(cut -d' ' -f1 /proc/loadavg)")
  awk '$1 > 1.0 { exit 1 }' /proc/loadavg ||
    echo "  WARNING: load average $(cut -d' ' -f1 /proc/loadavg) before mode $mode: the machine is not quiet" >&2
  echo "mode $mode: warm-up ${WARMUP}s per system, then $ROUNDS round(s) of ${DURATION}s per system" >&2
  if ((WARMUP > 0)); then
    for s in "${SYSTEM_LIST[@]}"; do wrk_run "$s" "$WARMUP" "$OUT/warmup.txt"; done
  fi
  for ((r = 1; r <= ROUNDS; r++)); do
    for s in "${SYSTEM_LIST[@]}"; do
      run_one "$mode" "$s" "$r"
      sleep 1
    done
  done
  if ((SYSCALLS)) && [[ $mode == pinned ]]; then
    for s in "${SYSTEM_LIST[@]}"; do [[ $s == direct ]] || syscalls_run "$s"; done
  fi
done

# --- report ---------------------------------------------------------------------------------
declare -A LABEL=([direct]="direct (upstream alone)" [nginx]="nginx + limit_req"
  [haproxy]="HAProxy stick-table" [sluice-memory]="sluice, memory store"
  [sluice-redis]="sluice, Redis store" [sluice-settled]="sluice, Redis store, cost settled after the response"
  [sluice-unbatched]="sluice, Redis store, checks not batched (max_batch: 1)")

# median over rounds of every numeric column, errors summed; one line per mode and system
SUMMARY="$OUT/summary.tsv"
awk -F'\t' '
  function median(key, col,   k, m, i, j, t, a) {
    m = cnt[key]
    for (i = 1; i <= m; i++) a[i] = v[key, col, i]
    for (i = 1; i <= m; i++) if (a[i] == "NA") return "NA"
    for (i = 2; i <= m; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  {
    key = $1 SUBSEP $2
    if (!(key in cnt)) order[++nk] = key
    c = ++cnt[key]
    for (col = 4; col <= 18; col++) v[key, col, c] = $col
    non2xx[key] += $6; sock[key] += $7
    split($8, d, "/"); for (i = 1; i <= 4; i++) sd[key, i] += d[i]
    if (!(key in lo) || $4 < lo[key]) lo[key] = $4
    if (!(key in hi) || $4 > hi[key]) hi[key] = $4
  }
  END {
    for (k = 1; k <= nk; k++) {
      key = order[k]; split(key, mk, SUBSEP)
      printf "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", mk[1], mk[2], cnt[key],
        median(key, 4), lo[key], hi[key], median(key, 9), median(key, 10), median(key, 11),
        median(key, 12), median(key, 13), median(key, 14), median(key, 15), non2xx[key],
        sd[key, 1] "/" sd[key, 2] "/" sd[key, 3] "/" sd[key, 4], median(key, 16), sock[key], median(key, 17),
        median(key, 18)
    }
  }' "$RESULTS" >"$SUMMARY"

# Batch sizes: sluice_store_script_calls_total{checks=...} of each Redis-backed sluice, over its
# whole life (warm-ups and every mode included): the share of script calls per size class, and
# the checks per call (decisions ÷ calls).
batch_line() { # system
  curl -s --max-time 5 "http://127.0.0.1:${ADMIN[$1]}/metrics" | awk '
    /^sluice_store_script_calls_total\{/ { match($0, /checks="[^"]*"/); c = substr($0, RSTART + 8, RLENGTH - 9)
      ord[++n] = c; v[c] = $NF; t += $NF }
    /^sluice_requests_total\{/ && /decision="allowed"/ { a += $NF }
    END {
      if (t == 0) exit
      s = ""
      for (i = 1; i <= n; i++) if (v[ord[i]] > 0) s = s sprintf("%s%s: %.1f %%", s == "" ? "" : ", ", ord[i], 100 * v[ord[i]] / t)
      printf "%s (%.0f calls, %.1f allowed checks per call)", s, t, a / t
    }'
}
BATCHES=()
for s in "${SYSTEM_LIST[@]}"; do
  on_redis "$s" || continue
  line=$(batch_line "$s")
  [[ -n $line ]] && BATCHES+=("$s: $line")
done

git_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain -- src include lua 2>/dev/null) ]] && git_rev+=" + uncommitted changes"
args_text="${ORIG_ARGS[*]}"
REPORT="$OUT/report.md"
{
  echo "## Comparison with nginx limit_req and HAProxy — \`bench/compare.sh${args_text:+ $args_text}\` ($START_DATE)"
  echo
  echo "All on loopback on one $(nproc)-core machine. wrk ($(wrk -v 2>&1 | awk 'NR == 1 { print $2 }'), -t$THREADS" \
    "-c$CONNS, ${DURATION}s a run, 2 s timeout) sends \`X-API-Key: key-0\` .. \`key-$((KEYS - 1))\` in turn;" \
    "the upstream is Debian's nginx $(nginx -v 2>&1 | sed 's|.*/||'), 1 worker, answering \`200\` with a 3-byte body."
  echo "Every limiter keys on X-API-Key with a limit no key reaches, and keeps upstream connections alive:" \
    "nginx + limit_req (1 worker, \`limit_req_zone \$http_x_api_key\`, upstream \`keepalive\`);" \
    "HAProxy $(haproxy -v | awk 'NR == 1 { print $3 }') (\`nbthread 1\`, stick-table on \`req.hdr(X-API-Key)\`" \
    "storing \`http_req_rate(1s)\`, \`http-reuse always\`); sluice $("$BINARY" --version | awk 'NR == 1 { print $2 }')" \
    "(build $git_rev, \`workers: 1\`, one token bucket per API key, \`by: api_key\`, headers \`$HEADERS_YAML\`)" \
    "on the memory store and on redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')" \
    "(\`--save \"\" --appendonly no\`)."
  if has_system sluice-settled; then
    echo "sluice-settled is sluice on the same Redis with the bucket charged after the response" \
      "(\`charge: {reserve: $SLUICE_RESERVE, settle: {header: X-Usage-Tokens}}\`): each request reserves" \
      "$SLUICE_RESERVE units at admission and, when the upstream's \`X-Usage-Tokens: 1\` is read at the" \
      "response's end, the unit left over is refunded in a second script call (no other system reads the header)."
  fi
  echo "Systems run in interleaved rounds (each round runs every system once, after a ${WARMUP}s warm-up per mode);" \
    "each figure is the **median of $ROUNDS rounds**, errors are summed over the rounds, \"spread\" is" \
    "(max − min) ÷ median of req/s. CPU µs/req = utime + stime (from /proc/<pid>/stat, CLK_TCK $CLK_TCK)" \
    "of the process tree over the run ÷ completed requests: the proxy, Redis and the upstream separately." \
    "Redis scripts/req = EVAL/EVALSHA/FCALL calls (round trips) ÷ requests; Redis script µs/check = the µs INFO commandstats" \
    "gives those calls ÷ limiter decisions (one check per request); Redis cmds/req = every INFO commandstats call" \
    "(the commands a script runs count too) ÷ requests; decisions/req = growth of sluice's" \
    "\`sluice_requests_total{decision=\"allowed\"}\` ÷ requests. Ratios are to nginx + limit_req." \
    "Latencies are wrk's (time from sending a request to its response; wrk does not correct coordinated omission)."
  echo "1-minute load average at the start of each mode: $(IFS=,; echo "${LOADAVG[*]}" | sed 's/,/, /g')."
  if ((${#BATCHES[@]})); then
    echo
    echo "Script calls by the checks each decided (\`sluice_store_script_calls_total{checks}\`, over each" \
      "gateway's whole run, warm-ups and every mode included):"
    echo
    for b in "${BATCHES[@]}"; do echo "- ${LABEL[${b%%:*}]}: ${b#*: }"; done
  fi
  for mode in "${MODE_LIST[@]}"; do
    echo
    case $mode in
      pinned) echo "### pinned: wrk and the upstream on CPU ${CPUS[0]}, the system under test and Redis on CPU ${CPUS[1]}" ;;
      unpinned) echo "### unpinned: no CPU pinning, as many requests as each system answers" ;;
      fixed) echo "### fixed: an offered load of $FIXED_RATE req/s (the wrk script paces each request with \`delay()\`, $FIXED_CONNS connections), no pinning" ;;
    esac
    echo
    hdr="| system | req/s | spread | req/s ÷ nginx | p50 ms | p99 ms | p99.9 ms |"
    sep="|---|---|---|---|---|---|---|"
    [[ $mode == fixed ]] && { hdr+=" p99 over direct ms |"; sep+="---|"; }
    hdr+=" proxy CPU µs/req | CPU ÷ nginx | Redis CPU µs/req | (proxy + Redis) ÷ nginx | Redis scripts/req | Redis script µs/check | Redis cmds/req | upstream CPU µs/req | decisions/req | non-2xx | socket errors c/r/w/t |"
    sep+="---|---|---|---|---|---|---|---|---|---|---|"
    echo "$hdr"
    echo "$sep"
    awk -F'\t' -v mode="$mode" -v fixed="$([[ $mode == fixed ]] && echo 1 || echo 0)" \
      -v labels="$(for s in "${!LABEL[@]}"; do printf '%s=%s;' "$s" "${LABEL[$s]}"; done)" '
      function num(x, f) { return x == "NA" ? "—" : sprintf(f, x) }
      function ratio(a, b) { return (a == "NA" || b == "NA" || b + 0 == 0) ? "—" : sprintf("%.2f", a / b) }
      function thousands(x,   s, r) { s = sprintf("%.0f", x); r = ""; while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) } return s r }
      BEGIN { n = split(labels, l, ";"); for (i = 1; i <= n; i++) if (l[i] != "") { split(l[i], kv, "="); label[kv[1]] = kv[2] } }
      $1 == mode { row[++nr] = $0; if ($2 == "nginx") { nrps = $4; ncpu = $10 } if ($2 == "direct") dp99 = $8 }
      END {
        for (i = 1; i <= nr; i++) {
          split(row[i], f, "\t")
          both = (f[10] == "NA") ? "NA" : f[10] + (f[12] == "NA" ? 0 : f[12])
          line = sprintf("| %s | %s | %.0f %% | %s | %.2f | %.2f | %.2f |", label[f[2]], thousands(f[4]),
            f[4] > 0 ? 100 * (f[6] - f[5]) / f[4] : 0, ratio(f[4], nrps), f[7] / 1000, f[8] / 1000, f[9] / 1000)
          if (fixed) line = line sprintf(" %s |", dp99 == "" || f[2] == "direct" ? "—" : sprintf("%+.2f", (f[8] - dp99) / 1000))
          line = line sprintf(" %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |", num(f[10], "%.1f"), ratio(f[10], ncpu),
            num(f[12], "%.1f"), f[12] == "NA" ? "—" : ratio(both, ncpu), num(f[18], "%.2f"),
            f[19] == "NA" || f[16] == "NA" || f[16] + 0 == 0 ? "—" : sprintf("%.2f", f[19] / f[16]), num(f[13], "%.2f"), num(f[11], "%.1f"),
            num(f[16], "%.3f"), f[14], f[15])
          print line
        }
      }' "$SUMMARY"
    if [[ $mode == pinned && -s $SYSCALLS_TSV ]]; then
      echo
      echo "System calls per request (\`perf stat -e 'syscalls:sys_enter_*'\` on every thread of the" \
        "system's processes during one more ${DURATION}s wrk run, pinned; Redis's own not counted):"
      echo
      echo "| system | requests | system calls/req | the five most frequent, per request |"
      echo "|---|---|---|---|"
      awk -F'\t' -v labels="$(for s in "${!LABEL[@]}"; do printf '%s=%s;' "$s" "${LABEL[$s]}"; done)" '
        BEGIN { n = split(labels, l, ";"); for (i = 1; i <= n; i++) if (l[i] != "") { split(l[i], kv, "="); label[kv[1]] = kv[2] } }
        { printf "| %s | %s | %s | %s |\n", label[$1], $2, $3, $4 }' "$SYSCALLS_TSV"
    fi
    if [[ $mode == fixed ]]; then
      echo
      awk -F'\t' -v rate="$FIXED_RATE" '$1 == "fixed" { n++; if ($4 >= rate * 0.95 && $4 <= rate * 1.05) ok++
          else off = off sprintf("%s%s round %s: %.0f", off == "" ? "" : ", ", $2, $3, $4) }
        END { printf "Achieved rate: %d of %d runs within 5 %% of the offered %d req/s%s.\n", ok, n, rate,
          off == "" ? "" : " (below or above it: " off ")" }' "$RESULTS"
    fi
    echo
    img="$PLOT_DIR/compare-$mode.png"
    [[ $PLOT_DIR == bench ]] && img="compare-$mode.png" # relative to bench/RESULTS.md
    echo "![latency percentiles, $mode]($img)"
  done
} >"$REPORT"

# --- plots ----------------------------------------------------------------------------------
declare -A COLOR=([direct]="#555555" [nginx]="#009e73" [haproxy]="#0072b2" [sluice-memory]="#e69f00"
  [sluice-redis]="#d55e00" [sluice-settled]="#cc79a7" [sluice-unbatched]="#56b4e9")
mkdir -p "$PLOT_DIR"
for mode in "${MODE_LIST[@]}"; do
  plot_cmds=()
  for s in "${SYSTEM_LIST[@]}"; do
    # per percentile, the median over the rounds; x = 1 / (1 - p), the HdrHistogram axis
    cat "$OUT/lat/$mode.$s".* | awk -v rounds="$ROUNDS" '
      { if (!($1 in c)) ord[++np] = $1; c[$1]++; v[$1, c[$1]] = $2 }
      END {
        for (k = 1; k <= np; k++) {
          p = ord[k]; m = c[p]
          for (i = 1; i <= m; i++) a[i] = v[p, i] + 0
          for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
          med = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
          printf "%.6g %s %.4f\n", 1 / (1 - p / 100), p, med / 1000
        }
      }' >"$OUT/plot.$mode.$s.dat"
    plot_cmds+=("'$OUT/plot.$mode.$s.dat' using 1:3 with linespoints lw 2 lc rgb '${COLOR[$s]}' title '${LABEL[$s]}'")
  done
  joined=$(IFS=,; echo "${plot_cmds[*]}")
  gnuplot <<GP || echo "compare: gnuplot failed for $mode" >&2
set terminal pngcairo size 1000,620 font ",11" noenhanced
set output '$PLOT_DIR/compare-$mode.png'
set title "Latency by percentile, $mode mode (median of $ROUNDS rounds, wrk -c$([[ $mode == fixed ]] && echo "$FIXED_CONNS" || echo "$CONNS"), ${DURATION}s$([[ $mode == fixed ]] && echo ", $FIXED_RATE req/s offered"))"
set logscale x
set xrange [1.8:12000]
set xtics ("50%%" 2, "75%%" 4, "90%%" 10, "99%%" 100, "99.9%%" 1000, "99.99%%" 10000)
set xlabel "percentile"
set ylabel "latency (ms)"
set yrange [0:*]
set grid
set key left top
plot $joined
GP
done

cat "$REPORT"
echo >&2
echo "plots: $(for m in "${MODE_LIST[@]}"; do printf '%s ' "$PLOT_DIR/compare-$m.png"; done)" >&2
if ((RECORD)); then
  { echo; cat "$REPORT"; } >>bench/RESULTS.md
  echo "appended to bench/RESULTS.md" >&2
fi
