#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Slowloris under load, on loopback: normal traffic (wrk) through the gateway without and then
# with --slow connections held open by bench/slowloris.py, each trickling a request head that
# never ends (one header line a second; reconnecting when the gateway answers 408 at its
# header deadline). The gateway runs with the memory store, 1 worker and the default client:
# settings (header_timeout 10s, max_connections auto), forwarding to an nginx upstream that
# answers a fixed 200; every request is decided under a per-IP limit it never reaches.
# Reports, for each run: wrk's req/s, p50 and p99, non-2xx and socket errors; the slow
# connections held (min and mean over the run), the 408s they got, the gateway's RSS, and
# its client metrics. With --record, appends the table to bench/RESULTS.md.
# Usage: bench/slowloris.sh [--seconds 10] [--slow 2000] [--connections 50] [--record]
# Bounded: each wrk run has -d, the slow client stops by itself, every process started here
# is stopped by its pid on exit. SLUICE_BIN overrides build/sluice. A baseline in which wrk
# completed no request fails at once, a run under attack that completed none after its table
# (exit 3).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

SECONDS_RUN=10
SLOW=2000
CONNS=50
RECORD=0
while (($#)); do
  case "$1" in
    --seconds) SECONDS_RUN="$2"; shift 2 ;;
    --slow) SLOW="$2"; shift 2 ;;
    --connections) CONNS="$2"; shift 2 ;;
    --record) RECORD=1; shift ;;
    -h|--help) bench_help "$0" ;;
    *) echo "slowloris.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

SLUICE="${SLUICE_BIN:-build/sluice}"
[[ -x "$SLUICE" ]] || scripts/setup >/dev/null
for p in nginx-light wrk curl python3; do
  command -v "${p%-light}" >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null; }
done

# The slow client and the gateway inherit this limit (the gateway raises its own to the hard
# limit anyway).
ulimit -n "$(ulimit -Hn)"
if (($(ulimit -n) < SLOW + CONNS + 500)); then
  echo "slowloris.sh: only $(ulimit -n) descriptors; --slow lowered" >&2
  SLOW=$(($(ulimit -n) - CONNS - 500))
fi

BENCH_WORK="$(mktemp -d -t sluice-slowloris.XXXXXX)"
OUT=$BENCH_WORK
BENCH_PIDS=()
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
die() { echo "slowloris.sh: $*" >&2; exit 1; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
metric() { # name[{labels}]: its value on the admin listener (0 when absent)
  curl -s --max-time 2 "http://127.0.0.1:$ADMIN/metrics" |
    awk -v m="$1" '$1 == m {printf "%d\n", $2; found=1} END {if (!found) print 0}'
}

UP=$(bench_free_port)
mkdir -p "$OUT/upstream-tmp"
sed -e "s|@DIR@|$OUT|g" -e "s|@PORT@|$UP|g" bench/compare/upstream-nginx.conf >"$OUT/upstream.conf"
nginx -e "$OUT/upstream-error.log" -c "$OUT/upstream.conf" -p "$OUT" >"$OUT/upstream.log" 2>&1 &
UPID=$!
BENCH_PIDS+=("$UPID")
bench_wait_port "$UP" "$UPID" "$OUT/upstream.log" || die "the upstream never listened on 127.0.0.1:$UP"

PORT=$(bench_free_port)
ADMIN=$(bench_free_port)
cat >"$OUT/sluice.yaml" <<EOF
listen: 127.0.0.1:$PORT
admin: 127.0.0.1:$ADMIN
workers: 1
store: {type: memory}
upstreams: {api: {url: "http://127.0.0.1:$UP"}}
routes:
  - name: all
    match: {path_prefix: /}
    upstream: api
    limits: [{name: per_ip, by: ip, rate: 1000000/1s, burst: 1000000}]
EOF
"$SLUICE" --config "$OUT/sluice.yaml" --no-watch >"$OUT/sluice.log" 2>&1 &
SPID=$!
BENCH_PIDS+=("$SPID")
bench_wait_port "$PORT" "$SPID" "$OUT/sluice.log" || die "sluice never listened on 127.0.0.1:$PORT"

run_wrk() { # output file
  wrk -t1 -c"$CONNS" -d"${SECONDS_RUN}s" --timeout 2s --latency "http://127.0.0.1:$PORT/" >"$1" 2>&1 ||
    { cat "$1" >&2; die "wrk failed"; }
}
# wrk's summary: req/s p50_ms p99_ms non2xx socket_errors
summary() {
  awk '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    /^ +50%/ { p50 = ms($2) } /^ +99%/ { p99 = ms($2) }
    /Requests\/sec/ { rps = $2 }
    /Non-2xx/ { non2xx = $NF }
    /Socket errors/ { gsub(/[a-z:,]+/, " "); split($0, e, " "); err = e[1] "/" e[2] "/" e[3] "/" e[4] }
    END { printf "%.0f %.2f %.2f %d %s\n", rps, p50, p99, non2xx, (err == "" ? "0/0/0/0" : err) }' "$1"
}

curl -s -o /dev/null "http://127.0.0.1:$PORT/"  # warm-up
wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$PORT/" >/dev/null 2>&1 || true

rss0=$(rss_kb "$SPID")
run_wrk "$OUT/base.txt"
completed() { awk '/ requests in / { n = $1 } END { print n + 0 }' "$1"; }
(($(completed "$OUT/base.txt") > 0)) || { cat "$OUT/base.txt" >&2; bench_measured_nothing slowloris.sh "the baseline completed no request"; }
read -r b_rps b_p50 b_p99 b_non b_err < <(summary "$OUT/base.txt")
rss1=$(rss_kb "$SPID")

# The attack: ramp up over 4 s, then held through the wrk run (and 2 s more).
python3 bench/slowloris.py --port "$PORT" --connections "$SLOW" --duration $((SECONDS_RUN + 8)) \
  >"$OUT/slow.json" 2>"$OUT/slow.log" &
LPID=$!
BENCH_PIDS+=("$LPID")
for _ in $(seq 100); do
  (($(metric sluice_client_connections_open) >= SLOW * 95 / 100)) && break
  sleep 0.1
done
open_before=$(metric sluice_client_connections_open)
t408_before=$(metric 'sluice_client_timeouts_total{phase="header"}')
run_wrk "$OUT/attack.txt"
open_after=$(metric sluice_client_connections_open)
rss2=$(rss_kb "$SPID")
t408=$(($(metric 'sluice_client_timeouts_total{phase="header"}') - t408_before))
rejected=$(metric sluice_client_connections_rejected_total)
cap=$(metric sluice_client_connections_max)
wait "$LPID" || true
read -r a_rps a_p50 a_p99 a_non a_err < <(summary "$OUT/attack.txt")
slow=$(cat "$OUT/slow.json")
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$slow" "$1"; }

table=$(cat <<EOF
| run | req/s | req/s ÷ baseline | p50 ms | p99 ms | non-2xx | socket errors c/r/w/t | slow connections open (gateway, before/after the run) | gateway RSS MB |
|---|---|---|---|---|---|---|---|---|
| baseline (no attack) | $b_rps | 1.00 | $b_p50 | $b_p99 | $b_non | $b_err | 0 | $(awk -v k="$rss1" 'BEGIN{printf "%.1f", k/1024}') |
| $SLOW slow connections | $a_rps | $(awk -v a="$a_rps" -v b="$b_rps" 'BEGIN{printf "%.2f", a/b}') | $a_p50 | $a_p99 | $a_non | $a_err | $open_before / $open_after | $(awk -v k="$rss2" 'BEGIN{printf "%.1f", k/1024}') |
EOF
)
notes="Slow client: $(field opened) connections opened in all, $(field held_min)–$(field held_mean) (min–mean) open each second after its ramp; $(field answered_408) ended with a \`408\` at the gateway's 10 s header deadline and were opened again ($t408 counted by \`sluice_client_timeouts_total{phase=\"header\"}\` during the wrk run), $(field closed_without_408) without an answer, $(field connect_failures) failed to connect. Connection cap (auto): $cap per worker; $rejected connections reset over it. Gateway RSS before the baseline $(awk -v k="$rss0" 'BEGIN{printf "%.1f", k/1024}') MB."

echo "$table"
echo
echo "$notes"

if ((RECORD)); then
  {
    echo
    echo "## Slowloris under load ($(date -u +%Y-%m-%d))"
    echo
    echo "\`bench/slowloris.sh --seconds $SECONDS_RUN --slow $SLOW\`, on loopback: wrk ($(wrk -v 2>&1 | head -1 | awk '{print $2}'), -t1 -c$CONNS, ${SECONDS_RUN}s, --latency) through sluice $(git rev-parse --short HEAD 2>/dev/null || echo '?') (\`workers: 1\`, memory store, a per-IP token bucket never reached, default \`client:\` settings) to an nginx upstream answering a fixed 200; then the same while bench/slowloris.py holds $SLOW connections, each sending a request line and one header line a second, never ending its head."
    echo
    echo "$table"
    echo
    echo "$notes"
  } >>bench/RESULTS.md
  echo "slowloris.sh: appended to bench/RESULTS.md"
fi
(($(completed "$OUT/attack.txt") > 0)) || bench_measured_nothing slowloris.sh "no request completed under the attack"
