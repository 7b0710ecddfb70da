#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/compare.sh --modes h2: HTTP/2 from clients, h2load against three rate-limiting proxies in
# front of the upstream the HTTP/1.1 modes use (Debian's nginx, 1 worker, a 200 with a 3-byte
# body), all on loopback, pinned as compare.sh's pinned mode (h2load and the upstream on the
# first CPU, the system under test and Redis on the second):
#   nginx          nginx (1 worker, `listen ... http2`, limit_req per API key, upstream keepalive)
#   sluice-memory  sluice (1 worker, `http2: true`, memory store, a token bucket per API key)
#   sluice-redis   the same on redis-server
# each over TLS (h2 by ALPN, a throwaway self-signed certificate made in the temp dir) and h2c
# (prior knowledge), with 1 and 10 streams per connection (h2load -m). h2load sends one set of
# headers, so the API key rides in the URI (`/?api_key=key-N`, the 10,000 keys of the HTTP/1.1
# modes, one URI per key, each connection walking through them); every limit is far above what
# a key is offered, so every request is checked and admitted. Rounds are interleaved; figures
# are medians. Exits non-zero when a run measured nothing: a server that never listened, a
# first request not answered 200, no 2xx in a run, the wrong protocol negotiated, or a sluice
# that counted fewer admissions than h2load's 2xx answers.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=bench/lib.sh
source bench/lib.sh

ROUNDS=3
DURATION=3
CONNS=10
STREAMS="1,10"
TRANSPORTS="tls,h2c"
SYSTEMS="nginx,sluice-memory,sluice-redis"
WARMUP=1
KEYS=10000
QUOTA_HEADERS=1
PROFILE=0
BINARY="build/sluice"
RECORD=0
ORIG_ARGS=("$@")
usage() {
  cat <<'EOF'
Usage: bench/compare.sh --modes h2 [options]    (or bench/compare-h2.sh [options])

h2load against nginx (http2, limit_req) and sluice (http2: true) on the memory store and on
Redis, over TLS (ALPN h2) and h2c (prior knowledge), with 1 and 10 streams per connection; prints
per case the median over the rounds of requests/s, p50/p99, CPU µs per request of the proxy and
of Redis (utime + stime from /proc/<pid>/stat), and the ratios to nginx.

  --rounds N          interleaved rounds (default 3); figures are medians
  --seconds S         one h2load run's duration (default 3)
  --connections C     h2load connections (default 10: 10 and 100 streams in flight)
  --streams LIST      h2load -m values, comma-separated (default 1,10)
  --transports LIST   from tls,h2c (default both)
  --systems LIST      from nginx,sluice-memory,sluice-redis (default all; ratios need nginx)
  --warmup S          unrecorded load per system and transport before the rounds (default 1)
  --keys N            distinct API keys (default 10000)
  --no-quota-headers  run sluice with `headers: []` (nginx sends no rate-limit fields either)
  --profile S         after the rounds, `perf record` sluice-memory for S seconds under h2load
                      h2c at the largest --streams, and report its 10 hottest symbols
  --binary PATH       the gateway (default build/sluice)
  --record            append the report as a dated section to bench/RESULTS.md

Bounded: each h2load run has -D; the whole script runs under `timeout` (a budget computed from
the options); every process it starts is stopped by pid on exit, and its temp dir removed.
EOF
}
die() { echo "compare-h2: $*" >&2; exit 1; }
while (($#)); do
  opt=$1
  if [[ $opt == --*=* ]]; then set -- "${opt%%=*}" "${opt#*=}" "${@:2}"; opt=$1; fi
  case $opt in
    -h | --help) usage; exit 0 ;;
    --modes) [[ ${2:-} == h2 ]] || die "--modes h2 runs alone"; shift 2 ;;
    --rounds) ROUNDS=${2:-}; shift 2 ;;
    --seconds) DURATION=${2:-}; shift 2 ;;
    --connections) CONNS=${2:-}; shift 2 ;;
    --streams) STREAMS=${2:-}; shift 2 ;;
    --transports) TRANSPORTS=${2:-}; shift 2 ;;
    --systems) SYSTEMS=${2:-}; shift 2 ;;
    --warmup) WARMUP=${2:-}; shift 2 ;;
    --keys) KEYS=${2:-}; shift 2 ;;
    --no-quota-headers) QUOTA_HEADERS=0; shift ;;
    --profile) PROFILE=${2:-}; shift 2 ;;
    --binary) BINARY=${2:-}; shift 2 ;;
    --record) RECORD=1; shift ;;
    *) usage >&2; die "unknown option: $opt" ;;
  esac
done
for v in ROUNDS DURATION CONNS WARMUP KEYS PROFILE; do [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number"; done
((ROUNDS >= 1 && DURATION >= 1 && DURATION <= 600 && CONNS >= 1 && KEYS >= 1)) ||
  die "rounds, connections and keys must be >= 1, seconds 1..600"
IFS=, read -r -a STREAM_LIST <<<"$STREAMS"
IFS=, read -r -a TRANSPORT_LIST <<<"$TRANSPORTS"
IFS=, read -r -a SYSTEM_LIST <<<"$SYSTEMS"
for m in "${STREAM_LIST[@]}"; do [[ $m =~ ^[0-9]+$ && $m -ge 1 && $m -le 100 ]] || die "--streams: $m is not 1..100"; done
for t in "${TRANSPORT_LIST[@]}"; do [[ $t =~ ^(tls|h2c)$ ]] || die "unknown transport: $t"; done
for s in "${SYSTEM_LIST[@]}"; do [[ $s =~ ^(nginx|sluice-memory|sluice-redis)$ ]] || die "unknown system: $s"; done
((${#STREAM_LIST[@]} && ${#TRANSPORT_LIST[@]} && ${#SYSTEM_LIST[@]})) || die "--streams, --transports and --systems must not be empty"
has_system() { [[ ,$SYSTEMS, == *,$1,* ]]; }
if has_system sluice-memory || has_system sluice-redis; then
  [[ -x $BINARY ]] || die "$BINARY is not built: run \`cmake --build build -j$(nproc)\`"
fi
for t in h2load nginx redis-server redis-cli openssl taskset curl; do
  command -v "$t" >/dev/null || die "$t is missing (bench/compare.sh installs it)"
done
((PROFILE == 0)) || command -v perf >/dev/null || die "--profile needs perf (Debian's linux-perf)"

# The overall time guard: every case of every round (run + 1 s pause + start/stop), the
# warm-ups, the profile and set-up.
ncases=$((${#SYSTEM_LIST[@]} * ${#TRANSPORT_LIST[@]} * ${#STREAM_LIST[@]}))
if [[ -z ${COMPARE_H2_GUARDED:-} ]]; then
  budget=$((120 + ncases * ROUNDS * (DURATION + 3) + ${#SYSTEM_LIST[@]} * ${#TRANSPORT_LIST[@]} * (WARMUP + 2) + PROFILE * 3))
  export COMPARE_H2_GUARDED=1
  exec timeout -k 15 "$budget" "$ROOT/bench/compare-h2.sh" "${ORIG_ARGS[@]}"
fi

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
BENCH_WORK="$(mktemp -d -t sluice-compare-h2.XXXXXX)"
chmod 755 "$BENCH_WORK" # nginx's workers run as nobody and need to reach their temp dirs
BENCH_PIDS=()
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
OUT=$BENCH_WORK

read -r -a CPUS <<<"$(bench_cpus)"
((${#CPUS[@]} >= 2)) || die "pinned runs need 2 CPUs"
LOAD=(taskset -c "${CPUS[0]}")
declare -A PID PORT ADMIN
start() { # name command...: in the background, output to $OUT/<name>.log
  local name=$1
  shift
  "$@" >"$OUT/$name.log" 2>&1 &
  PID[$name]=$!
  BENCH_PIDS+=("$!")
}
listening() { # name port: until it accepts a connection, or die naming the system
  bench_wait_port "$2" "${PID[$1]}" "$OUT/$1.log" || die "$1 never listened on 127.0.0.1:$2"
}

# A throwaway certificate for 127.0.0.1 (P-256, one day), shared by nginx and sluice.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$OUT/key.pem" -out "$OUT/cert.pem" \
  >"$OUT/openssl.log" 2>&1 || { cat "$OUT/openssl.log" >&2; die "openssl could not make a certificate"; }

# Limits no key reaches: every request is checked and admitted.
NGINX_RATE="1000000r/s" NGINX_BURST=1000000 SLUICE_RATE="1000000/1s" SLUICE_BURST=1000000
HEADERS_YAML="[x-ratelimit, ietf]"
((QUOTA_HEADERS)) || HEADERS_YAML="[]"

PORT[upstream]=$(bench_free_port)
mkdir -p "$OUT/upstream-tmp"
bench_fill bench/compare/upstream-nginx.conf "$OUT/upstream.conf" DIR="$OUT" PORT="${PORT[upstream]}"
start upstream "${LOAD[@]}" nginx -e "$OUT/upstream-error.log" -c "$OUT/upstream.conf" -p "$OUT"
listening upstream "${PORT[upstream]}"

# The systems under test, one listener per (system, transport): name system-transport.
INSTANCES=()
if has_system sluice-redis; then
  PORT[redis]=$(bench_free_port)
  start redis redis-server --port "${PORT[redis]}" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT"
  listening redis "${PORT[redis]}"
fi
if has_system nginx; then
  PORT[nginx-tls]=$(bench_free_port) PORT[nginx-h2c]=$(bench_free_port)
  mkdir -p "$OUT/nginx-h2-tmp"
  bench_fill bench/compare/nginx-h2.conf "$OUT/nginx-h2.conf" DIR="$OUT" TLS_PORT="${PORT[nginx-tls]}" \
    H2C_PORT="${PORT[nginx-h2c]}" UPSTREAM_PORT="${PORT[upstream]}" NGINX_RATE="$NGINX_RATE" NGINX_BURST="$NGINX_BURST"
  nginx -t -q -e "$OUT/nginx-h2-error.log" -c "$OUT/nginx-h2.conf" -p "$OUT" || die "nginx refuses its config"
  start nginx nginx -e "$OUT/nginx-h2-error.log" -c "$OUT/nginx-h2.conf" -p "$OUT"
  for t in "${TRANSPORT_LIST[@]}"; do
    PID[nginx-$t]=${PID[nginx]}
    listening nginx "${PORT[nginx-$t]}"
    INSTANCES+=("nginx-$t")
  done
fi
for s in sluice-memory sluice-redis; do
  has_system "$s" || continue
  store="{type: memory}"
  [[ $s == sluice-redis ]] && store="{type: redis, address: 127.0.0.1:${PORT[redis]}, timeout: 50ms}"
  for t in "${TRANSPORT_LIST[@]}"; do
    i=$s-$t
    PORT[$i]=$(bench_free_port) ADMIN[$i]=$(bench_free_port)
    tls="# h2c: no tls, HTTP/2 by prior knowledge"
    [[ $t == tls ]] && tls="tls: {certificates: [{cert: $OUT/cert.pem, key: $OUT/key.pem}]}"
    bench_fill bench/compare/sluice-h2.yaml "$OUT/$i.yaml" PORT="${PORT[$i]}" ADMIN_PORT="${ADMIN[$i]}" \
      TLS="$tls" STORE="$store" HEADERS="$HEADERS_YAML" UPSTREAM_PORT="${PORT[upstream]}" \
      SLUICE_RATE="$SLUICE_RATE" SLUICE_BURST="$SLUICE_BURST" LIMIT_NAME="${i//-/_}"
    awk -v n="$KEYS" 'BEGIN { print "api_keys:"; for (i = 0; i < n; i++) printf "  key-%d: bench\n", i }' >>"$OUT/$i.yaml"
    "$BINARY" --check-config "$OUT/$i.yaml" >/dev/null || die "sluice refuses $OUT/$i.yaml"
    start "$i" "$BINARY" --config "$OUT/$i.yaml" --no-watch --log-level warn
    listening "$i" "${PORT[$i]}"
    INSTANCES+=("$i")
  done
done
# The systems under test and Redis on the second CPU (every thread), the upstream on the first.
for n in "${!PID[@]}"; do
  [[ $n == upstream ]] && continue
  for p in $(cat /proc/"${PID[$n]}"/task/*/children 2>/dev/null) "${PID[$n]}"; do
    taskset -a -p -c "${CPUS[1]}" "$p" >/dev/null
  done
done

url() { # instance: its base URL
  local scheme=http
  [[ $1 == *-tls ]] && scheme=https
  echo "$scheme://127.0.0.1:${PORT[$1]}"
}
# One URI per key for h2load -i, per instance (the authority is the instance's).
for i in "${INSTANCES[@]}"; do
  awk -v base="$(url "$i")" -v n="$KEYS" 'BEGIN { for (k = 0; k < n; k++) printf "%s/?api_key=key-%d\n", base, k }' >"$OUT/uris.$i"
done
allowed() { # instance: sum of sluice_requests_total{decision="allowed"} (NA for nginx)
  [[ $1 == sluice-* ]] || { echo NA; return; }
  curl -s --max-time 5 "http://127.0.0.1:${ADMIN[$1]}/metrics" |
    awk '/^sluice_requests_total\{/ && /decision="allowed"/ { s += $NF } END { printf "%.0f\n", s }'
}
# A first request over HTTP/2 must be answered 200 (the key is known, the upstream answers).
for i in "${INSTANCES[@]}"; do
  if [[ $i == sluice-* ]]; then
    for _ in $(seq 100); do
      [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${ADMIN[$i]}/readyz") == 200 ]] && break
      sleep 0.1
    done
  fi
  want=--http2-prior-knowledge
  [[ $i == *-tls ]] && want=--http2
  c=$(curl -sk "$want" -o /dev/null -w '%{http_code} %{http_version}' --max-time 5 "$(url "$i")/?api_key=key-1")
  [[ $c == "200 2" ]] || { tail -20 "$OUT/${i%-*}.log" "$OUT/$i.log" >&2 2>/dev/null || true; die "$i answers '$c' (status, HTTP version) to a first HTTP/2 request"; }
done

h2load_run() { # instance streams seconds output: h2load's log of every request in output.log
  "${LOAD[@]}" h2load -c "$CONNS" -m "$2" -t 1 -D "$3" --log-file="$4.log" -i "$OUT/uris.$1" >"$4" 2>&1 ||
    { tail -20 "$4" >&2; die "h2load failed against $1"; }
  local want=h2c
  [[ $1 == *-tls ]] && want=h2
  grep -q "^Application protocol: $want\$" "$4" || { tail -20 "$4" >&2; die "$1: h2load did not speak $want"; }
}
if ((WARMUP > 0)); then
  for i in "${INSTANCES[@]}"; do h2load_run "$i" "${STREAM_LIST[-1]}" "$WARMUP" "$OUT/warm"; done
fi

CLK_TCK=$(getconf CLK_TCK)
RESULTS="$OUT/results.tsv"
: >"$RESULTS"
run_one() { # instance streams round: one line of RESULTS
  # instance streams round req/s 2xx non-2xx failed p50-µs p99-µs proxy-µs/req redis-µs/req
  local i=$1 m=$2 f="$OUT/run.$1.$2.$3" s0 r0=0 s1 r1=0 a0 a1 counts ok s2 other bad secs lat
  s0=$(bench_tree_ticks "${PID[$i]}") a0=$(allowed "$i")
  [[ $i == sluice-redis-* ]] && r0=$(bench_tree_ticks "${PID[redis]}")
  h2load_run "$i" "$m" "$DURATION" "$f"
  s1=$(bench_tree_ticks "${PID[$i]}") a1=$(allowed "$i")
  [[ $i == sluice-redis-* ]] && r1=$(bench_tree_ticks "${PID[redis]}")
  counts=$(bench_h2load_counts "$f")
  [[ -n $counts ]] || { tail -20 "$f" >&2; die "$i: no h2load summary"; }
  read -r ok s2 other bad secs <<<"$counts"
  ((s2 > 0)) || { tail -20 "$f" >&2; die "$i -m$m: no request answered 2xx ($ok succeeded, $other non-2xx, $bad failed)"; }
  [[ $a0 == NA ]] || ((a1 - a0 >= s2)) || die "$i -m$m: h2load counted $s2 2xx answers, sluice $((a1 - a0)) admissions"
  lat=$(bench_h2load_percentiles "$f.log" 50 99)
  awk -v i="$i" -v m="$m" -v r="$3" -v s2="$s2" -v other="$other" -v bad="$bad" -v secs="$secs" \
    -v lat="$lat" -v tck="$CLK_TCK" -v sc=$((s1 - s0)) -v rc=$((r1 - r0)) -v redis="$([[ $i == sluice-redis-* ]] && echo 1 || echo 0)" '
    BEGIN { split(lat, l, " "); us = 1e6 / tck
      printf "%s\t%s\t%s\t%.1f\t%d\t%d\t%d\t%s\t%s\t%.2f\t%s\n", i, m, r, s2 / secs, s2, other, bad, l[1], l[2],
        sc * us / s2, redis ? sprintf("%.2f", rc * us / s2) : "NA" }' >>"$RESULTS"
  tail -1 "$RESULTS" | awk -F'\t' '{ printf "  [round %s] %-18s -m%-3s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  proxy %s µs/req  redis %s µs/req  non-2xx %s  failed %s\n",
    $3, $1, $2, $4, $8 / 1000, $9 / 1000, $10, $11, $6, $7 }' >&2
  if ((other > 0 || bad > 0)); then
    # h2load logs a request it got no answer to with status -1.
    echo "  WARNING $i -m$m: $other non-2xx answers, $bad failed or errored requests (statuses:" \
      "$(awk '$2 !~ /^2/ { c[$2]++ } END { for (s in c) printf " %s x%d", s, c[s] }' "$f.log"))" >&2
  fi
  return 0
}

START_DATE=$(date -u +%Y-%m-%d)
LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
awk '$1 > 1.0 { exit 1 }' /proc/loadavg ||
  echo "  WARNING: load average $(cut -d' ' -f1 /proc/loadavg) before the rounds: the machine is not quiet" >&2
echo "h2: $ROUNDS round(s) of ${DURATION}s per case ($ncases cases), load average $LOADAVG" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  for t in "${TRANSPORT_LIST[@]}"; do
    for m in "${STREAM_LIST[@]}"; do
      for s in "${SYSTEM_LIST[@]}"; do run_one "$s-$t" "$m" "$r"; sleep 1; done
    done
  done
done
LOADAVG_END=$(cut -d' ' -f1-3 /proc/loadavg)

# --profile: sluice-memory under h2c (or the first transport) at the most streams, perf record
# on its pid; its 10 hottest symbols by self time.
PROFILE_TOP=""
if ((PROFILE > 0)) && has_system sluice-memory; then
  pt=h2c
  [[ ,$TRANSPORTS, == *,h2c,* ]] || pt=${TRANSPORT_LIST[0]}
  pm=$(printf '%s\n' "${STREAM_LIST[@]}" | sort -n | tail -1)
  pi=sluice-memory-$pt
  "${LOAD[@]}" perf record -F 999 -p "${PID[$pi]}" -o "$OUT/perf.data" -- sleep "$PROFILE" >"$OUT/perf.log" 2>&1 &
  perf_pid=$!
  BENCH_PIDS+=("$perf_pid")
  h2load_run "$pi" "$pm" "$PROFILE" "$OUT/profile"
  wait "$perf_pid" || { cat "$OUT/perf.log" >&2; die "perf record failed"; }
  PROFILE_TOP=$(perf report -i "$OUT/perf.data" --no-children -g none --sort symbol --stdio 2>/dev/null |
    awk '/^ +[0-9.]+%/ && n < 10 { n++; pct = $1; where = ($2 == "[k]" ? "kernel" : "user"); $1 = ""; $2 = ""
      sub(/^ +/, ""); sub(/ +- +- *$/, ""); printf "| %s | %s | `%s` |\n", pct, where, substr($0, 1, 140) }')
  PROFILE_CASE="$pi -m$pm, $(awk '/^finished in/ { print $4 }' "$OUT/profile") req/s under perf"
fi

git_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain -- src include lua 2>/dev/null) ]] && git_rev+=" + uncommitted changes"
REPORT="$OUT/report.md"
{
  args_text=$(printf ' %s' "${ORIG_ARGS[@]}" | sed -e 's/ --modes[ =]h2//' -e 's/ *$//')
  echo "## HTTP/2 against nginx — \`bench/compare.sh --modes h2$args_text\` ($START_DATE)"
  echo
  echo "All on loopback on one $(nproc)-core machine, pinned: h2load ($(h2load --version 2>&1 | awk 'NR == 1 { print $2 }')," \
    "\`-c$CONNS -t1 -D $DURATION\`) and the upstream (Debian's nginx $(nginx -v 2>&1 | sed 's|.*/||'), 1 worker," \
    "a \`200\` with a 3-byte body) on CPU ${CPUS[0]}; the system under test and Redis on CPU ${CPUS[1]}." \
    "h2load walks through \`/?api_key=key-0\` .. \`key-$((KEYS - 1))\` (one set of headers per run, so the key rides" \
    "in the URI); every limiter keys on it with a limit no key reaches and keeps upstream connections alive:" \
    "nginx (1 worker, \`listen ... ssl http2\` / \`listen ... http2\`, \`limit_req_zone \$arg_api_key\`, upstream" \
    "\`keepalive\`); sluice $("$BINARY" --version | awk 'NR == 1 { print $2 }') (build $git_rev, \`workers: 1\`," \
    "\`http2: true\`, a token bucket per API key, headers \`$HEADERS_YAML\`) on the memory store and on" \
    "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'). TLS: h2 by ALPN, a self-signed P-256" \
    "certificate, TLS 1.3; h2c: prior knowledge. Interleaved rounds, each figure the **median of $ROUNDS rounds**" \
    "(${DURATION}s runs after ${WARMUP}s of warm-up per system and transport); req/s = 2xx answers ÷ h2load's" \
    "elapsed time; p50/p99 from h2load's per-request log; CPU µs/req = utime + stime (/proc/<pid>/stat," \
    "CLK_TCK $CLK_TCK) of the process tree over the run ÷ 2xx answers. Ratios are to nginx in the same" \
    "transport and streams. 1-minute, 5-minute, 15-minute load average: $LOADAVG before the rounds," \
    "$LOADAVG_END after."
  echo
  echo "| transport | streams/conn | system | req/s | req/s ÷ nginx | p50 ms | p99 ms | proxy CPU µs/req | Redis CPU µs/req | (proxy + Redis) CPU ÷ nginx | non-2xx | failed |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  awk -F'\t' -v transports="$TRANSPORTS" -v streams="$STREAMS" -v systems="$SYSTEMS" '
    function med(k, c,   m, i, j, t, a) { m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, c, i] + 0
      for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
    function ratio(a, b) { return (b + 0 > 0) ? sprintf("%.2f", a / b) : "—" }
    { k = $1 SUBSEP $2; c = ++n[k]; for (f = 4; f <= 11; f++) v[k, f, c] = $f; non[k] += $6; bad[k] += $7
      redis[k] = ($11 != "NA") }
    END {
      nt = split(transports, T, ","); nm = split(streams, M, ","); ns = split(systems, S, ",")
      for (a = 1; a <= nt; a++) for (b = 1; b <= nm; b++) {
        nk = "nginx-" T[a] SUBSEP M[b]; nr = (nk in n) ? med(nk, 4) : 0; nc = (nk in n) ? med(nk, 10) : 0
        for (c = 1; c <= ns; c++) {
          k = S[c] "-" T[a] SUBSEP M[b]; if (!(k in n)) continue
          cpu = med(k, 10) + (redis[k] ? med(k, 11) : 0)
          printf "| %s | %s | %s | %.0f | %s | %.2f | %.2f | %.1f | %s | %s | %d | %d |\n", T[a], M[b], S[c],
            med(k, 4), ratio(med(k, 4), nr), med(k, 8) / 1000, med(k, 9) / 1000, med(k, 10),
            redis[k] ? sprintf("%.1f", med(k, 11)) : "—", ratio(cpu, nc), non[k], bad[k]
        }
      }
    }' "$RESULTS"
  if [[ -n $PROFILE_TOP ]]; then
    echo
    echo "Profile: \`perf record -F 999\` of sluice for ${PROFILE}s ($PROFILE_CASE), the 10 hottest symbols by self time:"
    echo
    echo "| self | space | symbol |"
    echo "|---|---|---|"
    echo "$PROFILE_TOP"
  fi
} >"$REPORT"
cat "$REPORT"
if ((RECORD)); then
  { echo; cat "$REPORT"; } >>bench/RESULTS.md
  echo "appended to bench/RESULTS.md" >&2
fi
