#!/usr/bin/env bash
# bench/run.sh -- `make bench`: the same workloads, in one run, on the same
# machine and the same Redis, against
#
#   ioa          nginx + ngx_http_ioa_module (this repo)
#   nchan-redis  nginx + Debian's nchan with its Redis store
#   nchan-mem    nginx + nchan's memory store (for reference: no Redis, no
#                durable log)
#   ceiling      the Redis work of ioa's post path driven directly
#                (bench/build/ioa-ceiling: XADD + PUBLISH in one script)
#
# then the sweeps (deliveries/s and p99 against room size and against
# message size, every server, plotted by bench/plot.gp), the sections of
# bench/idle.sh, goal.sh, discovery.sh, discovery-load.sh, large.sh and steady.sh when they are there, and the
# instructions per envelope of bench/callgrind.sh; then writes BENCHMARKS.md
# (bench/report.py): the tables, the ratios ioa/nchan and ioa/ceiling, the
# plots, and the exact commands.  Every server is started here on free
# loopback ports and stopped by PID at the end.
#
#   bash bench/run.sh                 (what `make bench` runs)
#   BENCH_DURATION=5 BENCH_SWEEPS=0 bash bench/run.sh
#   BENCH_ONLY="sweeps" bash bench/run.sh      (one section, quickly)
#   BENCH_ONLY=openloop bash bench/run.sh      (issue 16's targets, ~25 min)
#   BENCH_ONLY=openloop BENCH_OPENLOOP_QUICK=1 bash bench/run.sh  (~3 min)
#
# Environment: BENCH_CLUSTER (1; 0: no ioa-on-a-Cluster column),
# BENCH_DURATION (seconds per workload run, 10), BENCH_WORKERS
# (nginx worker processes per server, 1: the load generator shares the 2
# cores), BENCH_OUT (results directory, bench/results), BENCH_REPORT
# (BENCHMARKS.md), BENCH_SWEEPS (1; 0 skips the sweeps),
# BENCH_SWEEP_DURATION (seconds per sweep point, 3), BENCH_CALLGRIND (1; 0
# skips bench/callgrind.sh), BENCH_ONLY (the sections to run, of "main
# ceiling latency openloop sweeps extra callgrind"; all by default),
# BENCH_LATENCY_RATES (messages/s per publisher of the latency curve),
# BENCH_OPENLOOP_RATES, _ARRIVALS, _REPEATS, _DURATION, _WARMUP, _DRAIN and
# _QUICK
# (the open-loop section against issue 16's targets), BENCH_BUFFER (messages
# each server keeps per room: ioa_room_log_maxlen and
# nchan_message_buffer_length, 100).  Workloads are the performance issue's:
# (a) 100 rooms x 4 members saturated with a small window, (b) the same at
# half of (a)'s rate, (c) 10 rooms x 32 members saturated, (e) chat-like
# traffic, (f) one busy room, (g) a burst into one room, plus the ceiling,
# the latency curve against the offered rate, and the open-loop runs that
# issue 16's targets are judged by (evenly spaced and Poisson arrivals).
# A section's old results are removed before it runs, so the report never
# shows a figure from an earlier run as this one's.

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${BENCH_DURATION:-10}"
SWEEP_DURATION="${BENCH_SWEEP_DURATION:-3}"
SWEEPS="${BENCH_SWEEPS:-1}"
CALLGRIND="${BENCH_CALLGRIND:-1}"
ONLY="${BENCH_ONLY:-main ceiling latency openloop sweeps extra callgrind}"
BUFFER="${BENCH_BUFFER:-100}"
WORKERS="${BENCH_WORKERS:-1}"
OUT="${BENCH_OUT:-$REPO/bench/results}"
REPORT="${BENCH_REPORT:-$REPO/BENCHMARKS.md}"
BENCH="$REPO/bench/build/ioa-bench"
CEILING="$REPO/bench/build/ioa-ceiling"
MODULE="$REPO/build/ngx_http_ioa_module.so"
NCHAN=/usr/lib/nginx/modules/ngx_nchan_module.so
RUN="$(mktemp -d "${TMPDIR:-/tmp}/ioa-bench.XXXXXX")"

BENCH_NAME=bench
# log, stop_all, free_port, wait_port; PIDS
. "$REPO/bench/lib/common.sh"

cleanup() {
    local pid f
    # the nginx masters were started in subshells: their pids are in files
    for f in "$RUN"/*/master.pid; do
        [[ -e $f ]] && PIDS+=("$(cat "$f")")
    done
    stop_all
}
trap cleanup EXIT

section() { [[ " $ONLY " == *" $1 "* ]]; }

for f in "$BENCH" "$CEILING" "$MODULE" "$NCHAN"; do
    [[ -e "$f" ]] || { log "missing $f (make bench builds it)"; exit 1; }
done
command -v redis-server >/dev/null || { log "redis-server missing"; exit 1; }
mkdir -p "$OUT"

# ---------------------------------------------------------------- Redis
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' \
    --appendonly no --daemonize no --logfile "$RUN/redis.log" &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
wait_port "$REDIS_PORT"

# ------------------------------------------------------- Redis Cluster
# Three masters, no replicas, on loopback, for ioa's Cluster column: the same
# module, configured with the three seeds (it detects the Cluster).  The
# masters share the same two cores, so this shows what the Cluster's routing
# costs, not what more machines would give.  Only the main section uses it.
CLUSTER_PORTS=()
CLUSTER_PIDS=()
CLUSTER_SEEDS=""
if [[ ${BENCH_CLUSTER:-1} != 0 ]] && section main; then
    for i in 1 2 3; do
        port=$(free_port)
        bus=$(free_port)
        mkdir -p "$RUN/cluster-$port"
        redis-server --port "$port" --cluster-port "$bus" --bind 127.0.0.1 \
            --cluster-enabled yes --dir "$RUN/cluster-$port" \
            --cluster-config-file nodes.conf --save '' --appendonly no \
            --daemonize no --logfile "$RUN/cluster-$port/redis.log" &
        PIDS+=("$!")
        CLUSTER_PIDS+=("$!")
        CLUSTER_PORTS+=("$port")
    done
    for port in "${CLUSTER_PORTS[@]}"; do
        wait_port "$port"
    done
    redis-cli --cluster create "${CLUSTER_PORTS[@]/#/127.0.0.1:}" \
        --cluster-replicas 0 --cluster-yes >"$RUN/cluster-create.log" 2>&1 \
        || { log "redis-cli --cluster create failed"; cat "$RUN/cluster-create.log" >&2; exit 1; }
    for i in $(seq 1 100); do
        redis-cli -p "${CLUSTER_PORTS[0]}" cluster info 2>/dev/null \
            | grep -q 'cluster_state:ok' && break
        sleep 0.1
    done
fi

# ---------------------------------------------------------------- nginx
# start_nginx NAME LOAD_MODULE HTTP_BLOCK -> prints the port
# A port free when it was picked can be taken before nginx binds it (an
# outgoing connection's ephemeral port, e.g. the Cluster's bus): then nginx
# exits, and it is started again on another port.
start_nginx() {
    local name=$1 module=$2 http=$3 port dir try
    dir="$RUN/$name"
    mkdir -p "$dir/logs"
    for try in 1 2 3 4 5; do
        port=$(free_port)
        start_nginx_on "$dir" "$module" "$http" "$port"
        if wait_port "$port" && kill -0 "$(cat "$dir/master.pid")" 2>/dev/null; then
            echo "$port"
            return 0
        fi
        log "$name: nginx did not start on port $port (try $try): $(tail -1 "$dir/logs/error.log" 2>/dev/null)"
        kill "$(cat "$dir/master.pid")" 2>/dev/null || true
    done
    cp "$dir/logs/error.log" "$OUT/$name-error.log" 2>/dev/null || true
    log "$name: nginx would not start; see $OUT/$name-error.log"
    exit 1
}

start_nginx_on() {
    local dir=$1 module=$2 http=$3 port=$4
    cat > "$dir/nginx.conf" <<EOF
load_module $module;
worker_processes $WORKERS;
worker_rlimit_nofile 20000;
daemon off;
master_process on;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 19000; }
http {
    access_log off;
    client_body_temp_path $dir/body;
$(echo "$http" | sed "s/@PORT@/$port/g; s/@REDIS@/$REDIS_PORT/g; s/@BUFFER@/$BUFFER/g; s/@CLUSTER@/$CLUSTER_SEEDS/g")
}
EOF
    # stdout is the caller's $(...): keep nginx off it
    nginx -p "$dir" -c "$dir/nginx.conf" </dev/null >"$dir/logs/stdout" 2>&1 &
    echo "$!" > "$dir/master.pid"
}

# Every server keeps the same number of messages per room (BENCH_BUFFER):
# ioa's room log is capped like nchan's buffer, so neither holds more than
# the other, and Redis stays bounded through the 64 KiB sweep.  Messages up
# to 64 KiB (the largest of the sweep) must pass every server: ioa's own
# defaults (ioa_max_message_size 64k, ioa_send_queue_limit 1m) are kept as
# they ship.  nchan's WebSocket publisher has no size limit of its own
# (client_max_body_size does not apply to it: checked), but both of its
# stores keep messages in its shared memory (the Redis store too, as a cache: with the default size
# it fails with "Out of shared memory" at 64 KiB), which must hold 100
# rooms x BUFFER messages of every size swept (shared memory is touched
# only as it is used).  ioa runs in open mode (ioa_auth off) and without
# its limits, as nchan has neither: a token is checked once per connection,
# never per envelope, and the rates measured here are far above the
# default ioa_limit_rate of one agent.
IOA_PORT=$(start_nginx ioa "$MODULE" '
    ioa_redis 127.0.0.1:@REDIS@;
    ioa_limit_rate off; ioa_limit_room_rate off; ioa_limit_teamup_rate off; ioa_limit_conn 0;
    ioa_room_log_maxlen @BUFFER@;
    server {
        listen 127.0.0.1:@PORT@;
        location / { ioa_api; ioa_auth off; }
    }')

IOA_CLUSTER_PORT=""
if [[ ${#CLUSTER_PORTS[@]} -gt 0 ]]; then
    CLUSTER_SEEDS="${CLUSTER_PORTS[*]/#/127.0.0.1:}"
    IOA_CLUSTER_PORT=$(start_nginx ioa-cluster "$MODULE" '
    ioa_redis @CLUSTER@;
    ioa_limit_rate off; ioa_limit_room_rate off; ioa_limit_teamup_rate off; ioa_limit_conn 0;
    ioa_room_log_maxlen @BUFFER@;
    server {
        listen 127.0.0.1:@PORT@;
        location / { ioa_api; ioa_auth off; }
    }')
fi

NCHAN_REDIS_PORT=$(start_nginx nchan-redis "$NCHAN" '
    upstream bench_redis { nchan_redis_server redis://127.0.0.1:@REDIS@; }
    nchan_max_reserved_memory 2048M;
    server {
        listen 127.0.0.1:@PORT@;
        location ~ ^/pub/(\w+)$ {
            nchan_publisher websocket;
            nchan_channel_id $1;
            nchan_redis_pass bench_redis;
            nchan_message_buffer_length @BUFFER@;
        }
        location ~ ^/sub/(\w+)$ {
            nchan_subscriber websocket;
            nchan_channel_id $1;
            nchan_redis_pass bench_redis;
            nchan_subscriber_first_message oldest;
        }
    }')

NCHAN_MEM_PORT=$(start_nginx nchan-mem "$NCHAN" '
    nchan_max_reserved_memory 2048M;
    server {
        listen 127.0.0.1:@PORT@;
        location ~ ^/pub/(\w+)$ {
            nchan_publisher websocket;
            nchan_channel_id $1;
            nchan_message_buffer_length @BUFFER@;
        }
        location ~ ^/sub/(\w+)$ {
            nchan_subscriber websocket;
            nchan_channel_id $1;
            nchan_subscriber_first_message oldest;
        }
    }')

for port in "$IOA_PORT" "$NCHAN_REDIS_PORT" "$NCHAN_MEM_PORT"; do
    [[ -n $port ]] || exit 1
done
if [[ ${#CLUSTER_PORTS[@]} -gt 0 && -z $IOA_CLUSTER_PORT ]]; then
    exit 1
fi

# what report.py says the servers ran with
printf 'BENCH_WORKERS=%s\nBENCH_BUFFER=%s\nBENCH_DURATION=%s\nBENCH_SWEEP_DURATION=%s\n' \
    "$WORKERS" "$BUFFER" "$DURATION" "$SWEEP_DURATION" > "$OUT/run.env"

SERVERS="ioa:$IOA_PORT nchan-redis:$NCHAN_REDIS_PORT nchan-mem:$NCHAN_MEM_PORT"
# the main workloads also run against ioa on the Cluster
MAIN_SERVERS="$SERVERS${IOA_CLUSTER_PORT:+ ioa-cluster:$IOA_CLUSTER_PORT}"

# nginx workers of a server and Redis, for RSS and CPU
workers_of() {
    local master
    master=$(cat "$RUN/$1/master.pid")
    pgrep -P "$master" | sed 's/^/--server-pid /' | tr '\n' ' '
    case $1 in
    nchan-mem) ;;
    ioa-cluster) printf -- '--server-pid %s ' "${CLUSTER_PIDS[@]}" ;;
    *) echo "--server-pid $REDIS_PID" ;;
    esac
}

# run NAME SERVER PORT ARGS... -> $OUT/NAME.json (SERVER: ioa, nchan-redis,
# nchan-mem; the target protocol follows from it).  RUN_DURATION overrides
# BENCH_DURATION for one run, RUN_WARMUP the 1 s warmup.
run() {
    local name=$1 server=$2 port=$3 target=ioa dur=${RUN_DURATION:-$DURATION}
    local warm=${RUN_WARMUP:-1}
    shift 3
    [[ $server == nchan-* ]] && target=nchan
    rm -f "$OUT/$name.json"
    log "$name: ioa-bench --target $target $*"
    # shellcheck disable=SC2046
    "$BENCH" --target "$target" --url "http://127.0.0.1:$port" \
        --duration "$dur" --warmup "$warm" $(workers_of "$server") \
        --json "$OUT/$name.json" "$@" >"$OUT/$name.txt" 2>&1 \
        || log "$name: ioa-bench exited $? (see $OUT/$name.txt)"
    echo "bench/build/ioa-bench --target $target --url http://127.0.0.1:<port> --duration $dur --warmup $warm $*" \
        > "$OUT/$name.cmd"
}

A="--rooms 100 --members 4 --size 200 --saturate --window 8"
C="--rooms 10 --members 32 --size 200 --saturate --window 8"

# ---------------------------------------------------------------- (a) (b) (c)
if section main; then
    for t in $MAIN_SERVERS; do
        name=${t%%:*}
        port=${t#*:}
        # shellcheck disable=SC2086
        run "a-$name" "$name" "$port" $A
        # (b): half of (a)'s publish rate, spread over the publishers
        rate=$(/usr/bin/python3 -c 'import json,sys
try:
    d = json.load(open(sys.argv[1]))
    print(max(1, int(d["publish_rate"] / 2 / 100)))
except Exception:
    print(100)' "$OUT/a-$name.json")
        run "b-$name" "$name" "$port" --rooms 100 --members 4 --size 200 --rate "$rate"
        # shellcheck disable=SC2086
        run "c-$name" "$name" "$port" $C
        # (e) chat-like: every member talks at a human pace; what Nagle and
        # delayed ACKs cost shows here, not under saturation
        run "e-$name" "$name" "$port" --rooms 100 --members 4 \
            --publishers 4 --size 200 --rate 10
        # (f) one busy room: no per-room cap below the Redis ceiling
        run "f-$name" "$name" "$port" --rooms 1 --members 8 \
            --publishers 8 --size 200 --saturate --window 64
        # (g) a burst into one room: 20,000 envelopes as fast as one
        # publisher can send them, every one must arrive once and in order
        run "g-$name" "$name" "$port" --rooms 1 --members 4 --size 200 \
            --saturate --window 20000 --count 20000
    done
fi

# ---------------------------------------------------------------- latency
# p50/p99 against the offered rate (workload (a)'s shape at a steady rate,
# BENCH_LATENCY_RATES messages/s per publisher, 100 publishers): where each
# server keeps p99 under 1 ms, and where it falls behind.
LATENCY_RATES="${BENCH_LATENCY_RATES-10 25 50 100 200}"
if section latency; then
    rm -f "$OUT"/lat-*
    for r in $LATENCY_RATES; do
        for t in $SERVERS; do
            RUN_DURATION=$SWEEP_DURATION run "lat-$r-${t%%:*}" "${t%%:*}" \
                "${t#*:}" --rooms 100 --members 4 --size 200 --rate "$r" \
                --quiet
        done
    done
fi

# ---------------------------------------------------------------- openloop
# Issue 16's targets, open loop against nchan: workload (a)'s shape (100
# rooms x 4 members, one publisher a room, 200 B) at offered total rates of
# BENCH_OPENLOOP_RATES posts/s and at 80% of ioa's saturated capacity, each
# with evenly spaced and with Poisson arrivals (ioa-bench --arrivals), the
# three servers interleaved at every point, BENCH_OPENLOOP_REPEATS times
# (repeat k uses --seed k: within a repeat every server gets the same
# arrival times).  The capacity comes first, from saturated runs of the same
# shape (window 8, as (a)) in this section: their median publish rate; the
# same runs give the saturated nginx CPU per envelope that target (iii)
# divides by.  Quick look: BENCH_OPENLOOP_QUICK=1 (3 s + 1 s warmup, one
# repeat).  report.py renders the tables, the targets and the plot.
OL_QUICK="${BENCH_OPENLOOP_QUICK:-0}"
if [[ $OL_QUICK != 0 ]]; then
    OL_DEFAULT_DURATION=3 OL_DEFAULT_WARMUP=1 OL_DEFAULT_REPEATS=1
else
    OL_DEFAULT_DURATION=10 OL_DEFAULT_WARMUP=2 OL_DEFAULT_REPEATS=3
fi
OL_RATES="${BENCH_OPENLOOP_RATES-2500 5000 10000 20000}"
OL_ARRIVALS="${BENCH_OPENLOOP_ARRIVALS-even poisson}"
OL_REPEATS="${BENCH_OPENLOOP_REPEATS:-$OL_DEFAULT_REPEATS}"
OL_DURATION="${BENCH_OPENLOOP_DURATION:-$OL_DEFAULT_DURATION}"
OL_WARMUP="${BENCH_OPENLOOP_WARMUP:-$OL_DEFAULT_WARMUP}"
# long enough that what has not arrived is lost, not late: a server that
# fell behind gets this long to catch up after publishing stops
OL_DRAIN="${BENCH_OPENLOOP_DRAIN:-15}"
OL_SHAPE="--rooms 100 --members 4 --size 200"
if section openloop; then
    rm -f "$OUT"/ol-* "$OUT"/openloop.*
    # the machine's load when the section starts and ends: anything else
    # running shares the two cores with the servers, Redis and the generator
    OL_LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
    for k in $(seq 1 "$OL_REPEATS"); do
        # shellcheck disable=SC2086
        RUN_DURATION=$OL_DURATION RUN_WARMUP=$OL_WARMUP run "ol-sat-$k-ioa" \
            ioa "$IOA_PORT" $OL_SHAPE --saturate --window 8 --quiet
    done
    # 80% of the median saturated publish rate, in whole posts/s
    OL_P80=$(/usr/bin/python3 - "$OUT" "$OL_REPEATS" <<'PY'
import json, os, sys
out, n = sys.argv[1], int(sys.argv[2])
rates = []
for k in range(1, n + 1):
    try:
        d = json.load(open(os.path.join(out, "ol-sat-%d-ioa.json" % k)))
        if d.get("publish_rate"):
            rates.append(d["publish_rate"])
    except (OSError, ValueError):
        pass
rates.sort()
print(int(0.8 * rates[len(rates) // 2]) if rates else "")
PY
)
    if [[ -z $OL_P80 ]]; then
        log "openloop: no saturated ioa run finished: no 80% point"
    fi
    # how this section was asked for, for the report's commands
    ol_cmd="$(env | { grep -E '^BENCH_(OPENLOOP_[A-Z]+|WORKERS|BUFFER)=' || true; } | sort | tr '\n' ' ')"
    printf 'rates=%s\np80=%s\narrivals=%s\nrepeats=%s\nduration=%s\nwarmup=%s\ndrain=%s\nquick=%s\ncommand=%s\n' \
        "$OL_RATES" "$OL_P80" "$OL_ARRIVALS" "$OL_REPEATS" "$OL_DURATION" \
        "$OL_WARMUP" "$OL_DRAIN" "$OL_QUICK" \
        "${ol_cmd}BENCH_ONLY=openloop bash bench/run.sh" > "$OUT/openloop.env"
    for k in $(seq 1 "$OL_REPEATS"); do
        for total in $OL_RATES $OL_P80; do
            # 100 publishers: each offers a hundredth of the total
            per=$(/usr/bin/python3 -c 'import sys; print("%g" % (int(sys.argv[1]) / 100))' "$total")
            for arrivals in $OL_ARRIVALS; do
                for t in $SERVERS; do
                    # shellcheck disable=SC2086
                    RUN_DURATION=$OL_DURATION RUN_WARMUP=$OL_WARMUP \
                        run "ol-$total-$arrivals-$k-${t%%:*}" "${t%%:*}" \
                        "${t#*:}" $OL_SHAPE --rate "$per" \
                        --arrivals "$arrivals" --seed "$k" \
                        --drain "$OL_DRAIN" --quiet
                done
            done
        done
    done
    printf 'load=%s\nload_end=%s\n' "$OL_LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" \
        >> "$OUT/openloop.env"
fi

# ---------------------------------------------------------------- ceiling
if section ceiling; then
    for mode in "bare 1" "bare 32" "post 1" "post 32"; do
        set -- $mode
        log "ceiling: --script $1 --pipeline $2"
        rm -f "$OUT/ceiling-$1-$2.json"
        "$CEILING" --redis "127.0.0.1:$REDIS_PORT" --script "$1" \
            --scripts "$REPO/redis-scripts" --pipeline "$2" --procs 4 \
            --duration "$DURATION" --json "$OUT/ceiling-$1-$2.json" \
            >"$OUT/ceiling-$1-$2.txt" 2>&1 || log "ceiling $1 $2 failed"
        echo "bench/build/ioa-ceiling --redis 127.0.0.1:<port> --script $1 --scripts redis-scripts --pipeline $2 --procs 4 --duration $DURATION" \
            > "$OUT/ceiling-$1-$2.cmd"
    done
fi

# ---------------------------------------------------------------- sweeps
# Workload (a) (100 rooms, one publisher each, saturated, window 8) with
# one parameter moved: members per room (200 B messages), then message size
# (4 members).  Short points (BENCH_SWEEP_DURATION); every server at every
# point, in the same order, on the same Redis.  A point that fails is
# reported as failed (report.py), never dropped.  report.py writes the
# sweep-*.dat files and runs bench/plot.gp: sweep-room.png, sweep-size.png.
SWEEP_MEMBERS="${BENCH_SWEEP_MEMBERS-1 2 4 8 16 32 64}"
SWEEP_SIZES="${BENCH_SWEEP_SIZES-100 1024 4096 16384 65536}"
if section sweeps; then
    rm -f "$OUT"/sweep-*
    if [[ $SWEEPS != 0 ]]; then
        for k in $SWEEP_MEMBERS; do
            for t in $SERVERS; do
                RUN_DURATION=$SWEEP_DURATION run "sweep-room-$k-${t%%:*}" \
                    "${t%%:*}" "${t#*:}" --rooms 100 --members "$k" \
                    --size 200 --saturate --window 8 --quiet
            done
        done
        for size in $SWEEP_SIZES; do
            for t in $SERVERS; do
                RUN_DURATION=$SWEEP_DURATION run "sweep-size-$size-${t%%:*}" \
                    "${t%%:*}" "${t#*:}" --rooms 100 --members 4 \
                    --size "$size" --saturate --window 8 --quiet
            done
        done
    else
        log "sweeps skipped (BENCH_SWEEPS=0)"
        echo "BENCH_SWEEPS=0" > "$OUT/sweep-skipped"
    fi
fi

# ------------------------------------ idle, goal, discovery, large (extra)
# bench/idle.sh, goal.sh, discovery.sh, discovery-load.sh, large.sh,
# steady.sh and concurrent.sh.  Each is run if it is there, with BENCH_OUT, BENCH_DURATION,
# BENCH_WORKERS, BENCH_REDIS_PORT (this run's Redis) in its environment,
# and is expected to write $OUT/idle.json, goal.json, discovery.json,
# discovery-load.json, large.json, steady.json, concurrent.json (report.py renders each one
# that exists).  Its stdout and stderr go to $OUT/<name>.log.
if section extra; then
    for extra in idle goal discovery discovery-load large steady concurrent; do
        script="$REPO/bench/$extra.sh"
        [[ -e $script ]] || continue
        log "$extra: bash bench/$extra.sh"
        rm -f "$OUT/$extra.json"
        BENCH_OUT="$OUT" BENCH_DURATION="$DURATION" BENCH_WORKERS="$WORKERS" \
            BENCH_REDIS_PORT="$REDIS_PORT" bash "$script" \
            >"$OUT/$extra.log" 2>&1 \
            || log "$extra: bench/$extra.sh exited $? (see $OUT/$extra.log)"
    done

    # the goal suite: goals of known answers, scored for correctness and
    # honesty (bench/goal/suite.py), through the same script
    log "goal-suite: GOAL_SUITE=1 GOAL_WORKERS=2 bash bench/goal.sh"
    rm -f "$OUT/goal-suite.json"
    BENCH_OUT="$OUT" GOAL_SUITE=1 GOAL_WORKERS=2 bash "$REPO/bench/goal.sh" \
        >"$OUT/goal-suite.log" 2>&1 \
        || log "goal-suite: exited $? (see $OUT/goal-suite.log)"
    log "goal-suite-llm: GOAL_SUITE=1 GOAL_SUITE_LLM=scripted GOAL_WORKERS=2 bash bench/goal.sh"
    rm -f "$OUT/goal-suite-llm.json"
    BENCH_OUT="$OUT" GOAL_SUITE=1 GOAL_SUITE_LLM=scripted GOAL_WORKERS=2 \
        bash "$REPO/bench/goal.sh" >"$OUT/goal-suite-llm.log" 2>&1 \
        || log "goal-suite-llm: exited $? (see $OUT/goal-suite-llm.log)"
fi

# ---------------------------------------------------------------- callgrind
# instructions per envelope in the module, under valgrind; its own nginx and
# Redis (bench/callgrind.sh)
if section callgrind; then
    rm -f "$OUT"/callgrind.*
    if [[ $CALLGRIND != 0 ]] && command -v valgrind >/dev/null; then
        log "callgrind: bash bench/callgrind.sh"
        CALLGRIND_OUT="$OUT" bash "$REPO/bench/callgrind.sh" \
            2> >(tee "$OUT/callgrind.log" >&2) \
            || log "callgrind: bench/callgrind.sh failed (see $OUT/callgrind.log)"
    else
        log "callgrind skipped (BENCH_CALLGRIND=0 or no valgrind)"
    fi
fi

/usr/bin/python3 "$REPO/bench/report.py" "$OUT" "$REPORT"
log "wrote $REPORT"
