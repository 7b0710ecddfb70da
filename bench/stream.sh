#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Streaming and connection-scale measurements, on loopback, side by side:
#   direct   curl -> upstream
#   nginx    curl -> nginx (1 worker, proxy_pass, proxy_request_buffering off,
#            client_max_body_size 0, proxy_buffering off) -> upstream
#   nginx-buffered  the same with proxy_buffering on (nginx's default)
#   gateway  curl -> sluice (memory store, 1 worker, routes with max_request_body: unlimited)
#            -> upstream
# Upstreams: an nginx serving files from a temporary directory (downloads) and a Python sink
# that streams a request body into SHA-256 and answers its hex digest (uploads).
# Measures:
#   1. a download and an upload of --size bytes (random data), each checked byte-identical by
#      SHA-256: median MB/s (10^6 bytes/s) of each path, the ratio gateway/nginx, the gateway's
#      RSS growth (VmRSS sampled every 50 ms: peak - before);
#   2. --parallel concurrent downloads of --parallel-size bytes through the gateway: every
#      checksum, aggregate MB/s, RSS growth;
#   3. --idle keep-alive connections to the gateway, each after one request: the gateway's RSS
#      before and after, and the latency of wrk (10 connections, 10 s) without and with them.
# Every transfer is bounded (curl --max-time and a stall timeout); a failed one is reported as
# such (HTTP status, curl exit code, bytes moved) and the run goes on. A run that measured
# nothing (no transfer completed and no idle connection was opened) exits 3 after its report.
# Usage: bench/stream.sh [--size 1G] [--parallel-size 100M] [--parallel 10] [--idle 10000]
#                        [--repeat 3] [--nginx-buffering both|off|on] [--skip-transfers]
#                        [--skip-idle]
#   --repeat N        timed runs of each single transfer (the median MB/s is reported)
#   --nginx-buffering which nginx to measure: proxy_buffering off ("nginx", streaming like
#                     the gateway), on ("nginx-buffered", nginx's default), or both
# Sizes take head(1)'s suffixes K, M, G (powers of 1024). SLUICE_BIN overrides build/sluice.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

SIZE=1G
PAR_SIZE=100M
PARALLEL=10
IDLE=10000
REPEAT=3
NGINX_BUFFERING=both
DO_TRANSFERS=1
DO_IDLE=1
while (($#)); do
  case "$1" in
    --size) SIZE="$2"; shift 2 ;;
    --parallel-size) PAR_SIZE="$2"; shift 2 ;;
    --parallel) PARALLEL="$2"; shift 2 ;;
    --idle) IDLE="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --nginx-buffering) NGINX_BUFFERING="$2"; shift 2 ;;
    --skip-transfers) DO_TRANSFERS=0; shift ;;
    --skip-idle) DO_IDLE=0; shift ;;
    -h|--help) bench_help "$0" ;;
    *) echo "stream.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $NGINX_BUFFERING =~ ^(on|off|both)$ ]] ||
  { echo "stream.sh: --nginx-buffering takes on, off or both" >&2; exit 2; }
SIZE_B=$(numfmt --from=iec "$SIZE") || { echo "stream.sh: bad --size $SIZE" >&2; exit 2; }
PAR_B=$(numfmt --from=iec "$PAR_SIZE") || { echo "stream.sh: bad --parallel-size" >&2; exit 2; }

SLUICE="${SLUICE_BIN:-build/sluice}"
[[ -x "$SLUICE" ]] || scripts/setup >/dev/null
for p in nginx-light wrk curl python3; do
  command -v "${p%-light}" >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null; }
done

# Descriptors for the idle connections (the gateway and the client inherit this limit). The
# gateway's automatic connection cap counts two descriptors per client (its own and an
# upstream's, client.max_connections in docs/operating.md), so it needs 2 x IDLE and a reserve.
want_fds=$((2 * IDLE + 4096))
ulimit -n "$want_fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if (($(ulimit -n) < 2 * IDLE + 200)); then
  echo "stream.sh: only $(ulimit -n) descriptors available; --idle lowered" >&2
  IDLE=$((($(ulimit -n) - 200) / 2))
fi

BENCH_WORK="$(mktemp -d -t sluice-stream.XXXXXX)"
OUT=$BENCH_WORK
chmod 755 "$OUT"  # the origin nginx's worker runs unprivileged and serves files from it
BENCH_PIDS=()
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }

# --- helpers: upload sink, hashing, RSS sampler, idle-connection client ----------------------
cat > "$OUT/tools.py" <<'PY'
import asyncio, hashlib, http.server, json, os, re, signal, socketserver, sys, time

def sink(port_file):
    """HTTP/1.1 server: POST/PUT streams the body into SHA-256, answers {"sha256", "bytes"}."""
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *a): pass
        def body_chunks(self):
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""): pass
                        return
                    left = size
                    while left:
                        b = self.rfile.read(min(left, 1 << 20))
                        if not b: raise ConnectionError("short chunk")
                        left -= len(b); yield b
                    self.rfile.readline()
            else:
                left = int(self.headers.get("Content-Length", "0"))
                view = memoryview(bytearray(1 << 20))
                while left:
                    n = self.rfile.readinto(view[:min(left, len(view))])
                    if not n: raise ConnectionError("short body")
                    left -= n; yield view[:n]
        def do_POST(self):
            h, n = hashlib.sha256(), 0
            for b in self.body_chunks():
                h.update(b); n += len(b)
            body = json.dumps({"sha256": h.hexdigest(), "bytes": n}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_PUT = do_POST
    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True
    srv = Server(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f: f.write(str(srv.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    srv.serve_forever()

def hash_stream(f):
    h, total = hashlib.sha256(), 0
    view = memoryview(bytearray(1 << 20))
    while n := f.readinto(view):
        h.update(view[:n]); total += n
    return h.hexdigest(), total

def rss(pid, out):
    """Samples VmRSS of pid every 50 ms until SIGTERM; writes 'first peak last samples' (kB)."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    def read():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"): return int(line.split()[1])
        except OSError: return None
    first = read() or 0; peak = last = first; n = 1
    open(out + ".ready", "w").close()
    while not stop:
        time.sleep(0.05)
        v = read()
        if v is None: break
        peak, last, n = max(peak, v), v, n + 1
    with open(out, "w") as f: f.write(f"{first} {peak} {last} {n}\n")

async def idle(host, port, path, count, status_file, hold, concurrency=200):
    """Opens `count` keep-alive connections, one request each, then holds them open."""
    req = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    conns, errors = [], {}
    sem = asyncio.Semaphore(concurrency)
    def err(kind): errors[kind] = errors.get(kind, 0) + 1
    async def open_one():
        async with sem:
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
            except Exception as e:
                err("connect: " + type(e).__name__); return
            try:
                w.write(req)
                head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
                status = int(head.split(b" ", 2)[1])
                m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                await asyncio.wait_for(r.readexactly(int(m.group(1)) if m else 0), 10)
                if status != 200: err(f"HTTP {status}")
                elif re.search(rb"(?i)\r\nconnection:\s*close", head): err("connection: close")
                else: conns.append((r, w)); return
            except Exception as e:
                err("request: " + type(e).__name__)
            w.close()
    t0 = time.monotonic()
    await asyncio.gather(*(open_one() for _ in range(count)))
    opened_s = time.monotonic() - t0
    closed = []
    async def watch(r):
        try: await r.read(1)
        except Exception: pass
        closed.append(time.monotonic() - t0)
    watchers = [asyncio.ensure_future(watch(r)) for r, _ in conns]
    state = {"requested": count, "open": len(conns), "errors": errors,
             "open_seconds": round(opened_s, 2)}
    with open(status_file + ".tmp", "w") as f: json.dump(state, f)
    os.rename(status_file + ".tmp", status_file)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try: await asyncio.wait_for(stop.wait(), hold)
    except asyncio.TimeoutError: pass
    state["closed_by_peer"] = len(closed)
    state["first_close_after_s"] = round(min(closed), 1) if closed else "-"
    state["still_open"] = len(conns) - len(closed)
    for w in watchers: w.cancel()
    for _, w in conns: w.close()
    with open(status_file + ".final", "w") as f: json.dump(state, f)

def wrk_summary(path):
    """requests/s, p50, p99, avg latency (ms) and errors of a wrk --latency report."""
    text = open(path).read()
    def ms(v):
        m = re.match(r"([\d.]+)(us|ms|s|m)", v)
        return float(m.group(1)) * {"us": 1e-3, "ms": 1, "s": 1e3, "m": 6e4}[m.group(2)] if m else float("nan")
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    avg = re.search(r"Latency\s+(\S+)", text)
    p50 = re.search(r"\s50%\s+(\S+)", text)
    p99 = re.search(r"\s99%\s+(\S+)", text)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    errs = (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, sock.groups())) if sock else 0)
    if not rps:
        print("nan nan nan nan 1"); return
    print(f"{float(rps.group(1)):.0f} {ms(p50.group(1)):.3f} {ms(p99.group(1)):.3f} "
          f"{ms(avg.group(1)):.3f} {errs}")

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "sink": sink(args[0])
    elif cmd == "hash":
        d, n = hash_stream(sys.stdin.buffer); print(d, n)
    elif cmd == "filehash":
        with open(args[0], "rb") as f: d, n = hash_stream(f)
        print(d, n)
    elif cmd == "rss": rss(int(args[0]), args[1])
    elif cmd == "idle":
        asyncio.run(idle(args[0], int(args[1]), args[2], int(args[3]), args[4], float(args[5])))
    elif cmd == "wrk": wrk_summary(args[0])
PY
PY="$OUT/tools.py"

# --- upstreams ------------------------------------------------------------------------------
mkdir -p "$OUT/www/files" "$OUT/origin" "$OUT/front"
head -c 1024 /dev/urandom > "$OUT/www/files/small.bin"
OP=$(bench_free_port); NP=$(bench_free_port); GP=$(bench_free_port)
cat > "$OUT/origin/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $OUT/origin/nginx.pid;
error_log $OUT/origin/error.log warn;
worker_rlimit_nofile $((IDLE + 4096));
events { worker_connections $((IDLE + 2048)); }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  client_body_temp_path $OUT/origin/body;
  proxy_temp_path $OUT/origin/proxy;
  fastcgi_temp_path $OUT/origin/fastcgi;
  uwsgi_temp_path $OUT/origin/uwsgi;
  scgi_temp_path $OUT/origin/scgi;
  server { listen 127.0.0.1:$OP; root $OUT/www; location /files/ { } }
}
NGINX
nginx -c "$OUT/origin/nginx.conf" -p "$OUT/origin" -e "$OUT/origin/error.log" & BENCH_PIDS+=($!)
python3 "$PY" sink "$OUT/sink.port" & BENCH_PIDS+=($!)
for _ in $(seq 100); do [[ -f "$OUT/sink.port" ]] && break; sleep 0.05; done
SP=$(cat "$OUT/sink.port")

# --- nginx in front: one per proxy_buffering setting measured ------------------------------
front_nginx() {  # name port buffering(on|off)
  local d="$OUT/$1"
  mkdir -p "$d"
  cat > "$d/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $d/nginx.pid;
error_log $d/error.log warn;
worker_rlimit_nofile $((IDLE + 4096));
events { worker_connections $((IDLE + 2048)); }
http {
  access_log off;
  client_max_body_size 0;
  proxy_request_buffering off;
  proxy_buffering $3;
  proxy_http_version 1.1;
  proxy_read_timeout 120s;
  proxy_send_timeout 120s;
  client_body_temp_path $d/body;
  proxy_temp_path $d/proxy;
  fastcgi_temp_path $d/fastcgi;
  uwsgi_temp_path $d/uwsgi;
  scgi_temp_path $d/scgi;
  upstream origin { server 127.0.0.1:$OP; keepalive 32; }
  upstream sink { server 127.0.0.1:$SP; keepalive 32; }
  server {
    listen 127.0.0.1:$2;
    location /files/ { proxy_pass http://origin; proxy_set_header Connection ""; }
    location /upload { proxy_pass http://sink; proxy_set_header Connection ""; }
  }
}
NGINX
  nginx -c "$d/nginx.conf" -p "$d" -e "$d/error.log" & BENCH_PIDS+=($!)
}
# "nginx" streams (proxy_buffering off: the same contract as the gateway); "nginx-buffered"
# is nginx's default (proxy_buffering on: responses buffered in memory, then in temp files).
VIAS=(direct)
declare -A PORT=([direct]=$OP [gateway]=$GP)
declare -A UPORT=([direct]=$SP [gateway]=$GP)
if [[ $NGINX_BUFFERING == off || $NGINX_BUFFERING == both ]]; then
  front_nginx nginx "$NP" off; VIAS+=(nginx); PORT[nginx]=$NP; UPORT[nginx]=$NP
fi
if [[ $NGINX_BUFFERING == on || $NGINX_BUFFERING == both ]]; then
  NBP=$(bench_free_port)
  front_nginx nginx-buffered "$NBP" on; VIAS+=(nginx-buffered)
  PORT[nginx-buffered]=$NBP; UPORT[nginx-buffered]=$NBP
fi
VIAS+=(gateway)

# --- the gateway ------------------------------------------------------------------------------
write_rules() {  # with_streaming_keys(0|1)
  local extra=""
  (($1)) && extra="    max_request_body: unlimited"$'\n'"    max_response_body: unlimited"$'\n'
  {
    (($1)) && echo "drain_timeout: 5s"  # the clean-up's SIGTERM waits for no long drain
    echo "listen: 127.0.0.1:$GP"
    echo "workers: 1"
    echo "store: {type: memory}"
    echo "upstreams:"
    echo "  origin: {url: \"http://127.0.0.1:$OP\", timeout: 120s}"
    echo "  sink: {url: \"http://127.0.0.1:$SP\", timeout: 120s}"
    echo "routes:"
    echo "  - name: files"
    echo "    match: {path_prefix: /files/}"
    echo "    upstream: origin"
    printf '%s' "$extra"
    echo "    limits: [{name: files_ip, by: ip, rate: 1000000/1s, burst: 1000000}]"
    echo "  - name: upload"
    echo "    match: {path: /upload, methods: [POST, PUT]}"
    echo "    upstream: sink"
    printf '%s' "$extra"
    echo "    limits: [{name: upload_ip, by: ip, rate: 1000000/1s, burst: 1000000}]"
  } > "$OUT/rules.yaml"
}
write_rules 1
BODY_NOTE="routes with max_request_body: unlimited"
if ! "$SLUICE" --check-config "$OUT/rules.yaml" > "$OUT/check.txt" 2>&1; then
  echo "note: $SLUICE refuses the streaming keys (max_request_body, max_response_body, drain_timeout):" >&2
  sed 's/^/  /' "$OUT/check.txt" >&2
  echo "note: running without them: this build's own body limits apply" >&2
  BODY_NOTE="this build does not know max_request_body: its fixed body limits apply"
  write_rules 0
  "$SLUICE" --check-config "$OUT/rules.yaml" > "$OUT/check.txt" 2>&1 ||
    { cat "$OUT/check.txt" >&2; exit 1; }
fi
"$SLUICE" --config "$OUT/rules.yaml" --no-watch --log-level warn 2> "$OUT/gateway.log" & GPID=$!
BENCH_PIDS+=("$GPID")
for via in "${VIAS[@]}"; do bench_wait_port "${PORT[$via]}"; done
RESULTS=()   # markdown rows of the transfer table
IDLE_ROWS=() # markdown rows of the connection table
MEASURED=0   # transfers completed and idle connection runs made

# Generous bounds: at least 60 s, or 5 MB/s; a transfer stalled for 15 s is aborted.
max_time() { awk -v b="$1" 'BEGIN { t = b / 5e6; printf "%d", (t < 60 ? 60 : t) }'; }
CURL=(curl -sS --speed-limit 1 --speed-time 15 --connect-timeout 5)
# curl's result on stderr: status, bytes moved (downloaded, or uploaded) and seconds.
WFMT='%{stderr}RESULT %{http_code} %{size_download} %{time_total}\n'
WFMT_UP='%{stderr}RESULT %{http_code} %{size_upload} %{time_total}\n'

sampler_start() {  # name: samples until sampler_stop; returns once the first sample is taken
  python3 "$PY" rss "$GPID" "$OUT/rss.$1" & SAMPLER=$!
  BENCH_PIDS+=("$SAMPLER")
  for _ in $(seq 100); do [[ -f "$OUT/rss.$1.ready" ]] && break; sleep 0.02; done
}
sampler_stop() {  # name -> RSS_GROWTH RSS_PEAK RSS_BEFORE (kB)
  kill -TERM "$SAMPLER" 2>/dev/null || true
  wait "$SAMPLER" 2>/dev/null || true
  read -r RSS_BEFORE RSS_PEAK _ < "$OUT/rss.$1" || { RSS_BEFORE=0; RSS_PEAK=0; }
  RSS_GROWTH=$((RSS_PEAK - RSS_BEFORE))
}
rss_text() { echo "$(mib "$RSS_GROWTH") ($(mib "$RSS_BEFORE") → $(mib "$RSS_PEAK"))"; }
gateway_alive() {
  kill -0 "$GPID" 2>/dev/null && return 0
  echo "stream.sh: the gateway exited; its log:" >&2; tail -20 "$OUT/gateway.log" >&2; return 1
}

# One download (via, file, expected sha256, bytes, tag[, "sum-only"]): REPEAT timed passes to
# /dev/null (the MB/s, their median: the client does no hashing), then a pass hashed with
# SHA-256 (the check). With "sum-only", the hashed pass alone, timed. Sets R_OK, R_MBPS,
# R_STATUS.
download() {
  local via=$1 file=$2 want=$3 bytes=$4 tag=$5 only=${6:-} rc=0 rc2=0 url
  url="http://127.0.0.1:${PORT[$via]}/files/$file"
  : > "$OUT/$tag.err"
  if [[ $only != sum-only ]]; then
    for _ in $(seq "$REPEAT"); do
      "${CURL[@]}" --max-time "$(max_time "$bytes")" -o /dev/null -w "$WFMT" "$url" \
        2>> "$OUT/$tag.err" || rc=$?
      grep -q '^RESULT 200 ' <(tail -1 "$OUT/$tag.err") || break
    done
  fi
  "${CURL[@]}" --max-time "$(max_time "$bytes")" -o - -w "$WFMT" "$url" \
    2> "$OUT/$tag.sum.err" | python3 "$PY" hash > "$OUT/$tag.sha" || rc2=$?
  if [[ $only == sum-only ]]; then cp "$OUT/$tag.sum.err" "$OUT/$tag.err"; rc=$rc2; fi
  if grep -q '^RESULT [45]' "$OUT/$tag.err"; then  # a refusal: fetch its (small) body again
    curl -s --max-time 30 "$url" 2>/dev/null | head -c 4096 > "$OUT/$tag.refusal" || true
    problem_detail "$OUT/$tag.refusal" > "$OUT/$tag.detail"
  fi
  report_transfer "$tag" "$want" "$bytes" "$rc" download
  if ((R_OK)) && [[ $only != sum-only ]] && ! grep -q '^RESULT 200 ' "$OUT/$tag.sum.err"; then
    R_OK=0
    R_STATUS="FAIL: the hashed pass got $(grep '^RESULT' "$OUT/$tag.sum.err" | tail -1 || true)"
  fi
}

# REPEAT uploads of file to the sink, which answers the digest of what it received (each run
# is checked; the MB/s is their median).
upload() {
  local via=$1 file=$2 want=$3 bytes=$4 tag=$5 rc=0 got
  : > "$OUT/$tag.err"
  for _ in $(seq "$REPEAT"); do
    # Expect: 100-continue is turned off so no path waits for curl's 1 s expect timeout.
    "${CURL[@]}" --max-time "$(max_time "$bytes")" -X POST -T "$file" -H 'Expect:' \
      -H 'Content-Type: application/octet-stream' -o "$OUT/$tag.body" -w "$WFMT_UP" \
      "http://127.0.0.1:${UPORT[$via]}/upload" 2>> "$OUT/$tag.err" || rc=$?
    python3 -c 'import json,sys
try: d = json.load(open(sys.argv[1])); print(d["sha256"], d["bytes"])
except Exception: print("none 0")' "$OUT/$tag.body" > "$OUT/$tag.sha"
    read -r got _ < "$OUT/$tag.sha"
    [[ $rc == 0 && $got == "$want" ]] || break
  done
  problem_detail "$OUT/$tag.body" > "$OUT/$tag.detail"
  report_transfer "$tag" "$want" "$bytes" "$rc" upload
}

# The `detail` of a problem+json body in FILE (or its first line when it is not one).
problem_detail() {
  python3 -c 'import json,sys
raw = open(sys.argv[1], "rb").read(4096).decode("utf-8", "replace")
try: print(json.loads(raw).get("detail", raw[:160]))
except Exception: print(raw.splitlines()[0][:160] if raw.strip() else "")' "$1" 2>/dev/null || true
}

# Sets R_OK (0/1), R_MBPS (median of the complete runs), R_STATUS from curl's RESULT lines
# (code, bytes moved, seconds) and the digest.
report_transfer() {
  local tag=$1 want=$2 bytes=$3 rc=$4 kind=$5 code moved secs got gotn bad
  read -r _ code moved secs < <(grep '^RESULT' "$OUT/$tag.err" | tail -1 || echo "RESULT 000 0 0")
  code=${code:-000}; moved=${moved:-0}; secs=${secs:-0}
  bad=$(awk -v b="$bytes" '/^RESULT/ && ($2 != 200 || $3 != b) { n++ } END { print n + 0 }' \
    "$OUT/$tag.err")
  read -r got gotn < "$OUT/$tag.sha" || { got=none; gotn=0; }
  R_MBPS=$(awk -v b="$bytes" '/^RESULT/ && $2 == 200 && $3 == b && $4 > 0 { print $3 / $4 / 1e6 }' \
    "$OUT/$tag.err" | sort -n | awk '{ v[NR] = $1 } END { printf "%.1f", (NR ? v[int((NR + 1) / 2)] : 0) }')
  if [[ $rc == 0 && $bad == 0 && $code == 200 && $got == "$want" && $gotn == "$bytes" ]]; then
    R_OK=1; R_STATUS="ok, sha256 matches"
  else
    R_OK=0
    local why
    why=$(grep -v '^RESULT' "$OUT/$tag.err" | head -1 | cut -c1-80 || true)
    R_STATUS="FAIL: HTTP $code, curl exit $rc, $kind ${moved} B in ${secs}s, received $gotn B"
    if [[ $code =~ ^[45] && -s "$OUT/$tag.detail" ]]; then
      R_STATUS+=", detail: \"$(head -c 160 "$OUT/$tag.detail" | tr -d '|\n')\""
    fi
    if [[ $got != none && $gotn == "$bytes" && $got != "$want" ]]; then
      R_STATUS+=", sha256 DIFFERS"
    fi
    if [[ -n $why ]]; then R_STATUS+=" ($why)"; fi
  fi
}

transfer_rows() {  # kind label file want bytes
  local kind=$1 label=$2 file=$3 want=$4 bytes=$5 via ratio growth n
  declare -A mb=()
  for via in "${VIAS[@]}"; do
    gateway_alive || return 0
    [[ $via == gateway ]] && sampler_start "$kind"
    "$kind" "$via" "$file" "$want" "$bytes" "$kind-$via"
    growth="n/a"
    if [[ $via == gateway ]]; then
      sampler_stop "$kind"
      growth=$(rss_text)
    fi
    mb[$via]=0
    if ((R_OK)); then mb[$via]=$R_MBPS; MEASURED=$((MEASURED + 1)); fi
    ratio=""
    if [[ $via == gateway ]]; then
      for n in nginx nginx-buffered; do
        [[ -n ${PORT[$n]:-} ]] || continue
        ratio+="${ratio:+ / }$(awk -v g="${mb[gateway]}" -v n="${mb[$n]}" \
          'BEGIN { if (g > 0 && n > 0) printf "%.2f", g / n; else printf "n/a" }')"
        [[ $n == nginx-buffered ]] && ratio+=" (buffered)"
      done
    fi
    local mbps=$R_MBPS; ((R_OK)) || mbps="-"
    RESULTS+=("| $label | $via | $R_STATUS | $mbps | $ratio | $growth |")
    echo "  $label via $via: $R_STATUS, $R_MBPS MB/s" >&2
  done
}

echo "sluice stream run: $(nproc) cores, size $SIZE, $PARALLEL x $PAR_SIZE parallel, $IDLE idle" \
  "connections, nginx proxy_buffering $NGINX_BUFFERING, $BODY_NOTE" >&2

if ((DO_TRANSFERS)); then
  echo "making $SIZE and $PAR_SIZE of random data..." >&2
  head -c "$SIZE_B" /dev/urandom > "$OUT/www/files/big.bin"
  read -r BIG_SHA _ < <(python3 "$PY" filehash "$OUT/www/files/big.bin")
  echo "1. one download and one upload of $SIZE" >&2
  transfer_rows download "download $SIZE" big.bin "$BIG_SHA" "$SIZE_B"
  transfer_rows upload "upload $SIZE" "$OUT/www/files/big.bin" "$BIG_SHA" "$SIZE_B"
  rm -f "$OUT/www/files/big.bin"

  echo "2. $PARALLEL concurrent downloads of $PAR_SIZE through the gateway" >&2
  head -c "$PAR_B" /dev/urandom > "$OUT/www/files/par.bin"
  read -r PAR_SHA _ < <(python3 "$PY" filehash "$OUT/www/files/par.bin")
  if gateway_alive; then
    sampler_start parallel
    t0=$(date +%s.%N)
    jobs_=()
    for i in $(seq "$PARALLEL"); do
      download gateway par.bin "$PAR_SHA" "$PAR_B" "par-$i" sum-only > /dev/null &
      jobs_+=($!)
    done
    for j in "${jobs_[@]}"; do wait "$j" || true; done
    t1=$(date +%s.%N)
    sampler_stop parallel
    ok=0; total=0; fails=()
    for i in $(seq "$PARALLEL"); do
      report_transfer "par-$i" "$PAR_SHA" "$PAR_B" 0 download
      read -r _ _ moved _ < <(grep '^RESULT' "$OUT/par-$i.err" | tail -1 || echo "RESULT 0 0 0")
      total=$((total + ${moved:-0}))
      if ((R_OK)); then ok=$((ok + 1)); else fails+=("$R_STATUS"); fi
    done
    agg=$(awk -v b="$total" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.1f", b / (z - a) / 1e6 }')
    status="$ok/$PARALLEL ok, sha256 matches"
    ((ok == PARALLEL)) || status="FAIL: $ok/$PARALLEL ok; first failure: ${fails[0]}"
    MEASURED=$((MEASURED + ok))
    RESULTS+=("| $PARALLEL x download $PAR_SIZE (aggregate) | gateway | $status | $agg | | $(rss_text) |")
    echo "  $status, $agg MB/s aggregate" >&2
  fi
  rm -f "$OUT/www/files/par.bin"
fi

wrk_run() {  # tag -> "rps p50 p99 avg errors"
  timeout 40 wrk -t1 -c10 -d10s --timeout 5s --latency \
    "http://127.0.0.1:$GP/files/small.bin" > "$OUT/wrk.$1" 2>&1 || true
  python3 "$PY" wrk "$OUT/wrk.$1"
}
latency_row() {  # label "rps p50 p99 avg errors"
  local label=$1 rps p50 p99 avg errs
  read -r rps p50 p99 avg errs <<< "$2"
  IDLE_ROWS+=("| wrk 10 s, 10 connections, $label | $rps req/s, p50 $p50 ms, p99 $p99 ms, avg $avg ms, errors $errs |")
}

if ((DO_IDLE)) && gateway_alive; then
  echo "3. $IDLE idle keep-alive connections" >&2
  base=$(wrk_run without)
  echo "  without: $base (req/s p50 p99 avg errors)" >&2
  latency_row "without the idle connections" "$base"
  before=$(rss_kb "$GPID")
  sampler_start idle
  python3 "$PY" idle 127.0.0.1 "$GP" /files/small.bin "$IDLE" "$OUT/idle.json" 180 &
  IPID=$!; BENCH_PIDS+=("$IPID")
  for _ in $(seq 1200); do [[ -f "$OUT/idle.json" ]] && break; kill -0 "$IPID" 2>/dev/null || break; sleep 0.1; done
  if [[ -f "$OUT/idle.json" ]]; then
    sleep 1
    after=$(rss_kb "$GPID")
    read -r open_n open_s errs < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(d["open"], d["open_seconds"], json.dumps(d["errors"]) if d["errors"] else "none")' "$OUT/idle.json")
    IDLE_ROWS+=("| connections opened (one request each) | $open_n of $IDLE in ${open_s}s; errors: ${errs//|/\/} |")
    ((open_n > 0)) && MEASURED=$((MEASURED + 1))
    IDLE_ROWS+=("| gateway RSS before → after | $(mib "$before") → $(mib "$after") (+$(mib $((after - before)))) |")
    per=$(awk -v d="$((after - before))" -v n="$open_n" 'BEGIN { printf "%.0f", (n > 0 ? d * 1024 / n : 0) }')
    IDLE_ROWS+=("| gateway RSS per open connection | $per bytes |")
    with=$(wrk_run with)
    echo "  with: $with" >&2
    latency_row "with $open_n idle connections open" "$with"
    kill -TERM "$IPID" 2>/dev/null || true
    for _ in $(seq 100); do [[ -f "$OUT/idle.json.final" ]] && break; sleep 0.1; done
    wait "$IPID" 2>/dev/null || true
    if [[ -f "$OUT/idle.json.final" ]]; then
      read -r still closed first < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(d["still_open"], d["closed_by_peer"], d["first_close_after_s"])' "$OUT/idle.json.final")
      first_txt=""; [[ $first != - ]] && first_txt=", the first ${first}s after the client started"
      IDLE_ROWS+=("| idle connections still open after the loaded run | $still (closed by the gateway: $closed$first_txt) |")
    fi
    sampler_stop idle
    sleep 1
    IDLE_ROWS+=("| gateway RSS peak / after the client closed them | $(mib "$RSS_PEAK") / $(mib "$(rss_kb "$GPID")") |")
  else
    sampler_stop idle
    IDLE_ROWS+=("| connections opened | FAIL: the idle client did not finish opening within 120 s |")
  fi
fi

gateway_alive || RESULTS+=("| gateway | | FAIL: the gateway exited (see above) | | | |")
echo
echo "## sluice stream run"
echo
echo "$(nproc) cores (load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)), loopback;"
echo "gateway $SLUICE (memory store, 1 worker; $BODY_NOTE);"
echo "nginx $(nginx -v 2>&1 | sed 's/.*nginx\///') 1 worker, proxy_request_buffering off," \
  "client_max_body_size 0: \"nginx\" with proxy_buffering off, \"nginx-buffered\" with it on" \
  "(the default); MB = 10^6 bytes; curl sends no Expect: 100-continue."
if ((${#RESULTS[@]})); then
  echo
  echo "| transfer | path | result | MB/s | gateway/nginx | gateway RSS growth (before → peak) |"
  echo "| --- | --- | --- | ---: | ---: | --- |"
  printf '%s\n' "${RESULTS[@]}"
fi
if ((${#IDLE_ROWS[@]})); then
  echo
  echo "| $IDLE idle keep-alive connections to the gateway | |"
  echo "| --- | --- |"
  printf '%s\n' "${IDLE_ROWS[@]}"
fi
if [[ -s "$OUT/gateway.log" ]]; then
  echo
  echo "gateway log (last lines):"
  tail -5 "$OUT/gateway.log" | cut -c1-200 | sed 's/^/    /'
fi
((MEASURED)) || bench_measured_nothing stream.sh "no transfer completed and no idle connection was opened"
