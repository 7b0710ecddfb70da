#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Redis bench scripts on a small scale against a real redis-server they start themselves:
# bench/memory.sh must find every bucket it checked (2,000 token buckets under both layouts,
# sliding logs of 1 and 100 stamps) with a positive size each, and bench/redis_cpu.sh must
# print every case with Redis CPU per check above 0 (a script that measures nothing exits
# non-zero: that fails this test too). Registered in tests/CMakeLists.txt (label `bench`):
#
#   scripts_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
if (($# != 2)); then
  echo "usage: $0 SOURCE_DIR BUILD_DIR" >&2
  exit 2
fi
src=$1 build=$2
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

out=$(bash "$src/bench/memory.sh" "$build" 2000 token_bucket,sliding_log) ||
  fail "bench/memory.sh exited $?"
echo "$out"
# token_bucket [hash], [key], sliding_log 1 stamp (2,000 buckets) and 100 stamps (200).
rows=$(grep -c ' buckets=' <<<"$out" || true)
((rows == 4)) || fail "bench/memory.sh printed $rows cases, not 4"
grep ' buckets=' <<<"$out" | awk '{
    for (i = 1; i <= NF; i++) {
      if ($i ~ /^buckets=/) { split($i, b, "="); n = b[2] }
      if ($i ~ /^bytes\/bucket=/) { split($i, v, "="); size = v[2] }
    }
    want = ($0 ~ /100 stamps/) ? 200 : 2000
    if (n != want || size <= 0) { print "FAIL: " $0 " (want buckets=" want ", bytes/bucket > 0)"; bad = 1 }
  } END { exit bad }' >&2 || fail "bench/memory.sh measured a wrong case"

out=$(bash "$src/bench/redis_cpu.sh" "$build" 100 1000) || fail "bench/redis_cpu.sh exited $?"
echo "$out"
rows=$(grep -cE '^\| (token_bucket|fixed_window|sliding_window|sliding_log) ' <<<"$out" || true)
((rows == 11)) || fail "bench/redis_cpu.sh printed $rows cases, not 11"
grep -E '^\| (token_bucket|fixed_window|sliding_window|sliding_log) ' <<<"$out" |
  awk -F'|' '$5 + 0 <= 0 { print "FAIL: no Redis CPU per check: " $0; bad = 1 } END { exit bad }' >&2 ||
  fail "bench/redis_cpu.sh measured a case at 0"
echo "bench scripts: ok"
