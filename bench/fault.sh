#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fault run (issue "When Redis is slow, down or restarted"): wrk on loopback through the gateway
# while Redis fails in the middle of the run, on a fail_open and a fail_closed route at once
# (two wrk processes, --timeout 1s so that a request hung past 1 s is counted as a timeout).
#   freeze   20 s: 7 s normal, Redis frozen with SIGSTOP for 5 s, 8 s after SIGCONT
#   restart  20 s: 7 s normal, Redis killed (SIGKILL), restarted 5 s later, 8 s after
# Each phase is its own wrk run, so the numbers "during" cover the outage exactly. From SIGCONT
# (or from Redis accepting connections again) a poller sends GET /v1/probe on a fresh
# connection every 10 ms until 6 answers in a row carry X-RateLimit-Remaining (decisions come
# from Redis again, on every worker): the time to the first of them is the recovery time.
# SLUICE_BENCH_TIMEOUT sets store.timeout (default 5ms, DESIGN.md's default);
# SLUICE_BENCH_WORKERS sets the gateway's workers (default 2).
# SLUICE_BUILD names a build directory that already holds sluice and sluice-echo-upstream
# (default: scripts/setup builds build/).
# A phase in which wrk completed no request, or a phase before a fault in which none answered
# 2xx, fails the script (exit 3).
# Usage: bench/fault.sh [connections per route=8]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
[[ ${1:-} == -h || ${1:-} == --help ]] && bench_help "$0"
CONNS="${1:-8}"
PRE=7; OUT_S=5; POST=8  # wrk takes whole seconds
BUILD="${SLUICE_BUILD:-build}"
TIMEOUT="${SLUICE_BENCH_TIMEOUT:-5ms}"
[ -n "${SLUICE_BUILD:-}" ] || scripts/setup >/dev/null
dpkg-query -W -f='${Status}' wrk 2>/dev/null | grep -q "install ok installed" ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }

BENCH_WORK="$(mktemp -d -t sluice-fault.XXXXXX)"
OUT=$BENCH_WORK
BENCH_PIDS=()
REDIS_PID=""
# A frozen Redis is thawed first, so that it can take its SIGTERM.
trap '[ -n "$REDIS_PID" ] && kill -CONT "$REDIS_PID" 2>/dev/null; bench_cleanup' EXIT
now() { date +%s.%N; }

UP=$(bench_free_port); RP=$(bench_free_port); GP=$(bench_free_port)
"$BUILD"/sluice-echo-upstream --listen 127.0.0.1:$UP --threads 1 & BENCH_PIDS+=($!)
start_redis() {
  redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT" \
    --logfile "$OUT/redis.log" &
  REDIS_PID=$!
  BENCH_PIDS+=($!)
}
start_redis

cat > "$OUT/rules.yaml" <<YAML
listen: 127.0.0.1:$GP
workers: ${SLUICE_BENCH_WORKERS:-2}
store: {type: redis, address: 127.0.0.1:$RP, timeout: $TIMEOUT}
upstreams: {api: {url: "http://127.0.0.1:$UP"}}
identity: {api_key: {header: X-API-Key}, unknown_key: reject}
plans: {bench: {limits: []}}
api_keys: {bench-open: bench, bench-closed: bench, bench-probe: bench}
routes:
  - name: open
    match: {path_prefix: /v1/open}
    upstream: api
    on_store_failure: fail_open
    limits: [{name: open_key, by: api_key, rate: 1/1h, burst: 100000000}]
  - name: closed
    match: {path_prefix: /v1/closed}
    upstream: api
    on_store_failure: fail_closed
    limits: [{name: closed_key, by: api_key, rate: 1/1h, burst: 100000000}]
  - name: probe
    match: {path_prefix: /v1/probe}
    upstream: api
    on_store_failure: fail_open
    limits: [{name: probe_key, by: api_key, rate: 1/1h, burst: 100000000}]
YAML

bench_wait_port $UP; bench_wait_port $RP
"$BUILD"/sluice --config "$OUT/rules.yaml" --log-level info 2>"$OUT/gateway.log" & GW=$!; BENCH_PIDS+=("$GW")
bench_wait_port $GP $GW "$OUT/gateway.log"

wrk_run() {  # name route seconds
  wrk -t1 -c"$CONNS" -d"$3s" --timeout 1s --latency -s bench/status.lua \
    -H "X-API-Key: bench-$2" "http://127.0.0.1:$GP/v1/$2" > "$OUT/$1.txt" 2>&1
}
# name: requests, 2xx share, p99, 503s, other 5xx, quota fields, wrk timeouts
report() {
  local f="$OUT/$1.txt" total ok s503 s5xx quota p99 tmo
  total=$(awk '/requests in/ {print $1}' "$f")
  ok=$(awk '$1=="status" && $2>=200 && $2<300 {n+=$3} END {print n+0}' "$f")
  s503=$(awk '$1=="status" && $2==503 {n+=$3} END {print n+0}' "$f")
  s5xx=$(awk '$1=="status" && $2>=500 && $2!=503 {n+=$3} END {print n+0}' "$f")
  quota=$(awk '$1=="quota_fields" {print $2}' "$f")
  p99=$(awk '$1=="99%" {print $2}' "$f")
  tmo=$(sed -n 's/.*Socket errors:.*timeout \([0-9]*\).*/\1/p' "$f"); tmo=${tmo:-0}
  ((${total:-0} > 0)) || { cat "$f" >&2; bench_measured_nothing fault.sh "$1: wrk completed no request"; }
  [[ $1 != *-before-* ]] || ((ok > 0)) || bench_measured_nothing fault.sh "$1: no request answered 2xx before the fault"
  printf '  %-16s %8s req  2xx %6.2f%%  503 %-7s other-5xx %-4s with-quota %-7s p99 %-9s timeouts>1s %s\n' \
    "$1" "$total" "$(awk -v a="$ok" -v t="$total" 'BEGIN {print t ? 100*a/t : 0}')" "$s503" "$s5xx" "$quota" "$p99" "$tmo"
}
# Started before the event (so that its own start-up is not timed); prints the milliseconds
# from the event (epoch seconds written to file $1 once it happened) to the first of 6 answers
# in a row decided by Redis on /v1/probe, and to the first such answer at all.
recovery() {
  python3 - "$GP" "$1" <<'PY'
import http.client, os, sys, time
port, mark = int(sys.argv[1]), sys.argv[2]
in_row, first, any_first, start = 0, None, None, time.time()
def t0():
    for _ in range(1000):
        if os.path.exists(mark) and open(mark).read().strip(): return float(open(mark).read())
        time.sleep(0.01)
    return start
while time.time() - start < 20:
    sent = time.time()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        c.request("GET", "/v1/probe", headers={"X-API-Key": "bench-probe"})
        r = c.getresponse(); r.read(); c.close()
        decided = r.status == 200 and r.getheader("X-RateLimit-Remaining") is not None
    except Exception:
        decided = False
    if decided:
        if in_row == 0: first = sent
        if any_first is None: any_first = sent
        in_row += 1
        if in_row == 6:
            t = t0()
            print(f"{(first - t) * 1000:.0f} ms (first decided answer {(any_first - t) * 1000:.0f} ms)")
            sys.exit(0)
    else:
        in_row = 0
    time.sleep(0.01)
print("never")
PY
}
phase() {  # name seconds: both routes at once
  wrk_run "$1-open" open "$2" & local a=$!
  wrk_run "$1-closed" closed "$2" & local b=$!
  wait $a $b
}
alive() { kill -0 $GW 2>/dev/null && echo yes || echo NO; }
# The gateway's own view (its state-change log lines, one per worker): milliseconds from the
# event (epoch in file $1) until every worker logged "connected" (and, after SIGCONT, its breaker
# closed). Independent of the poller, which a loaded machine may starve.
worker_recovery() {
  python3 - "$OUT/gateway.log" "$1" <<'PY'
import datetime, re, sys
log, t0 = sys.argv[1], float(open(sys.argv[2]).read())
last = {}
for line in open(log):
    m = re.match(r"(\S+) \w+ \[(\d+)\] .*(connected, script|breaker closed)", line)
    if not m: continue
    t = datetime.datetime.fromisoformat(m.group(1)).timestamp()
    if t >= t0 and m.group(2) not in last: last[m.group(2)] = t
print(", ".join(f"{(t - t0) * 1000:.0f}" for t in sorted(last.values())) + " ms" if last else "none")
PY
}

echo "sluice fault run: $(nproc) cores, gateway workers ${SLUICE_BENCH_WORKERS:-2}, store.timeout $TIMEOUT, wrk -t1 -c$CONNS per route, --timeout 1s"
echo "run 1: Redis frozen (SIGSTOP) for ${OUT_S}s between ${PRE}s and $(awk -v a=$PRE -v b=$OUT_S 'BEGIN{print a+b}')s"
phase freeze-before $PRE
kill -STOP $REDIS_PID
phase freeze-during $OUT_S
recovery "$OUT/t1" > "$OUT/rec1" & RP1=$!
sleep 0.3  # the poller is up (it sees only fail-open answers while Redis is frozen)
kill -CONT $REDIS_PID; now > "$OUT/t1"
phase freeze-after $POST
wait $RP1
for n in before during after; do report freeze-$n-open; report freeze-$n-closed; done
echo "  recovery: decisions from Redis $(cat "$OUT/rec1") after SIGCONT; workers back (gateway log): $(worker_recovery "$OUT/t1"); gateway alive: $(alive)"

echo "run 2: Redis killed (SIGKILL) at ${PRE}s, restarted ${OUT_S}s later"
phase kill-before $PRE
kill -KILL $REDIS_PID; wait $REDIS_PID 2>/dev/null || true
phase kill-during $OUT_S
recovery "$OUT/t2" > "$OUT/rec2" & RP2=$!
sleep 0.3
start_redis
for _ in $(seq 500); do redis-cli -p $RP ping >/dev/null 2>&1 && break; sleep 0.002; done
now > "$OUT/t2"
phase kill-after $POST
wait $RP2
for n in before during after; do report kill-$n-open; report kill-$n-closed; done
echo "  recovery: decisions from Redis $(cat "$OUT/rec2") after Redis answered PING; workers back (gateway log): $(worker_recovery "$OUT/t2"); gateway alive: $(alive)"
echo "gateway log lines: $(wc -l < "$OUT/gateway.log") (start-up, store state changes, rate-limited failure lines)"
grep -c "breaker open" "$OUT/gateway.log" | sed 's/^/  breaker-open lines: /'
