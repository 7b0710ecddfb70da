#!/usr/bin/env bash
# Memory per key in Redis for each algorithm (issue 5): 1,000,000 keys created by calling the
# embedded check script directly (EVALSHA through `redis-cli --pipe`), then
# (INFO memory used_memory after − before) / keys.
#
#   bench/memory.sh [BUILD_DIR=build] [KEYS=1000000]
#
# Keys look like the gateway's: sl:{free_minute|k|rkey-0000001} (limit name, identity kind,
# API key). Every limit is 100/1d (so no key expires during the run); each key gets one
# request of cost 1 (the sliding log then holds one stamp; a second figure, on a tenth of the
# keys with 100 stamps each, shows its per-unit cost).
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

measure() {  # measure NAME ALGO_ID A B C COST_PER_KEY [KEYS]
  local name=$1 id=$2 a=$3 b=$4 c=$5 units=$6 keys=${7:-$KEYS}
  redis-cli -p "$PORT" FLUSHALL >/dev/null
  sleep 0.5
  local before after
  before=$(used)
  python3 - "$SHA" "$keys" "$id" "$a" "$b" "$c" "$units" <<'PY' | redis-cli -p "$PORT" --pipe >/dev/null
import sys
sha, keys, algo, a, b, c, units = sys.argv[1], int(sys.argv[2]), *sys.argv[3:8]
out = sys.stdout.buffer
def cmd(*args):
    parts = [b"*%d\r\n" % len(args)]
    for x in args:
        x = x.encode() if isinstance(x, str) else x
        parts.append(b"$%d\r\n%s\r\n" % (len(x), x))
    return b"".join(parts)
buf = []
for i in range(keys):
    key = "sl:{free_minute|k|rkey-%07d}" % i
    buf.append(cmd("EVALSHA", sha, "1", key, "-1", "1", algo, a, b, c, units, "0"))
    if len(buf) == 10000:
        out.write(b"".join(buf)); buf = []
out.write(b"".join(buf))
PY
  after=$(used)
  local n
  n=$(redis-cli -p "$PORT" DBSIZE)
  python3 -c "print('%-34s keys=%d  used_memory delta=%d  bytes/key=%.1f' % ('$name', $n, $after - $before, ($after - $before) / max(1, $n)))"
}

# Token bucket 100/1d: gcd(100, 86,400,000) = 100, so refill 1 unit per ms, 864,000 units per token.
measure "token_bucket 100/1d burst 100" 0 1 864000 100 1
measure "fixed_window 100/1d" 1 86400000 100 0 1
measure "sliding_window 100/1d" 2 86400000 100 0 1
measure "sliding_log 100/1d (1 stamp)" 3 86400000 100 0 1
measure "sliding_log 100/1d (100 stamps)" 3 86400000 100 0 100 $((KEYS / 10))
