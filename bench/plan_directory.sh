#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Plan directory benchmark (issue 4): KEYS API keys in a Redis hash (loaded with
# `redis-cli --pipe`), then the lookup cost on a cache hit and a miss and the cache's memory,
# measured by sluice-bench-plan-directory.
#
#   bench/plan_directory.sh [KEYS=5000000] [CACHED=1000000] [BUILD_DIR=build-config]
#
# A hash that holds no key after loading, or lookups that found none, fail the script (exit 3).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
[[ ${1:-} == -h || ${1:-} == --help ]] && bench_help "$0"
KEYS=${1:-5000000}
CACHED=${2:-1000000}
BUILD=${3:-build-config}
HERE=$(cd "$(dirname "$0")/.." && pwd)
DRIVER="$HERE/$BUILD/sluice-bench-plan-directory"
[ -x "$DRIVER" ] || { echo "build it first: ninja -C $BUILD sluice-bench-plan-directory" >&2; exit 1; }

BENCH_WORK=$(mktemp -d)
BENCH_PIDS=()
trap bench_cleanup EXIT
bench_redis redis
PORT=$REDIS_PORT

echo "loading $KEYS keys into sluice:api_keys ..."
START=$(date +%s.%N)
# One HSET of 1000 field/value pairs per command, in the Redis protocol.
awk -v n="$KEYS" 'BEGIN {
  plans[0]="free"; plans[1]="pro"; plans[2]="team";
  for (i = 0; i < n; i += 1000) {
    m = (n - i < 1000) ? n - i : 1000;
    printf "*%d\r\n$4\r\nHSET\r\n$15\r\nsluice:api_keys\r\n", 2 + 2 * m;
    for (j = i; j < i + m; j++) {
      k = sprintf("key-%08d", j); p = plans[j % 3];
      printf "$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, length(p), p;
    }
  }
}' | redis-cli -p "$PORT" --pipe | tail -1
END=$(date +%s.%N)
LOADED=$(redis-cli -p "$PORT" hlen sluice:api_keys)
((LOADED > 0)) || bench_measured_nothing plan_directory.sh "sluice:api_keys holds no key after loading"
echo "loaded: HLEN $LOADED in $(echo "$END - $START" | bc) s;" \
  "redis used_memory $(redis-cli -p "$PORT" info memory | grep '^used_memory_human' | cut -d: -f2 | tr -d '\r')"
"$DRIVER" "$PORT" sluice:api_keys "$KEYS" "$CACHED"
