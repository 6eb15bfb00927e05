#!/usr/bin/env bash
# bench/openloop-profile.sh -- where the time of an envelope goes, per
# process, open loop against saturated (issue 16, point 1).
#
#   bash bench/openloop-profile.sh [RATES] [REPEATS] [SECONDS]
#       RATES    offered posts/s, open loop (default "2500 10000 20000");
#                "sat" is the saturated run (window 8), always added
#       REPEATS  runs of each, interleaved (default 3)
#       SECONDS  perf's window inside each run (default 5)
#
# Workload (a)'s shape: 100 rooms x 4 members, one publisher a room, 200 B,
# echo on (every post reaches its 4 members).  For every run, perf stat
# counts on each process, during a window inside the measured phase:
# syscalls by kind (reads, writes, epoll_wait, the rest), context switches
# (a process that sleeps and is woken: one per switch) and CPU time; each
# figure is divided by the envelopes posted in that window (the bench's
# published rate times the window).  The processes: the nginx worker (one,
# as in BENCHMARKS.md), Redis, and the generator.  perf's tracepoints cost
# a little on every syscall, so absolute CPU is a bit above an untraced
# run's; the counts are exact.  Prints a table per process and the spread
# (min-max over the repeats).
#
# Every run of the hub is followed by the same run of bench/build/ioa-floor
# (bench/floor/ioa-floor.c): a bare TCP relay with no framing, no parsing
# and no Redis, driven by its own generator at the same rate, the same
# rooms and the same record size, and profiled the same way.  Its table
# ("relay") is the kernel's share of a fan-out hub's cost on this machine:
# the reads, the member writes and the wakes any design pays, so the ratio
# of open loop to saturated can be read against what the kernel alone
# allows.

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RATES=${1:-"2500 10000 20000"}
REPEATS=${2:-3}
WINDOW=${3:-5}
BENCH_NAME=profile
RUN=$(mktemp -d /tmp/ioa-profile-XXXXXX)

. "$REPO/bench/lib/common.sh"
trap stop_all EXIT

MODULE="$REPO/build/ngx_http_ioa_module.so"
BENCH="$REPO/bench/build/ioa-bench"
FLOOR="$REPO/bench/build/ioa-floor"
[[ -x $BENCH ]] || make -s -C "$REPO/bench" >&2
[[ -x $FLOOR ]] || make -s -C "$REPO/bench/floor" >&2
[[ -f $MODULE ]] || { log "build the module first: make all"; exit 1; }
command -v perf >/dev/null || { log "perf is needed (apt-get install linux-perf)"; exit 1; }

EVENTS=raw_syscalls:sys_enter,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_readv,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,context-switches,task-clock

start_hub "$RUN/hub" "$MODULE" ""

# perf stat on each NAME:PID for the window, all at once: MODE K NAME:PID...
perf_window() {
    local mode=$1 k=$2 p perfs=()
    shift 2
    for p in "$@"; do
        perf stat -x, -e "$EVENTS" -p "${p#*:}" -o "$RUN/perf-$mode-$k-${p%%:*}.csv" \
            -- sleep "$WINDOW" &
        perfs+=($!)
    done
    wait "${perfs[@]}" 2>/dev/null || true
}

# one run: MODE is "sat" or a rate; prints one line per process:
#   mode process posts syscalls reads writes epoll_waits switches cpu_ms
one_run() {
    local mode=$1 k=$2 args rate_per json pid p out posts
    if [[ $mode == sat ]]; then
        args=(--saturate --window 8)
    else
        rate_per=$(( mode / 100 ))
        args=(--rate "$rate_per")
    fi
    json="$RUN/bench-$mode-$k.json"
    "$BENCH" --target ioa --url "http://127.0.0.1:$HUB_PORT" --quiet \
        --rooms 100 --members 4 --size 200 --duration $((WINDOW + 2)) \
        --warmup 2 --json "$json" "${args[@]}" >"$RUN/bench-$mode-$k.txt" 2>&1 &
    local bench_pid=$!
    # into the measured phase: setup, connect and warmup first
    sleep 4
    perf_window "$mode" "$k" nginx:$HUB_WORKER redis:$HUB_REDIS_PID bench:$bench_pid
    wait "$bench_pid" || { log "ioa-bench failed:"; cat "$RUN/bench-$mode-$k.txt" >&2; exit 1; }
    posts=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["publish_rate"])' "$json")
    perf_rows "$mode" "$k" "$posts" nginx redis bench
}

# the same run against the bare relay: its generator connects at once, so
# its measured phase starts after the 2 s warmup; perf from 3 s on
one_floor_run() {
    local mode=$1 k=$2 args json posts relay
    if [[ $mode == sat ]]; then
        args=(--saturate --window 8)
    else
        args=(--rate "$mode")
    fi
    json="$RUN/floor-$mode-$k.json"
    rm -f "$RUN/floor.pid"
    "$FLOOR" --rooms 100 --members 4 --size 200 --duration $((WINDOW + 2)) \
        --warmup 2 --pidfile "$RUN/floor.pid" --json "$json" "${args[@]}" \
        >"$RUN/floor-$mode-$k.txt" 2>&1 &
    local floor_pid=$!
    sleep 3
    relay=$(cat "$RUN/floor.pid")
    perf_window "$mode" "$k" relay:$relay
    wait "$floor_pid" || { log "ioa-floor failed:"; cat "$RUN/floor-$mode-$k.txt" >&2; exit 1; }
    posts=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["publish_rate"])' "$json")
    perf_rows "$mode" "$k" "$posts" relay
}

# the rows of one run: MODE K POSTS_PER_S PROCESS...
perf_rows() {
    local mode=$1 k=$2 posts=$3 p
    shift 3
    for p in "$@"; do
        /usr/bin/python3 - "$RUN/perf-$mode-$k-$p.csv" "$mode" "$p" "$posts" "$WINDOW" <<'PY'
import sys
path, mode, proc, rate, window = sys.argv[1:]
n = {}
for line in open(path):
    f = line.strip().split(',')
    if len(f) < 3 or not f[0].replace('.', '').isdigit():
        continue
    n[f[2]] = float(f[0])
posts = float(rate) * float(window)
reads = sum(n.get('syscalls:sys_enter_' + s, 0) for s in ('read', 'recvfrom', 'readv'))
writes = sum(n.get('syscalls:sys_enter_' + s, 0) for s in ('write', 'writev', 'sendto', 'sendmsg'))
waits = n.get('syscalls:sys_enter_epoll_wait', 0) + n.get('syscalls:sys_enter_epoll_pwait', 0)
print(mode, proc, round(float(rate)), n.get('raw_syscalls:sys_enter', 0) / posts,
      reads / posts, writes / posts, waits / posts,
      n.get('context-switches', 0) / posts, n.get('task-clock', 0) * 1000 / posts)
PY
    done
}

MODES="$RATES sat"
for k in $(seq 1 "$REPEATS"); do
    for mode in $MODES; do
        log "run $k: $mode"
        one_run "$mode" "$k" >> "$RUN/rows"
        log "run $k: $mode, the bare relay"
        one_floor_run "$mode" "$k" >> "$RUN/rows"
    done
done

/usr/bin/python3 - "$RUN/rows" "$MODES" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
modes = sys.argv[2].split()
cols = ['syscalls', 'reads', 'writes', 'epoll_waits', 'ctx switches', 'CPU us']
for proc in ('nginx', 'redis', 'bench', 'relay'):
    print(f'\n{proc}: per envelope posted (median of the runs, [min-max])\n')
    print('| offered | posts/s | ' + ' | '.join(cols) + ' |')
    print('|---' * (len(cols) + 2) + '|')
    for m in modes:
        rs = [r for r in rows if r[0] == m and r[1] == proc]
        if not rs:
            continue
        cells = []
        for i in range(3, 9):
            v = sorted(float(r[i]) for r in rs)
            med = v[len(v) // 2]
            cells.append(f'{med:.2f} [{v[0]:.2f}-{v[-1]:.2f}]')
        rate = sorted(int(r[2]) for r in rs)[len(rs) // 2]
        print(f'| {"saturated" if m == "sat" else m} | {rate} | ' + ' | '.join(cells) + ' |')

def cpu(proc, m):
    v = sorted(float(r[8]) for r in rows if r[0] == m and r[1] == proc)
    return v[len(v) // 2] if v else None

print('\nCPU per envelope open loop against saturated (medians): ioa\'s nginx worker, the bare relay\n')
print('| offered | nginx us | nginx / saturated | relay us | relay / saturated | nginx - relay us |')
print('|---|---|---|---|---|---|')
ns, rs_ = cpu('nginx', 'sat'), cpu('relay', 'sat')
for m in modes:
    n, r = cpu('nginx', m), cpu('relay', m)
    if None in (n, r, ns, rs_):
        continue
    print(f'| {"saturated" if m == "sat" else m} | {n:.2f} | {n / ns:.2f}x | {r:.2f} | {r / rs_:.2f}x | {n - r:.2f} |')
PY
