#!/usr/bin/env bash
# Memory per key in Redis for each algorithm (issue 5): 1,000,000 keys created by calling the
# embedded check script directly (EVALSHA through `redis-cli --pipe`), then
# (INFO memory used_memory after − before) / keys.
#
#   bench/memory.sh [BUILD_DIR=build] [KEYS=1000000]
#
# Buckets look like the gateway's: sl:{free_minute|k|rkey-0000001} (limit name, identity
# kind, API key), under both layouts: `key` (one Redis key per bucket) and `hash` (the
# default: the bucket is field rkey-0000001 of the group hash sl:{free_minute|k|#<g>}, with
# g = FNV-1a-64 mod 65,536, as src/limiter/keys.cpp computes it). Every limit is 100/1d (so
# nothing expires during the run); each bucket gets one request of cost 1 (the sliding log
# then holds one stamp; a second figure, on a tenth of the keys with 100 stamps each, shows
# its per-unit cost). "bytes/bucket" divides by the number of buckets, not of Redis keys.
set -euo pipefail
BUILD=${1:-build}
KEYS=${2:-1000000}
SCRIPT=$(mktemp)
# The check script is the concatenation the build embeds (CMakeLists.txt, sluice_embed_lua).
SRC=$(cd "$(dirname "$0")/.." && pwd)
for part in common token_bucket window fixed_window sliding_window sliding_log check; do
  cat "$SRC/lua/$part.lua"; echo
done >"$SCRIPT"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
DIR=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" >"$DIR/redis.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -rf "$DIR" "$SCRIPT"' EXIT
for _ in $(seq 100); do redis-cli -p "$PORT" PING >/dev/null 2>&1 && break; sleep 0.05; done
SHA=$(redis-cli -p "$PORT" -x SCRIPT LOAD <"$SCRIPT")

used() { redis-cli -p "$PORT" INFO memory | tr -d '\r' | awk -F: '/^used_memory:/{print $2}'; }

measure() {  # measure NAME LAYOUT ALGO_ID A B C COST_PER_KEY [KEYS]
  local name=$1 layout=$2 id=$3 a=$4 b=$5 c=$6 units=$7 keys=${8:-$KEYS}
  redis-cli -p "$PORT" FLUSHALL >/dev/null
  sleep 0.5
  local before after
  before=$(used)
  python3 - "$SHA" "$keys" "$layout" "$id" "$a" "$b" "$c" "$units" <<'PY' | redis-cli -p "$PORT" --pipe >/dev/null
import sys
sha, keys, layout, algo, a, b, c, units = sys.argv[1], int(sys.argv[2]), *sys.argv[3:9]
def fnv1a64(text):
    h = 0xcbf29ce484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001b3) % (1 << 64)
    return h
out = sys.stdout.buffer
def cmd(*args):
    parts = [b"*%d\r\n" % len(args)]
    for x in args:
        x = x.encode() if isinstance(x, str) else x
        parts.append(b"$%d\r\n%s\r\n" % (len(x), x))
    return b"".join(parts)
buf = []
for i in range(keys):
    enc = "rkey-%07d" % i
    if layout == "hash":
        key, field = "sl:{free_minute|k|#%x}" % (fnv1a64(enc) % 65536), enc
    else:
        key, field = "sl:{free_minute|k|%s}" % enc, ""
    buf.append(cmd("EVALSHA", sha, "1", key, "-1", "1", "-1", algo, a, b, c, units, "0", field))
    if len(buf) == 10000:
        out.write(b"".join(buf)); buf = []
out.write(b"".join(buf))
PY
  after=$(used)
  local n
  n=$(redis-cli -p "$PORT" DBSIZE)
  python3 -c "print('%-40s buckets=%d redis_keys=%d  used_memory delta=%d  bytes/bucket=%.1f' % ('$name [$layout]', $keys, $n, $after - $before, ($after - $before) / max(1, $keys)))"
}

# Token bucket 100/1d: gcd(100, 86,400,000) = 100, so refill 1 unit per ms, 864,000 units per token.
for layout in hash key; do
  measure "token_bucket 100/1d burst 100" $layout 0 1 864000 100 1
  measure "fixed_window 100/1d" $layout 1 86400000 100 0 1
  measure "sliding_window 100/1d" $layout 2 86400000 100 0 1
done
# The sliding log always has a key of its own (a list).
measure "sliding_log 100/1d (1 stamp)" key 3 86400000 100 0 1
measure "sliding_log 100/1d (100 stamps)" key 3 86400000 100 0 100 $((KEYS / 10))
