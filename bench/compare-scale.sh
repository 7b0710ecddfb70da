#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/compare.sh --modes workers2 | keys: how the comparison scales, all on loopback, with
# compare.sh's upstream (Debian's nginx, 1 worker, a 200 with a 3-byte body), templates
# (bench/compare/) and wrk script.
#   workers2  sluice `workers: 2` on the memory store and on Redis, nginx `worker_processes 2`
#             + limit_req, HAProxy `nbthread 2` + its stick-table rate check, and `direct`;
#             no pinning: wrk (-t2) shares the 2 cores with everything, as compare.sh's
#             unpinned mode. 10,000 API keys in turn; interleaved rounds, medians.
#   keys      a key-count sweep: 10,000, 1,000,000 and 5,000,000 distinct keys, each request's
#             key picked at random from the range, for sluice (1 worker) on the memory store
#             (max_buckets above the largest count) and on Redis, and nginx (1 worker) +
#             limit_req with a zone sized for them; pinned as compare.sh's pinned mode. The
#             limits keep every key's state for an hour (rate 1/1h with a burst never reached;
#             nginx 1r/m with a burst never reached), so the stores grow with the keys. Before
#             each count's run a warm-up walks the keys in turn from where the last one stopped,
#             for at most --warm-seconds (the count of keys walked is reported: the state
#             present when the run starts). Figures: req/s, p99, each server's resident memory
#             (PSS summed over its processes), Redis used_memory.
# Exits non-zero when a run measured nothing: a server that never listened, a first request not
# answered 200, no request completed or none answered 2xx, or a sluice that counted no decision.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TPL=$ROOT/bench/compare
# shellcheck source=bench/lib.sh
source bench/lib.sh

MODE=""
ROUNDS=""
DURATION=""
CONNS=50
THREADS=""
WARMUP=2
WARM_SECONDS=50
KEY_COUNTS="10000,1000000,5000000"
BINARY="build/sluice"
RECORD=0
ORIG_ARGS=("$@")
usage() {
  cat <<'EOF'
Usage: bench/compare.sh --modes workers2|keys [options]    (or bench/compare-scale.sh ...)

  --rounds N          workers2: interleaved rounds (default 2; figures are medians);
                      keys: 1 (one run per system and key count)
  --seconds S         one measured wrk run (default 5 for workers2, 4 for keys)
  --connections C     wrk connections (default 50)
  --threads T         wrk threads (default 2 for workers2, 1 for keys)
  --warmup S          workers2: unrecorded load per system before the rounds (default 2)
  --warm-seconds S    keys: the most a warm-up may walk new keys before a count's run
                      (default 50; 0 = none)
  --key-counts LIST   keys: the counts, comma-separated (default 10000,1000000,5000000)
  --binary PATH       the gateway (default build/sluice)
  --record            append the report as a dated section to bench/RESULTS.md

Bounded: each wrk run has -d; the whole script runs under `timeout` (a budget computed from the
options); every process it starts is stopped by pid on exit, and its temp dir removed.
EOF
}
die() { echo "compare-scale: $*" >&2; exit 1; }
while (($#)); do
  opt=$1
  if [[ $opt == --*=* ]]; then set -- "${opt%%=*}" "${opt#*=}" "${@:2}"; opt=$1; fi
  case $opt in
    -h | --help) usage; exit 0 ;;
    --modes) MODE=${2:-}; shift 2 ;;
    --rounds) ROUNDS=${2:-}; shift 2 ;;
    --seconds) DURATION=${2:-}; shift 2 ;;
    --connections) CONNS=${2:-}; shift 2 ;;
    --threads) THREADS=${2:-}; shift 2 ;;
    --warmup) WARMUP=${2:-}; shift 2 ;;
    --warm-seconds) WARM_SECONDS=${2:-}; shift 2 ;;
    --key-counts) KEY_COUNTS=${2:-}; shift 2 ;;
    --binary) BINARY=${2:-}; shift 2 ;;
    --record) RECORD=1; shift ;;
    *) usage >&2; die "unknown option: $opt" ;;
  esac
done
[[ $MODE == workers2 || $MODE == keys ]] || die "--modes workers2 or --modes keys (each runs alone)"
if [[ $MODE == workers2 ]]; then
  : "${ROUNDS:=2}" "${DURATION:=5}" "${THREADS:=2}"
  SYSTEMS=(direct nginx haproxy sluice-memory sluice-redis)
else
  : "${ROUNDS:=1}" "${DURATION:=4}" "${THREADS:=1}"
  SYSTEMS=(nginx sluice-memory sluice-redis)
fi
for v in ROUNDS DURATION CONNS THREADS WARMUP WARM_SECONDS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "${v,,} must be a whole number (got '${!v}')"
done
((ROUNDS >= 1 && DURATION >= 1 && THREADS >= 1 && CONNS >= THREADS)) ||
  die "rounds, seconds >= 1 and connections >= threads >= 1"
IFS=, read -r -a COUNTS <<<"$KEY_COUNTS"
MAX_KEYS=10000
for k in "${COUNTS[@]}"; do
  if ! [[ $k =~ ^[1-9][0-9]*$ ]]; then die "--key-counts: '$k' is not a positive whole number"; fi
  ((k > MAX_KEYS)) && MAX_KEYS=$k
done
[[ -x $BINARY ]] || die "$BINARY is not built: run \`cmake --build build -j$(nproc)\`"
for t in wrk nginx haproxy redis-server redis-cli taskset curl; do
  command -v "$t" >/dev/null || die "$t is missing (bench/compare.sh installs it)"
done

if [[ -z ${COMPARE_SCALE_GUARDED:-} ]]; then
  if [[ $MODE == workers2 ]]; then
    budget=$((120 + ${#SYSTEMS[@]} * (ROUNDS * (DURATION + 4) + WARMUP + 4)))
  else
    budget=$((180 + ${#SYSTEMS[@]} * ${#COUNTS[@]} * (WARM_SECONDS + DURATION + 10)))
  fi
  export COMPARE_SCALE_GUARDED=1
  exec timeout -k 15 $((budget + budget / 4)) "$ROOT/bench/compare-scale.sh" "${ORIG_ARGS[@]}"
fi

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
BENCH_WORK="$(mktemp -d -t sluice-compare-scale.XXXXXX)"
chmod 755 "$BENCH_WORK" # nginx's workers run as nobody and need to reach their temp dirs
OUT=$BENCH_WORK
BENCH_PIDS=()
trap 'bench_guarded_exit compare-scale' EXIT

read -r -a CPUS <<<"$(bench_cpus)"
((${#CPUS[@]} >= 2)) || die "these modes need 2 CPUs"
ALL_CPUS=$(IFS=,; echo "${CPUS[*]}")
if [[ $MODE == workers2 ]]; then
  LOAD=(taskset -c "$ALL_CPUS") SUT_CPUS=$ALL_CPUS N=2
else
  LOAD=(taskset -c "${CPUS[0]}") SUT_CPUS=${CPUS[1]} N=1
fi
declare -A PID PORT ADMIN
start() { # name command...: in the background, output to $OUT/<name>.log
  local name=$1
  shift
  "$@" >"$OUT/$name.log" 2>&1 &
  PID[$name]=$!
  BENCH_PIDS+=("$!")
}
listening() { # name: until PORT[name] accepts, while PID[name] lives
  bench_wait_port "${PORT[$1]}" "${PID[$1]}" "$OUT/$1.log" || die "$1 never listened on 127.0.0.1:${PORT[$1]}"
}

# Limits never reached. keys: state kept for an hour per key (sluice 1/1h, nginx 1r/m).
if [[ $MODE == keys ]]; then
  NGINX_RATE="1r/m" SLUICE_RATE="1/1h"
  # limit_req keeps ~64-128 bytes per key (a 128-byte slab with these keys): 1 GiB holds 5M.
  ZONE_MB=$(((MAX_KEYS * 160 + 1048575) / 1048576 + 16))
else
  NGINX_RATE="1000000r/s" SLUICE_RATE="1000000/1s" ZONE_MB=16
fi
BURST=1000000

PORT[upstream]=$(bench_free_port)
mkdir -p "$OUT/upstream-tmp"
bench_fill "$TPL/upstream-nginx.conf" "$OUT/upstream.conf" DIR="$OUT" PORT="${PORT[upstream]}"
start upstream "${LOAD[@]}" nginx -e "$OUT/upstream-error.log" -c "$OUT/upstream.conf" -p "$OUT"
PORT[direct]=${PORT[upstream]}
PORT[redis]=$(bench_free_port)
start redis taskset -c "$SUT_CPUS" redis-server --port "${PORT[redis]}" --bind 127.0.0.1 --save "" \
  --appendonly no --dir "$OUT" --logfile "$OUT/redis-server.log"

PORT[nginx]=$(bench_free_port)
mkdir -p "$OUT/nginx-limit-tmp"
bench_fill "$TPL/nginx-limit.conf" "$OUT/nginx-limit.conf" DIR="$OUT" PORT="${PORT[nginx]}" \
  UPSTREAM_PORT="${PORT[upstream]}" NGINX_RATE="$NGINX_RATE" NGINX_BURST="$BURST"
sed -i -e "s/^worker_processes 1;/worker_processes $N;/" -e "s/zone=per_key:16m/zone=per_key:${ZONE_MB}m/" \
  "$OUT/nginx-limit.conf"
start nginx taskset -c "$SUT_CPUS" nginx -e "$OUT/nginx-limit-error.log" -c "$OUT/nginx-limit.conf" -p "$OUT"

if [[ $MODE == workers2 ]]; then
  PORT[haproxy]=$(bench_free_port)
  bench_fill "$TPL/haproxy.cfg" "$OUT/haproxy.cfg" PORT="${PORT[haproxy]}" \
    UPSTREAM_PORT="${PORT[upstream]}" HAPROXY_RATE=1000000
  sed -i "s/^  nbthread 1$/  nbthread $N/" "$OUT/haproxy.cfg"
  haproxy -c -q -f "$OUT/haproxy.cfg" || die "haproxy refuses its config"
  start haproxy taskset -c "$SUT_CPUS" haproxy -db -f "$OUT/haproxy.cfg"
fi
listening upstream
listening redis

# sluice: compare.sh's template with N workers and 10,000 listed API keys (workers2), or keyed on
# the X-API-Key header itself with no key list (keys: millions of keys).
for s in sluice-memory sluice-redis; do
  PORT[$s]=$(bench_free_port) ADMIN[$s]=$(bench_free_port)
  if [[ $s == sluice-memory ]]; then store="{type: memory, max_buckets: $((MAX_KEYS + MAX_KEYS / 5))}"
  else store="{type: redis, address: 127.0.0.1:${PORT[redis]}, timeout: 50ms}"; fi
  bench_fill "$TPL/sluice.yaml" "$OUT/$s.yaml" PORT="${PORT[$s]}" ADMIN_PORT="${ADMIN[$s]}" \
    STORE="$store" HEADERS="[x-ratelimit, ietf]" UPSTREAM_PORT="${PORT[upstream]}" \
    SLUICE_RATE="$SLUICE_RATE" SLUICE_BURST="$BURST" LIMIT_NAME="${s//-/_}" EXTRA=""
  sed -i "s/^workers: 1$/workers: $N/" "$OUT/$s.yaml"
  if [[ $MODE == keys ]]; then
    sed -i -e 's/by: api_key,/by: "header:X-API-Key",/' -e 's/unknown_key: reject/unknown_key: anonymous/' "$OUT/$s.yaml"
  else
    awk 'BEGIN { print "api_keys:"; for (i = 0; i < 10000; i++) printf "  key-%d: bench\n", i }' >>"$OUT/$s.yaml"
  fi
  "$BINARY" --check-config "$OUT/$s.yaml" >/dev/null || die "sluice refuses $OUT/$s.yaml"
  start "$s" taskset -c "$SUT_CPUS" "$BINARY" --config "$OUT/$s.yaml" --no-watch --log-level warn
done
for s in "${SYSTEMS[@]}"; do [[ $s == direct ]] || listening "$s"; done
metric_sum() { # system decision: sum of sluice_requests_total{decision=...} over routes
  curl -s --max-time 5 "http://127.0.0.1:${ADMIN[$1]}/metrics" |
    awk -v d="decision=\"$2\"" '/^sluice_requests_total\{/ && index($0, d) { s += $NF } END { printf "%.0f\n", s }'
}
gauge() { # system name: a metric without labels
  curl -s --max-time 5 "http://127.0.0.1:${ADMIN[$1]}/metrics" | awk -v m="$2" '$1 == m { printf "%.0f\n", $2 }'
}
for s in sluice-memory sluice-redis; do
  for _ in $(seq 100); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${ADMIN[$s]}/readyz") == 200 ]] && break
    sleep 0.1
  done
done
for s in "${SYSTEMS[@]}"; do
  c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "X-API-Key: key-1" "http://127.0.0.1:${PORT[$s]}/")
  [[ $c == 200 ]] || { tail -20 "$OUT/$s.log" >&2 || true; die "$s answers $c to a first request"; }
done
# Every thread of every process on its CPUs (sluice's workers and Redis's threads started after
# taskset ran, but inherit it; nginx's workers are forked from the pinned master).
for s in "${SYSTEMS[@]}" redis; do
  [[ $s == direct ]] && continue
  for p in $(bench_tree_pids "${PID[$s]}"); do taskset -a -p -c "$SUT_CPUS" "$p" >/dev/null; done
done

CLK_TCK=$(getconf CLK_TCK)
used_memory() { redis-cli -p "${PORT[redis]}" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'; }
redis_cpu_ticks() { bench_tree_ticks "${PID[redis]}"; }
# wrk_run system seconds output keys [pick] [start]: compare.sh's wrk script, keys key-0 .. key-(keys-1)
wrk_run() {
  COMPARE_KEYS=$4 COMPARE_PICK=${5:-} COMPARE_START=${6:-0} COMPARE_THREADS=$THREADS \
    "${LOAD[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${2}s" --timeout 2s -s "$TPL/wrk.lua" \
    "http://127.0.0.1:${PORT[$1]}/" >"$3" 2>&1 || { cat "$3" >&2; die "wrk failed against $1"; }
}
cmp_field() { awk -v k="$2" '$1 == "cmp" && $2 == k { print $3 }' "$1"; } # file name
cmp_p99() { awk '$1 == "cmp" && $2 == "lat" && $3 == "99" { print $4 }' "$1"; }

RESULTS="$OUT/results.tsv"
: >"$RESULTS"
# measure system label keys pick: one run; a line of RESULTS:
# label system req/s requests non2xx sockerr p50us p99us proxy-µs/req redis-µs/req
measure() {
  local s=$1 label=$2 keys=$3 pick=$4 f="$OUT/run.$1.$2.txt" t0 t1 r0=0 r1=0 a0=0 a1=0 n non2xx sock
  t0=0 t1=0
  [[ $s == direct ]] || t0=$(bench_tree_ticks "${PID[$s]}")
  [[ $s == sluice-redis ]] && r0=$(redis_cpu_ticks)
  [[ $s == sluice-* ]] && a0=$(metric_sum "$s" allowed)
  wrk_run "$s" "$DURATION" "$f" "$keys" "$pick"
  [[ $s == direct ]] || t1=$(bench_tree_ticks "${PID[$s]}")
  [[ $s == sluice-redis ]] && r1=$(redis_cpu_ticks)
  [[ $s == sluice-* ]] && a1=$(metric_sum "$s" allowed)
  n=$(cmp_field "$f" requests) non2xx=$(cmp_field "$f" non2xx)
  sock=$(awk '$1 == "cmp" && $2 == "socket_errors" { print $3 + $4 + $5 + $6 }' "$f")
  [[ -n $n ]] || { cat "$f" >&2; die "$s: no wrk summary"; }
  ((n > 0)) || die "$s ($label): wrk counted no request"
  ((non2xx < n)) || die "$s ($label): no request answered 2xx ($non2xx of $n)"
  [[ $s != sluice-* ]] || ((a1 - a0 > 0)) || die "$s ($label): sluice counted no limiter decision"
  awk -v l="$label" -v s="$s" -v rps="$(cmp_field "$f" rps)" -v n="$n" -v e="$non2xx" -v so="$sock" \
    -v p50="$(awk '$1 == "cmp" && $2 == "lat" && $3 == "50" { print $4 }' "$f")" -v p99="$(cmp_p99 "$f")" \
    -v c=$((t1 - t0)) -v rc=$((r1 - r0)) -v tck="$CLK_TCK" -v direct="$([[ $s == direct ]] && echo 1 || echo 0)" \
    -v redis="$([[ $s == sluice-redis ]] && echo 1 || echo 0)" 'BEGIN {
      printf "%s\t%s\t%.0f\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", l, s, rps, n, e, so, p50, p99,
        direct ? "NA" : sprintf("%.1f", c * 1e6 / tck / n), redis ? sprintf("%.1f", rc * 1e6 / tck / n) : "NA" }' >>"$RESULTS"
  tail -1 "$RESULTS" | awk -F'\t' '{ printf "  [%s] %-14s %8.0f req/s  p99 %6.2f ms  cpu %s µs/req  redis %s µs/req  non-2xx %s  socket errors %s\n", $1, $2, $3, $8 / 1000, $9, $10, $5, $6 }' >&2
}

START_DATE=$(date -u +%Y-%m-%d)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
VERSION=$("$BINARY" --version | awk 'NR == 1 { print $2 }')
REPORT="$OUT/report.md"

if [[ $MODE == workers2 ]]; then
  echo "workers2: warm-up ${WARMUP}s per system, then $ROUNDS round(s) of ${DURATION}s per system" >&2
  if ((WARMUP > 0)); then for s in "${SYSTEMS[@]}"; do wrk_run "$s" "$WARMUP" "$OUT/warm.txt" 10000; done; fi
  for ((r = 1; r <= ROUNDS; r++)); do
    for s in "${SYSTEMS[@]}"; do measure "$s" "round $r" 10000 ""; sleep 1; done
  done
  LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
  {
    echo "## Two workers on two cores — \`bench/compare.sh ${ORIG_ARGS[*]}\` ($START_DATE)"
    echo
    echo "All on loopback on one $(nproc)-core machine, **no pinning**: wrk (-t$THREADS -c$CONNS, ${DURATION}s runs)," \
      "the upstream (Debian's nginx $(nginx -v 2>&1 | sed 's|.*/||'), 1 worker, a \`200\` with a 3-byte body)," \
      "the system under test and Redis share both cores. nginx + limit_req with \`worker_processes 2\`" \
      "(\`limit_req_zone \$http_x_api_key\`, upstream \`keepalive\`); HAProxy $(haproxy -v | awk 'NR == 1 { print $3 }')" \
      "with \`nbthread 2\` (its stick-table on \`req.hdr(X-API-Key)\` storing \`http_req_rate(1s)\` and the deny" \
      "rule of compare.sh's template); sluice $VERSION with \`workers: 2\`, a token bucket per" \
      "API key, on the memory store and on redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')." \
      "wrk sends \`key-0\` .. \`key-9999\` in turn; no limit is reached. Interleaved rounds after a ${WARMUP}s" \
      "warm-up each; each figure is the **median of $ROUNDS rounds**. CPU µs/req = utime + stime of the" \
      "process tree (/proc, CLK_TCK $CLK_TCK) ÷ requests. 1-, 5-, 15-minute load average: $LOAD_BEFORE before," \
      "$LOAD_AFTER after."
    echo
    echo "| system | req/s | req/s ÷ nginx | p50 ms | p99 ms | proxy CPU µs/req | Redis CPU µs/req | (proxy + Redis) CPU ÷ nginx | non-2xx | socket errors |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    awk -F'\t' '
      function med(k, c,   m, i, j, t, a) { m = n[k]; for (i = 1; i <= m; i++) { if (v[k, c, i] == "NA") return "NA"; a[i] = v[k, c, i] + 0 }
        for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
      { if (!($2 in n)) o[++no] = $2; c = ++n[$2]; for (f = 3; f <= 10; f++) v[$2, f, c] = $f; e[$2] += $5; so[$2] += $6 }
      END {
        nr = med("nginx", 3); nc = med("nginx", 9)
        for (i = 1; i <= no; i++) { k = o[i]; cpu = med(k, 9); rc = med(k, 10)
          both = cpu == "NA" ? "NA" : cpu + (rc == "NA" ? 0 : rc)
          printf "| %s | %.0f | %.2f | %.2f | %.2f | %s | %s | %s | %d | %d |\n", k, med(k, 3), med(k, 3) / nr,
            med(k, 7) / 1000, med(k, 8) / 1000, cpu == "NA" ? "—" : sprintf("%.1f", cpu), rc == "NA" ? "—" : sprintf("%.1f", rc),
            both == "NA" ? "—" : sprintf("%.2f", both / nc), e[k], so[k] } }' "$RESULTS"
  } >"$REPORT"
else
  echo "keys: counts ${KEY_COUNTS}; per system and count a warm-up walk of at most ${WARM_SECONDS}s, then ${DURATION}s of random keys" >&2
  MEM="$OUT/memory.tsv"
  : >"$MEM"
  for s in "${SYSTEMS[@]}"; do
    walked=0
    for k in "${COUNTS[@]}"; do
      # Warm-up: walk the keys in turn from where the last walk stopped, until all k were
      # walked or --warm-seconds ran out (a 10,000-key count needs about a second).
      if ((walked < k && WARM_SECONDS > 0)); then
        secs=$(awk -v need=$((k - walked)) -v max="$WARM_SECONDS" 'BEGIN { s = int(need / 20000) + 1; print (s < max ? s : max) }')
        wrk_run "$s" "$secs" "$OUT/warm.txt" "$k" "" "$walked"
        walked=$((walked + $(cmp_field "$OUT/warm.txt" requests)))
        ((walked > k)) && walked=$k
      fi
      measure "$s" "$k" "$k" random
      buckets=NA
      [[ $s == sluice-memory ]] && buckets=$(gauge "$s" sluice_store_buckets)
      rm=NA
      [[ $s == sluice-redis ]] && rm=$(used_memory)
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$s" "$k" "$walked" "$(bench_tree_rss_kb "${PID[$s]}")" "$buckets" "$rm" >>"$MEM"
      tail -1 "$MEM" | awk -F'\t' '{ printf "  [%s keys] %s: walked %s, RSS %.0f MiB, buckets %s, Redis used_memory %s\n", $2, $1, $3, $4 / 1024, $5, $6 }' >&2
    done
  done
  LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
  {
    echo "## The cost of more keys — \`bench/compare.sh ${ORIG_ARGS[*]}\` ($START_DATE)"
    echo
    echo "All on loopback on one $(nproc)-core machine, pinned: wrk (-t$THREADS -c$CONNS) and the upstream" \
      "(Debian's nginx, 1 worker, a \`200\` with a 3-byte body) on CPU ${CPUS[0]}; the system under test and Redis" \
      "on CPU ${CPUS[1]}. Each request's \`X-API-Key\` is picked at random from \`key-0\` .. \`key-(N−1)\`." \
      "nginx + limit_req (1 worker, \`limit_req_zone \$http_x_api_key zone=per_key:${ZONE_MB}m rate=$NGINX_RATE\`," \
      "burst $BURST nodelay); sluice $VERSION (\`workers: 1\`, a token bucket \`by:" \
      "\"header:X-API-Key\"\`, rate $SLUICE_RATE, burst $BURST) on the memory store (\`max_buckets:" \
      "$((MAX_KEYS + MAX_KEYS / 5))\`) and on redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')." \
      "No limit is reached and every key's state lives an hour, so the stores grow with the keys." \
      "Per system the counts run in increasing order on one server: before each count's run a warm-up walks" \
      "the keys in turn from where the previous walk stopped, for at most ${WARM_SECONDS}s; \"keys walked\"" \
      "is how many of the N keys had state when the ${DURATION}s measured run began (the run adds the keys it" \
      "picks that were not walked). RSS: PSS summed over the server's processes after the run; Redis" \
      "used_memory from \`INFO memory\`; buckets: sluice's \`sluice_store_buckets\`. CPU µs/req as in" \
      "compare.sh. 1-, 5-, 15-minute load average: $LOAD_BEFORE before, $LOAD_AFTER after."
    echo
    echo "| system | keys | keys walked | req/s | req/s ÷ its smallest count's | p50 ms | p99 ms | proxy CPU µs/req | Redis CPU µs/req | RSS MiB | memory-store buckets | Redis used_memory MiB | non-2xx | socket errors |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    awk -F'\t' 'NR == FNR { m[$1, $2] = $0; next }
      function th(x,   s, r) { s = sprintf("%.0f", x); r = ""; while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) } return s r }
      { split(m[$2, $1], q, "\t"); if (!($2 in base)) base[$2] = $3
        printf "| %s | %s | %s | %s | %.2f | %.2f | %.2f | %s | %s | %.0f | %s | %s | %d | %d |\n", $2, th($1), th(q[3]), th($3),
          $3 / base[$2], $7 / 1000, $8 / 1000, $9 == "NA" ? "—" : $9, $10 == "NA" ? "—" : $10, q[4] / 1024,
          q[5] == "NA" ? "—" : th(q[5]), q[6] == "NA" ? "—" : sprintf("%.0f", q[6] / 1048576), $5, $6 }' "$MEM" "$RESULTS"
  } >"$REPORT"
fi
cat "$REPORT"
if ((RECORD)); then
  { echo; cat "$REPORT"; } >>bench/RESULTS.md
  echo "appended to bench/RESULTS.md" >&2
fi
