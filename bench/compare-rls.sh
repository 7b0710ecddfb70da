#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/compare.sh --modes rls: sluice as Envoy's rate limit service against sluice's own proxy
# path, for the same limits on one redis-server, all on loopback, pinned (the load generator
# and the upstream on the first CPU, sluice and Redis on the second):
#   rls-1, rls-3      h2load -> ShouldRateLimit (unary gRPC over h2c) with 1 and 3 descriptors,
#                     each descriptor charged to its own token bucket
#   proxy-1, proxy-3  wrk -> sluice's proxy -> upstream, a route with 1 and 3 such limits
# Every call and request uses one key (h2load sends one body), every limit is far above what it
# is offered, so every decision admits. Rounds are interleaved; figures are medians.
# Exits non-zero when a run measured nothing (no call succeeded, or sluice counted fewer gRPC OK
# answers than h2load's successes).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

ROUNDS=3
DURATION=3
CONNS=50
STREAMS=1
WARMUP=1
BINARY="build/sluice"
RECORD=0
ORIG_ARGS=("$@")
usage() {
  cat <<'EOF'
Usage: bench/compare.sh --modes rls [options]    (or bench/compare-rls.sh [options])

  --rounds N        interleaved rounds (default 3); figures are medians
  --seconds S       one run's duration (default 3)
  --connections C   h2load and wrk connections (default 50)
  --streams M       h2load streams per connection (default 1)
  --warmup S        unrecorded load per system before the rounds (default 1)
  --binary PATH     the gateway (default build/sluice)
  --record          append the report as a dated section to bench/RESULTS.md
EOF
}
die() { echo "compare-rls: $*" >&2; exit 1; }
while (($#)); do
  opt=$1
  if [[ $opt == --*=* ]]; then set -- "${opt%%=*}" "${opt#*=}" "${@:2}"; opt=$1; fi
  case $opt in
    -h | --help) usage; exit 0 ;;
    --modes) [[ ${2:-} == rls ]] || die "--modes rls runs alone"; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) DURATION=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --streams) STREAMS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --binary) BINARY=$2; shift 2 ;;
    --record) RECORD=1; shift ;;
    *) usage >&2; die "unknown option: $opt" ;;
  esac
done
for v in ROUNDS DURATION CONNS STREAMS WARMUP; do [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number"; done
((ROUNDS >= 1 && DURATION >= 1 && CONNS >= 1 && STREAMS >= 1)) || die "rounds, seconds, connections, streams must be >= 1"
[[ -x $BINARY ]] || die "$BINARY is not built: run \`cmake --build build -j$(nproc)\`"
PY=/usr/bin/python3
"$PY" -c 'import google.protobuf' 2>/dev/null || die "Debian's python3-protobuf is missing (scripts/setup)"
for t in h2load wrk protoc redis-server nginx taskset; do command -v "$t" >/dev/null || die "$t is missing (bench/compare.sh installs it)"; done

BENCH_WORK="$(mktemp -d -t sluice-compare-rls.XXXXXX)"
chmod 755 "$BENCH_WORK"
BENCH_PIDS=()
trap bench_cleanup EXIT
OUT=$BENCH_WORK

read -r -a CPUS <<<"$(bench_cpus)"
((${#CPUS[@]} >= 2)) || die "pinned runs need 2 CPUs"
LOAD=(taskset -c "${CPUS[0]}")

# The upstream (Debian's nginx answering 200, compare.sh's template), Redis, sluice.
UP_PORT=$(bench_free_port)
mkdir -p "$OUT/upstream-tmp"
bench_fill bench/compare/upstream-nginx.conf "$OUT/upstream.conf" DIR="$OUT" PORT="$UP_PORT"
"${LOAD[@]}" nginx -e "$OUT/upstream-error.log" -c "$OUT/upstream.conf" -p "$OUT" >"$OUT/upstream.log" 2>&1 &
UP_PID=$!
BENCH_PIDS+=("$UP_PID")
bench_redis redis
PORT=$(bench_free_port) ADMIN=$(bench_free_port) RLS=$(bench_free_port)
bench_fill bench/compare/sluice-rls.yaml "$OUT/sluice.yaml" PORT="$PORT" ADMIN_PORT="$ADMIN" RLS_PORT="$RLS" \
  REDIS_PORT="$REDIS_PORT" UPSTREAM_PORT="$UP_PORT"
"$BINARY" --check-config "$OUT/sluice.yaml" >/dev/null || die "sluice refuses $OUT/sluice.yaml"
"$BINARY" --config "$OUT/sluice.yaml" --no-watch --log-level warn >"$OUT/sluice.log" 2>&1 &
SLUICE_PID=$!
BENCH_PIDS+=("$SLUICE_PID")
bench_wait_port "$UP_PORT"
bench_wait_port "$RLS" "$SLUICE_PID" || { tail "$OUT/sluice.log" >&2; die "sluice's rate limit service never listened"; }
for p in $(cat /proc/"$SLUICE_PID"/task/*/children 2>/dev/null) "$SLUICE_PID" "$REDIS_PID"; do
  taskset -a -p -c "${CPUS[1]}" "$p" >/dev/null
done

# The gRPC request bodies: a length-prefixed RateLimitRequest (0, 4-byte big-endian length,
# the message), from message classes protoc makes from the project's proto/.
mkdir -p "$OUT/py"
protoc -I proto --python_out="$OUT/py" envoy/service/ratelimit/v3/rls.proto \
  envoy/config/core/v3/base.proto envoy/extensions/common/ratelimit/v3/ratelimit.proto
"$PY" - "$OUT" <<'PY'
import struct, sys
sys.path.insert(0, sys.argv[1] + "/py")
from envoy.service.ratelimit.v3 import rls_pb2
for n in (1, 3):
    req = rls_pb2.RateLimitRequest(domain="bench")
    for i in range(1, n + 1):
        e = req.descriptors.add().entries.add()
        e.key, e.value = f"user{i}", "key-1"
    body = req.SerializeToString()
    with open(f"{sys.argv[1]}/rls-{n}.bin", "wb") as f:
        f.write(struct.pack(">BI", 0, len(body)) + body)
PY

rls_ok() { # sluice_rls_calls_total{result="ok"}
  curl -s --max-time 5 "http://127.0.0.1:$ADMIN/metrics" |
    awk '/^sluice_rls_calls_total\{result="ok"\}/ { printf "%.0f\n", $NF }'
}
allowed() { # sum of sluice_requests_total{decision="allowed"}
  curl -s --max-time 5 "http://127.0.0.1:$ADMIN/metrics" |
    awk '/^sluice_requests_total\{/ && /decision="allowed"/ { s += $NF } END { printf "%.0f\n", s }'
}
h2load_run() { # descriptors seconds output: h2load's log of every request in output.log
  "${LOAD[@]}" h2load -c "$CONNS" -m "$STREAMS" -D "$2" -t 1 --log-file="$3.log" \
    -H 'content-type: application/grpc' -H 'te: trailers' -d "$OUT/rls-$1.bin" \
    "http://127.0.0.1:$RLS/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" >"$3" 2>&1 ||
    { cat "$3" >&2; die "h2load failed"; }
}
wrk_run() { # limits seconds output
  "${LOAD[@]}" wrk -t1 -c"$CONNS" -d"${2}s" --timeout 2s --latency -H 'X-API-Key: key-1' \
    "http://127.0.0.1:$PORT/limits-$1" >"$3" 2>&1 || { cat "$3" >&2; die "wrk failed"; }
}
for n in 1 3; do
  c=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-API-Key: key-1' "http://127.0.0.1:$PORT/limits-$n")
  [[ $c == 200 ]] || { tail "$OUT/sluice.log" >&2; die "the proxy answers $c on /limits-$n"; }
done
if ((WARMUP > 0)); then
  for n in 1 3; do h2load_run "$n" "$WARMUP" "$OUT/warm"; wrk_run "$n" "$WARMUP" "$OUT/warm"; done
fi

CLK_TCK=$(getconf CLK_TCK)
RESULTS="$OUT/results.tsv"
: >"$RESULTS"
run_one() { # system round: one line of RESULTS (system round calls/s calls p99-µs sluice-µs redis-µs)
  local s=$1 f="$OUT/$1.$2.txt" kind=${1%-*} n=${1#*-} s0 r0 s1 r1 m0 m1 calls rate p99
  s0=$(bench_tree_ticks "$SLUICE_PID") r0=$(bench_tree_ticks "$REDIS_PID")
  if [[ $kind == rls ]]; then m0=$(rls_ok); h2load_run "$n" "$DURATION" "$f"; m1=$(rls_ok)
  else m0=$(allowed); wrk_run "$n" "$DURATION" "$f"; m1=$(allowed); fi
  s1=$(bench_tree_ticks "$SLUICE_PID") r1=$(bench_tree_ticks "$REDIS_PID")
  if [[ $kind == rls ]]; then
    # "requests: N total, N started, N done, S succeeded, ...": S answered 2xx; sluice's own
    # count of gRPC OK answers must have grown by as many (a 200 may carry a gRPC error).
    calls=$(awk '/^requests:/ { for (i = 1; i <= NF; i++) if ($(i + 1) ~ /^succeeded/) print $i }' "$f")
    rate=$(awk '/^finished in/ { print $4 }' "$f")
    p99=$(bench_h2load_percentiles "$f.log" 99)
    [[ ${calls:-0} -gt 0 ]] || { cat "$f" >&2; die "$s: no call succeeded"; }
    ((m1 - m0 >= calls)) || die "$s: h2load counted $calls successes, sluice $((m1 - m0)) gRPC OK answers"
  else
    calls=$(awk '/requests in/ { print $1 }' "$f")
    rate=$(awk '/^Requests\/sec:/ { print $2 }' "$f")
    p99=$(awk '$1 == "99%" { v = $2; u = 1; if (v ~ /ms$/) u = 1000; else if (v ~ /us$/) u = 1; else if (v ~ /s$/) u = 1e6; sub(/[a-z]+$/, "", v); print v * u }' "$f")
    ! grep -q 'Non-2xx' "$f" || { cat "$f" >&2; die "$s: non-2xx answers"; }
    ((m1 - m0 >= calls)) || die "$s: wrk counted $calls requests, sluice $((m1 - m0)) decisions"
  fi
  awk -v s="$s" -v r="$2" -v rate="$rate" -v n="$calls" -v p99="$p99" -v tck="$CLK_TCK" \
    -v sc=$((s1 - s0)) -v rc=$((r1 - r0)) \
    'BEGIN { printf "%s\t%s\t%s\t%d\t%s\t%.2f\t%.2f\n", s, r, rate, n, p99, sc * 1e6 / tck / n, rc * 1e6 / tck / n }' >>"$RESULTS"
  tail -1 "$RESULTS" | awk -F'\t' '{ printf "  [round %s] %-8s %9.0f /s  p99 %6.2f ms  sluice %s µs  redis %s µs per decision\n", $2, $1, $3, $5 / 1000, $6, $7 }' >&2
}
SYSTEMS=(rls-1 proxy-1 rls-3 proxy-3)
START_DATE=$(date -u +%Y-%m-%d)
LOADAVG=$(cut -d' ' -f1 /proc/loadavg)
for ((r = 1; r <= ROUNDS; r++)); do
  for s in "${SYSTEMS[@]}"; do run_one "$s" "$r"; sleep 1; done
done

git_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain -- src include lua 2>/dev/null) ]] && git_rev+=" + uncommitted changes"
REPORT="$OUT/report.md"
{
  echo "## The rate limit service against the proxy path — \`bench/compare.sh ${ORIG_ARGS[*]}\` ($START_DATE)"
  echo
  echo "sluice $("$BINARY" --version | awk 'NR == 1 { print $2 }') (build $git_rev, \`workers: 1\`) on redis-server" \
    "$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), both pinned to CPU ${CPUS[1]}; the load generator and the" \
    "upstream (Debian's nginx, a 200 with a 3-byte body) on CPU ${CPUS[0]}. rls-N: h2load" \
    "($(h2load --version 2>&1 | awk 'NR == 1 { print $2 }'), -c$CONNS -m$STREAMS, h2c) calling" \
    "\`ShouldRateLimit\` with N descriptors, each charged to its own token bucket (one store round trip" \
    "decides the N); proxy-N: wrk (-c$CONNS, --latency) through sluice's proxy on a route with the same N" \
    "limits. One key throughout, no limit reached. ${DURATION}s runs, $ROUNDS interleaved rounds" \
    "(medians), after ${WARMUP}s of warm-up each. p99: h2load's per-request log / wrk's --latency." \
    "CPU per decision: utime + stime of the process tree (CLK_TCK $CLK_TCK) ÷ calls; decisions/s per core" \
    "= 10^6 ÷ (sluice + Redis µs per decision). Load average before the runs: $LOADAVG."
  echo
  echo "| system | calls/s | p99 ms | sluice CPU µs/decision | Redis CPU µs/decision | decisions/s per core (sluice + Redis) |"
  echo "|---|---|---|---|---|---|"
  awk -F'\t' '
    function med(k, c,   m, i, j, t, a) { m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, c, i] + 0
      for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
    { if (!($1 in n)) o[++no] = $1; c = ++n[$1]; for (f = 3; f <= 7; f++) v[$1, f, c] = $f }
    END { for (i = 1; i <= no; i++) { k = o[i]; s = med(k, 6); r = med(k, 7)
      printf "| %s | %.0f | %.2f | %.1f | %.1f | %.0f |\n", k, med(k, 3), med(k, 5) / 1000, s, r, ((s + r) > 0 ? 1e6 / (s + r) : 0) } }' "$RESULTS"
} >"$REPORT"
cat "$REPORT"
if ((RECORD)); then
  { echo; cat "$REPORT"; } >>bench/RESULTS.md
  echo "appended to bench/RESULTS.md" >&2
fi
