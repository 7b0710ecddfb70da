#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Hot-path micro-benchmarks (Google Benchmark, bench/micro/): route matching over a 20-route
# table, target canonicalisation, identity extraction, bucket keys, memory-store decisions
# (1 and 3 limits; token bucket, fixed and sliding window), header/body rendering and the
# response usage scanner (bytes/s on a 1 MB JSON body and a 1,000-event SSE stream).
# Builds the sluice-micro target, runs it and prints a markdown table of ns per operation.
# Usage: bench/micro.sh [--min-time SECONDS=0.5] [--filter REGEX] [--json FILE] [--build DIR]
#   --json FILE  also keep Google Benchmark's JSON report in FILE
#   --build DIR  the build tree (default build/; configured with Ninja when absent)
# A run in which no benchmark ran without error (a --filter that matches none) exits 3.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

MIN_TIME=0.5
FILTER=.
JSON=""
BUILD=build
while (($#)); do
  case "$1" in
    --min-time) MIN_TIME="$2"; shift 2 ;;
    --filter) FILTER="$2"; shift 2 ;;
    --json) JSON="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    -h|--help) bench_help "$0" ;;
    *) echo "micro.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

for p in libbenchmark-dev g++ cmake ninja-build; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null; }
done

if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="${SLUICE_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
fi
# A tree configured before the library was installed remembers it as missing: look again.
if ! grep -q 'sluice-micro' "$BUILD/build.ninja"; then
  cmake -U 'benchmark_DIR' "$BUILD" >/dev/null
fi
cmake --build "$BUILD" --target sluice-micro -- -j"$(nproc)"
BIN="$BUILD/bench/micro/sluice-micro"
[[ -x "$BIN" ]] || { echo "micro.sh: $BIN was not built" >&2; exit 1; }

OUT="$(mktemp -d -t sluice-micro.XXXXXX)"
trap 'rm -rf "$OUT"' EXIT
# Bounded: about 60 benchmarks of MIN_TIME each, plus set-up; ten minutes at most.
timeout 600 "$BIN" --benchmark_min_time="$MIN_TIME" --benchmark_filter="$FILTER" \
  --benchmark_out="$OUT/micro.json" --benchmark_out_format=json >"$OUT/console.txt" 2>&1 ||
  { cat "$OUT/console.txt" >&2; echo "micro.sh: sluice-micro failed" >&2; exit 1; }
[[ -n "$JSON" ]] && cp "$OUT/micro.json" "$JSON"

python3 - "$OUT/micro.json" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except ValueError:  # an empty file: the filter matched no benchmark
    print("micro.sh: measured nothing: no benchmark matched the filter", file=sys.stderr)
    sys.exit(3)
ctx = report["context"]
print(f"sluice-micro: {ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz, "
      f"library build {ctx.get('library_build_type')}, load average "
      f"{' '.join(f'{x:.2f}' for x in ctx.get('load_avg', []))}, {ctx.get('date')}")
print()
print("| benchmark | ns/op (wall) | ns/op (CPU) | iterations | counters |")
print("| --- | ---: | ---: | ---: | --- |")
scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads",
        "iterations", "real_time", "cpu_time", "time_unit", "family_index",
        "per_family_instance_index", "aggregate_name", "aggregate_unit", "label",
        "error_occurred", "error_message"}
ran = 0
for b in report["benchmarks"]:
    name = b["name"].removeprefix("BM_")
    if b.get("error_occurred"):
        print(f"| {name} | error: {b.get('error_message', '')} | | | |")
        continue
    ran += 1
    f = scale[b.get("time_unit", "ns")]
    counters = ", ".join(f"{k}={v:g}" for k, v in b.items() if k not in skip)
    print(f"| {name} | {b['real_time'] * f:,.1f} | {b['cpu_time'] * f:,.1f} | "
          f"{b['iterations']:,} | {counters} |")
if not ran:
    print("micro.sh: measured nothing: no benchmark ran without error", file=sys.stderr)
    sys.exit(3)
PY
