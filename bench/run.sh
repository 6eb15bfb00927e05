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
# then writes BENCHMARKS.md (bench/report.py): the table, the ratios
# ioa/nchan and ioa/ceiling, and the exact commands.  Every server is
# started here on free loopback ports and stopped by PID at the end.
#
#   bash bench/run.sh                 (what `make bench` runs)
#   BENCH_DURATION=5 bash bench/run.sh
#
# Environment: BENCH_DURATION (seconds per run, 10), BENCH_WORKERS (nginx
# worker processes per server, 1: the load generator shares the 2 cores),
# BENCH_OUT (results directory, bench/results), BENCH_REPORT
# (BENCHMARKS.md).  Workloads are the performance issue's: (a) 100 rooms x
# 4 members saturated with a small window, (b) the same at half of (a)'s
# rate, (c) 10 rooms x 32 members saturated, plus the ceiling.

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION="${BENCH_DURATION:-10}"
WORKERS="${BENCH_WORKERS:-1}"
OUT="${BENCH_OUT:-$REPO/bench/results}"
REPORT="${BENCH_REPORT:-$REPO/BENCHMARKS.md}"
BENCH="$REPO/bench/build/ioa-bench"
CEILING="$REPO/bench/build/ioa-ceiling"
MODULE="$REPO/build/ngx_http_ioa_module.so"
NCHAN=/usr/lib/nginx/modules/ngx_nchan_module.so
RUN="$(mktemp -d "${TMPDIR:-/tmp}/ioa-bench.XXXXXX")"
PIDS=()

log() { echo "bench: $*" >&2; }

cleanup() {
    local pid f
    # the nginx masters were started in subshells: their pids are in files
    for f in "$RUN"/*/master.pid; do
        [[ -e $f ]] && PIDS+=("$(cat "$f")")
    done
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$RUN"
}
trap cleanup EXIT

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
    local port=$1 i
    for i in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    log "nothing listens on $port"
    return 1
}

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

# ---------------------------------------------------------------- nginx
# start_nginx NAME LOAD_MODULE HTTP_BLOCK -> prints the port
start_nginx() {
    local name=$1 module=$2 http=$3 port dir
    port=$(free_port)
    dir="$RUN/$name"
    mkdir -p "$dir/logs"
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
$(echo "$http" | sed "s/@PORT@/$port/g; s/@REDIS@/$REDIS_PORT/g")
}
EOF
    # stdout is the caller's $(...): keep nginx off it
    nginx -p "$dir" -c "$dir/nginx.conf" </dev/null >"$dir/logs/stdout" 2>&1 &
    echo "$!" > "$dir/master.pid"
    wait_port "$port"
    echo "$port"
}

IOA_PORT=$(start_nginx ioa "$MODULE" '
    ioa_redis 127.0.0.1:@REDIS@;
    server {
        listen 127.0.0.1:@PORT@;
        location / { ioa_api; }
    }')

NCHAN_REDIS_PORT=$(start_nginx nchan-redis "$NCHAN" '
    upstream bench_redis { nchan_redis_server redis://127.0.0.1:@REDIS@; }
    server {
        listen 127.0.0.1:@PORT@;
        location ~ ^/pub/(\w+)$ {
            nchan_publisher websocket;
            nchan_channel_id $1;
            nchan_redis_pass bench_redis;
            nchan_message_buffer_length 1000;
        }
        location ~ ^/sub/(\w+)$ {
            nchan_subscriber websocket;
            nchan_channel_id $1;
            nchan_redis_pass bench_redis;
            nchan_subscriber_first_message oldest;
        }
    }')

NCHAN_MEM_PORT=$(start_nginx nchan-mem "$NCHAN" '
    nchan_max_reserved_memory 256M;
    server {
        listen 127.0.0.1:@PORT@;
        location ~ ^/pub/(\w+)$ {
            nchan_publisher websocket;
            nchan_channel_id $1;
            nchan_message_buffer_length 1000;
        }
        location ~ ^/sub/(\w+)$ {
            nchan_subscriber websocket;
            nchan_channel_id $1;
            nchan_subscriber_first_message oldest;
        }
    }')

# nginx workers of a server and Redis, for RSS and CPU
workers_of() {
    local master
    master=$(cat "$RUN/$1/master.pid")
    pgrep -P "$master" | sed 's/^/--server-pid /' | tr '\n' ' '
    [[ $1 == nchan-mem ]] || echo "--server-pid $REDIS_PID"
}

# run NAME SERVER PORT ARGS... -> $OUT/NAME.json (SERVER: ioa, nchan-redis,
# nchan-mem; the target protocol follows from it)
run() {
    local name=$1 server=$2 port=$3 target=ioa
    shift 3
    [[ $server == nchan-* ]] && target=nchan
    log "$name: ioa-bench --target $target $*"
    # shellcheck disable=SC2046
    "$BENCH" --target "$target" --url "http://127.0.0.1:$port" \
        --duration "$DURATION" --warmup 1 $(workers_of "$server") \
        --json "$OUT/$name.json" "$@" >"$OUT/$name.txt" 2>&1 \
        || log "$name: ioa-bench exited $? (see $OUT/$name.txt)"
    echo "bench/build/ioa-bench --target $target --url http://127.0.0.1:<port> --duration $DURATION --warmup 1 $*" \
        > "$OUT/$name.cmd"
}

A="--rooms 100 --members 4 --size 200 --saturate --window 8"
C="--rooms 10 --members 32 --size 200 --saturate --window 8"

for t in ioa:$IOA_PORT nchan-redis:$NCHAN_REDIS_PORT nchan-mem:$NCHAN_MEM_PORT; do
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
done

# ---------------------------------------------------------------- ceiling
for mode in "bare 1" "bare 32" "post 1" "post 32"; do
    set -- $mode
    log "ceiling: --script $1 --pipeline $2"
    "$CEILING" --redis "127.0.0.1:$REDIS_PORT" --script "$1" \
        --scripts "$REPO/redis-scripts" --pipeline "$2" --procs 4 \
        --duration "$DURATION" --json "$OUT/ceiling-$1-$2.json" \
        >"$OUT/ceiling-$1-$2.txt" 2>&1 || log "ceiling $1 $2 failed"
    echo "bench/build/ioa-ceiling --redis 127.0.0.1:<port> --script $1 --scripts redis-scripts --pipeline $2 --procs 4 --duration $DURATION" \
        > "$OUT/ceiling-$1-$2.cmd"
done

/usr/bin/python3 "$REPO/bench/report.py" "$OUT" "$REPORT"
log "wrote $REPORT"
