# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Helpers shared by the bench scripts (sourced, not run): free loopback ports, waiting for a
# port, CPU ticks of a process tree, the CPUs a script may use, config templates, h2load's
# figures, and a real Redis Cluster started and stopped by pid. Every wait has a bound. The
# caller sets BENCH_PIDS=() and stops them on exit (bench_stop_all, or `trap bench_cleanup
# EXIT`, which also removes BENCH_WORK, its temporary directory). A run that measured nothing
# ends with bench_measured_nothing (exit 3), never with a row of zeros.

# A free 127.0.0.1 port: the kernel's pick for port 0, on which nothing listens now.
bench_free_port() {
  local p
  for _ in $(seq 50); do
    p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    echo "$p"
    return 0
  done
  echo "no free port found" >&2
  return 1
}

# bench_wait_port PORT [PID] [LOG]: until 127.0.0.1:PORT accepts a connection (10 s at most),
# or at once when process PID (the server that should listen there) has exited; on failure the
# last 20 lines of LOG (the server's output) go to stderr.
bench_wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    if [[ -n ${2:-} ]] && ! kill -0 "$2" 2>/dev/null; then
      echo "port $1 never opened: process $2 exited" >&2
      if [[ -n ${3:-} ]]; then tail -20 "$3" >&2 || true; fi
      return 1
    fi
    sleep 0.05
  done
  echo "port $1 never opened" >&2
  if [[ -n ${3:-} ]]; then tail -20 "$3" >&2 || true; fi
  return 1
}

# bench_tree_ticks PID: utime + stime of the process and its descendants, in clock ticks.
bench_tree_ticks() {
  local queue=("$1") p t=0 v
  while ((${#queue[@]})); do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    [[ -d /proc/$p ]] || continue
    v=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 }') || v=0
    t=$((t + ${v:-0}))
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do queue+=("$c"); done
  done
  echo "$t"
}

# bench_cpus: the CPUs this shell may run on (its affinity list expanded), space-separated.
bench_cpus() {
  taskset -c -p $$ | awk -F': ' '{ print $2 }' | tr ',' '\n' |
    awk -F- '{ b = $1; e = (NF > 1 ? $2 : $1); for (i = b; i <= e; i++) printf "%d ", i }'
}

# bench_fill TEMPLATE OUTPUT KEY=value...: OUTPUT is TEMPLATE with every @KEY@ replaced by value
# (values must not hold `|`).
bench_fill() {
  local tpl=$1 out=$2 expr=() kv
  shift 2
  for kv in "$@"; do expr+=(-e "s|@${kv%%=*}@|${kv#*=}|g"); done
  sed "${expr[@]}" "$tpl" >"$out"
}

# bench_h2load_counts OUTPUT: "<succeeded> <2xx> <non-2xx> <failed+errored+timeout> <seconds>"
# from h2load's summary (`finished in 3.00s, ...`, `requests: ...`, `status codes: ...`);
# nothing when there is no summary.
bench_h2load_counts() {
  awk '
    /^finished in/ { t = $3; sub(/,$/, "", t); u = 1
      if (t ~ /ms$/) { u = 0.001; sub(/ms$/, "", t) } else if (t ~ /us$/) { u = 1e-6; sub(/us$/, "", t) } else sub(/s$/, "", t)
      secs = t * u }
    /^requests:/ { for (i = 2; i < NF; i++) { w = $(i + 1); sub(/,$/, "", w)
        if (w == "succeeded") ok = $i; if (w == "failed" || w == "errored" || w == "timeout") bad += $i } }
    /^status codes:/ { for (i = 3; i < NF; i++) { w = $(i + 1); sub(/,$/, "", w)
        if (w == "2xx") s2 = $i; else if (w ~ /^[345]xx$/) other += $i } }
    END { if (secs != "" && ok != "") printf "%d %d %d %d %.3f\n", ok, s2, other, bad, secs }' "$1"
}

# bench_h2load_percentiles LOG P...: the P-th percentiles (nearest rank) of the request
# durations in h2load's --log-file (third column, µs), one line, space-separated; nothing for
# an empty log.
bench_h2load_percentiles() {
  local log=$1
  shift
  awk '{ print $3 }' "$log" | sort -n | awk -v ps="$*" '
    { v[NR] = $1 }
    END { if (!NR) exit; n = split(ps, p, " ")
      for (i = 1; i <= n; i++) { r = int(NR * p[i] / 100 + 0.5); if (r < 1) r = 1; if (r > NR) r = NR
        printf "%s%s", (i > 1 ? " " : ""), v[r] }
      print "" }'
}

# bench_help SCRIPT: prints the script's leading comment (its usage) and exits 0.
bench_help() {
  awk 'NR == 1 { next } /^#/ { if ($0 ~ /SPDX-License-Identifier|shellcheck/) next
      sub(/^# ?/, ""); print; next } { exit }' "$1"
  exit 0
}

# bench_measured_nothing SCRIPT WHAT: says on stderr that the run measured nothing and why
# (no request completed, no bucket made, no decision counted...), and exits 3. Call it from the
# script's own shell, not from a $(...) substitution.
bench_measured_nothing() {
  echo "$1: measured nothing: $2" >&2
  exit 3
}

# bench_cleanup: bench_stop_all, then removes BENCH_WORK when set; for `trap bench_cleanup EXIT`.
bench_cleanup() {
  bench_stop_all
  if [[ -n ${BENCH_WORK:-} ]]; then rm -rf "$BENCH_WORK"; fi
}

# bench_guarded_exit NAME: for `trap 'bench_guarded_exit NAME' EXIT` in a script that runs under
# its own time guard (timeout): bench_cleanup, and a line saying the guard or a signal stopped
# NAME when the status is 124 or 143; the script's status is kept.
bench_guarded_exit() {
  local rc=$?
  trap - EXIT INT TERM
  bench_cleanup
  if ((rc == 124 || rc == 143)); then echo "$1: stopped by the time guard or a signal" >&2; fi
  exit "$rc"
}

# Stops every pid in BENCH_PIDS (last started first), SIGKILL after 5 s.
bench_stop_all() {
  local i p alive
  for ((i = ${#BENCH_PIDS[@]} - 1; i >= 0; i--)); do kill "${BENCH_PIDS[$i]}" 2>/dev/null || true; done
  for _ in $(seq 50); do
    alive=0
    for p in "${BENCH_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${BENCH_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  BENCH_PIDS=()
}

# bench_redis NAME: a plain redis-server (no persistence) on a free port; sets REDIS_PORT and
# REDIS_PID (also in BENCH_PIDS).
bench_redis() {
  REDIS_PORT=$(bench_free_port)
  mkdir -p "$BENCH_WORK/$1"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$BENCH_WORK/$1" >"$BENCH_WORK/$1/redis.log" 2>&1 &
  REDIS_PID=$!
  BENCH_PIDS+=("$REDIS_PID")
  bench_wait_port "$REDIS_PORT"
}

# bench_cluster MASTERS: a Redis Cluster of MASTERS masters and no replicas on free ports (each
# node its own dir, cluster config file and bus port `cluster-port`), made with
# `redis-cli --cluster create`; returns once every node reports cluster_state:ok (30 s at most).
# Sets CLUSTER_PORTS and CLUSTER_PIDS (also in BENCH_PIDS) and CLUSTER_SEEDS (a YAML list).
bench_cluster() {
  local n=$1 i port bus addrs=()
  CLUSTER_PORTS=() CLUSTER_PIDS=() CLUSTER_SEEDS=""
  for ((i = 0; i < n; i++)); do
    port=$(bench_free_port)
    bus=$(bench_free_port)
    mkdir -p "$BENCH_WORK/node$port"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
      --dir "$BENCH_WORK/node$port" --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-port "$bus" --cluster-node-timeout 2000 \
      >"$BENCH_WORK/node$port/redis.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    BENCH_PIDS+=($!)
    CLUSTER_PORTS+=("$port")
    addrs+=("127.0.0.1:$port")
    CLUSTER_SEEDS+="${CLUSTER_SEEDS:+, }\"127.0.0.1:$port\""
  done
  CLUSTER_SEEDS="[$CLUSTER_SEEDS]"
  for port in "${CLUSTER_PORTS[@]}"; do bench_wait_port "$port"; done
  timeout 30 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
    >"$BENCH_WORK/cluster-create.log" 2>&1 ||
    { cat "$BENCH_WORK/cluster-create.log" >&2; return 1; }
  for _ in $(seq 300); do
    local ok=1
    for port in "${CLUSTER_PORTS[@]}"; do
      redis-cli -p "$port" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' || ok=0
    done
    ((ok)) && return 0
    sleep 0.1
  done
  echo "the cluster never reported cluster_state:ok" >&2
  return 1
}

# bench_cluster_flush: FLUSHALL on every master of the cluster.
bench_cluster_flush() {
  local port
  for port in "${CLUSTER_PORTS[@]}"; do redis-cli -p "$port" FLUSHALL >/dev/null; done
}

# bench_keys_per_node PORT...: "a/b/c", the sluice keys (sl:*) each node holds.
bench_keys_per_node() {
  local port out=""
  for port in "$@"; do
    out+="${out:+/}$(redis-cli -p "$port" --scan --pattern 'sl:*' | wc -l)"
  done
  echo "$out"
}

# bench_supports FIELD LIMIT_YAML: whether this build's rules loader accepts a limit with that
# field (a rules-file check, nothing started); prints the loader's error when it does not.
bench_supports() {
  local f="$BENCH_WORK/supports-$1.yaml"
  cat >"$f" <<YAML
listen: 127.0.0.1:0
store: {type: redis-cluster, nodes: ["127.0.0.1:1"]}
upstreams: {api: {url: "http://127.0.0.1:1"}}
routes:
  - {name: r, match: {path_prefix: /}, upstream: api, limits: [$2]}
YAML
  local err
  if err=$("$SLUICE" --check-config "$f" 2>&1); then return 0; fi
  # The loader's diagnostics without the temporary file's path and the error count.
  BENCH_UNSUPPORTED_WHY=$(grep -v ' error(s)$' <<<"$err" | sed 's|^[^ ]*\.yaml:[0-9]*: ||' |
    tr '\n' ' ' | sed 's/ *$//' | cut -c1-200)
  return 1
}

# bench_tree_pids PID: the pid and every descendant, one a line.
bench_tree_pids() {
  local queue=("$1") p
  while ((${#queue[@]})); do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    [[ -d /proc/$p ]] || continue
    echo "$p"
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do queue+=("$c"); done
  done
}

# bench_tree_rss_kb PID: the resident memory of the process tree in KiB, as the sum of each
# process's PSS (/proc/<pid>/smaps_rollup), so pages the processes share (nginx's shared zone,
# mapped by its master and every worker) count once.
bench_tree_rss_kb() {
  local p t=0 v
  for p in $(bench_tree_pids "$1"); do
    v=$(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup" 2>/dev/null) || v=0
    t=$((t + ${v:-0}))
  done
  echo "$t"
}

# bench_perf_syscalls OUT PIDS COMMAND...: counts the system calls the processes PIDS (a
# comma-separated list; every thread of each) make while COMMAND runs, with `perf stat -e
# 'syscalls:sys_enter_*'`; OUT gets "<count> <syscall>" lines, largest first (zero counts left
# out), and COMMAND's output goes to OUT.cmd. Returns non-zero when perf could not count (no
# syscall tracepoints, or not permitted) or COMMAND failed.
bench_perf_syscalls() {
  local out=$1 pids=$2
  shift 2
  perf stat -x, -o "$out.perf" -e 'syscalls:sys_enter_*' -p "$pids" -- "$@" >"$out.cmd" 2>&1 || return 1
  awk -F, '$1 ~ /^[0-9]+$/ && $1 > 0 { e = $3; sub(/^syscalls:sys_enter_/, "", e); c[e] += $1 }
    END { for (e in c) print c[e], e }' "$out.perf" | sort -rn >"$out"
  [[ -s $out ]]
}
