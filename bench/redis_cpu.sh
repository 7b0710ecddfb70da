#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Redis CPU per check (issue 10): checks sent straight to a redis-server of its own (free
# loopback port, no persistence) through the product's Redis store (sluice-bench-redis-check,
# so the script runs with the gateway's real keys and arguments), for each algorithm with one
# and with three limits on KEYS keys whose limits are never reached, plus a refusal-heavy case
# (every check refused). Each case warms every key once (its buckets exist, as in steady
# traffic), then CONFIG RESETSTAT, then CHECKS checks, then reads INFO commandstats:
#
#   usec/check   usec_per_call of FCALL (or EVALSHA; Redis's CPU for the whole script run, the commands
#                it calls included)
#   cmds/check   commands the script ran per check (every command in commandstats but the
#                FCALL itself and the driver's and store's own: SCRIPT, PING, CONFIG, INFO)
#   writes/check of those, the ones that write (SET, HSET, HDEL, DEL, PEXPIRE, RPUSH, LTRIM...)
#
#   bench/redis_cpu.sh [BUILD_DIR=build] [KEYS=10000] [CHECKS=200000]
#
# Bounded: each driver run stops after CHECKS checks or 120 s; Redis is stopped on exit. A case
# in which Redis ran no check script fails the script (exit 1, the reason on stderr).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
[[ ${1:-} == -h || ${1:-} == --help ]] && bench_help "$0"
BUILD=${1:-build}
KEYS=${2:-10000}
CHECKS=${3:-200000}
DRIVER="$BUILD/sluice-bench-redis-check"
if [[ ! -x $DRIVER ]]; then
  echo "redis_cpu.sh: $DRIVER not found (cmake --build $BUILD --target sluice-bench-redis-check)" >&2
  exit 2
fi

BENCH_WORK=$(mktemp -d)
BENCH_PIDS=()
trap bench_cleanup EXIT
bench_redis redis
PORT=$REDIS_PORT
cli() { redis-cli -p "$PORT" "$@"; }

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), $KEYS keys, $CHECKS checks per case"
printf '| %-16s | %-6s | %-9s | %10s | %10s | %12s | %10s |\n' algorithm limits case usec/check cmds/check writes/check checks/s
printf '|%s|%s|%s|%s|%s|%s|%s|\n' ------------------ -------- ----------- ------------ ------------ -------------- ------------

run_case() {  # run_case ALGORITHM LIMITS [refuse]
  local algo=$1 limits=$2 mode=${3:-}
  cli FLUSHALL >/dev/null
  local warm=$mode
  [[ $mode == refuse ]] && warm=first
  "$DRIVER" "$PORT" "$algo" "$limits" "$KEYS" "$KEYS" $warm >/dev/null  # warm: one per key
  cli CONFIG RESETSTAT >/dev/null
  local out
  if ! out=$("$DRIVER" "$PORT" "$algo" "$limits" "$KEYS" "$CHECKS" $mode 2>/dev/null); then
    # A check that failed (a missed deadline on a loaded machine) or an unexpected decision:
    # said on stderr; the row is still printed from what Redis ran.
    echo "redis_cpu.sh: $algo x$limits ${mode:-admit}: $out" >&2
  fi
  local secs
  secs=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$out")
  cli INFO commandstats | tr -d '\r' | python3 -c '
import re, sys
algo, limits, mode, checks, secs = sys.argv[1:6]
writes = {"set", "hset", "hdel", "del", "unlink", "pexpire", "expire", "pexpireat", "rpush",
          "lpush", "ltrim", "lrem", "hincrby", "hmset", "hsetnx", "incr", "incrby", "psetex"}
own = {"evalsha", "eval", "fcall", "function", "script", "ping", "config", "info", "auth", "flushall"}
calls, usec, cmds, wr = 0, 0.0, 0, 0
for line in sys.stdin:
    m = re.match(r"cmdstat_([a-z|]+):calls=(\d+),usec=(\d+)", line)
    if not m:
        continue
    name, n = m.group(1), int(m.group(2))
    if name in ("evalsha", "eval", "fcall"):
        calls += n
        usec += int(m.group(3))
    elif name.split("|")[0] not in own:
        cmds += n
        if name in writes:
            wr += n
if calls == 0:
    # Measured nothing: Redis ran no check script (every check failed before it).
    sys.exit("redis_cpu.sh: measured nothing: %s x%s %s: Redis ran no check script" % (algo, limits, mode or "admit"))
print("| %-16s | %-6s | %-9s | %10.2f | %10.2f | %12.2f | %10.0f |" % (
    algo, limits, mode or "admit", usec / calls, cmds / calls, wr / calls,
    int(checks) / max(float(secs), 1e-9)))
' "$algo" "$limits" "$mode" "$CHECKS" "$secs"
}

for algo in token_bucket fixed_window sliding_window sliding_log; do
  run_case "$algo" 1
  run_case "$algo" 3
done
run_case token_bucket 1 refuse
run_case token_bucket 3 refuse
run_case fixed_window 1 refuse
