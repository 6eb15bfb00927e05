# bench/lib/common.sh -- what every benchmark script needs to start its own
# servers on loopback and stop them by PID; sourced, not run.
#
# The script sets, before sourcing:
#   BENCH_NAME   the prefix of its log lines ("bench", "goal", ...)
#   RUN          its scratch directory (removed by stop_all)
# and appends every process it starts to PIDS.  stop_all is installed as
# the EXIT trap; a script with more to stop (nginx masters known only by
# their pid files) adds them to PIDS in its own trap before calling it.

PIDS=()

log() { echo "$BENCH_NAME: $*" >&2; }

# TERM to every process started, then reap them, then the scratch directory
stop_all() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$RUN"
}

# forget PID: a process already reaped leaves PIDS (its number may be
# given to another process before stop_all runs)
forget() {
    local pid keep=()
    for pid in "${PIDS[@]}"; do
        [[ $pid == "$1" ]] || keep+=("$pid")
    done
    PIDS=("${keep[@]}")
}

# a loopback port nobody listens on right now (the kernel's choice)
free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# waits up to 10 s for something to accept on the port
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

# start_redis DIR: a fresh Redis on a free loopback port, nothing saved;
# its log in DIR.  Sets HUB_REDIS_PORT, HUB_REDIS_PID (also in PIDS).
start_redis() {
    local dir=$1
    mkdir -p "$dir"
    HUB_REDIS_PORT=$(free_port)
    redis-server --port "$HUB_REDIS_PORT" --bind 127.0.0.1 --save '' \
        --appendonly no --daemonize no --dir "$dir" \
        --logfile "$dir/redis.log" &
    HUB_REDIS_PID=$!
    PIDS+=("$HUB_REDIS_PID")
    wait_port "$HUB_REDIS_PORT"
}

# launch_nginx DIR MODULE REDIS_PORT "HTTP DIRECTIVES" ["SERVER DIRECTIVES"]:
# an nginx with the module on a free loopback port, in open mode with the
# limits off, HUB_WORKERS worker processes (1), the directives added to
# http { } and to server { }; files under DIR.  Returns as soon as nginx is
# started (a caller timing its start-up polls it meanwhile); wait_nginx
# waits until it listens.  Sets HUB_PORT, HUB_MASTER (also in PIDS) and
# HUB_T0 (the wall clock, in seconds, just before nginx was started).
launch_nginx() {
    local dir=$1 module=$2 redis_port=$3 extra=$4 server_extra=${5:-}
    mkdir -p "$dir/logs"
    HUB_PORT=$(free_port)
    cat > "$dir/nginx.conf" <<CONF
load_module $module;
worker_processes ${HUB_WORKERS:-1};
worker_rlimit_nofile $(ulimit -Hn);
daemon off;
master_process on;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $dir/body;
    ioa_redis 127.0.0.1:$redis_port;
    ioa_limit_rate off; ioa_limit_room_rate off; ioa_limit_teamup_rate off;
    ioa_limit_launch_rate off;
    ioa_limit_goals_in_flight off;
    ioa_limit_conn 0;
    $extra
    server {
        listen 127.0.0.1:$HUB_PORT;
        $server_extra
        location / { ioa_api; ioa_auth off; }
    }
}
CONF
    HUB_T0=$(date +%s.%N)
    nginx -p "$dir" -c "$dir/nginx.conf" </dev/null >"$dir/logs/stdout" 2>&1 &
    HUB_MASTER=$!
    PIDS+=("$HUB_MASTER")
}

# wait_nginx: until the nginx of launch_nginx listens, and a moment for its
# workers to connect to Redis.  Sets HUB_WORKER (the first worker) and
# HUB_WORKERS_PIDS (every child of the master, comma-separated).
wait_nginx() {
    wait_port "$HUB_PORT"
    sleep 0.5
    HUB_WORKER=$(pgrep -P "$HUB_MASTER" | head -n 1)
    HUB_WORKERS_PIDS=$(pgrep -d, -P "$HUB_MASTER")
}

# stop_nginx DIR MASTER: that nginx, after its error log's first lines
# beyond notices and warnings
stop_nginx() {
    grep -v '\[notice\]\|\[warn\]' "$1/logs/error.log" | head -3 >&2 || true
    kill "$2" 2>/dev/null || true
    wait "$2" 2>/dev/null || true
    forget "$2"
}

# start_hub DIR MODULE "HTTP DIRECTIVES": a fresh Redis and an nginx with one
# worker and the module (start_redis, launch_nginx, wait_nginx).  Sets
# HUB_PORT, HUB_REDIS_PORT, HUB_MASTER, HUB_REDIS_PID, HUB_WORKER (all also
# in PIDS); stop_hub stops both.
start_hub() {
    start_redis "$1"
    launch_nginx "$1" "$2" "$HUB_REDIS_PORT" "$3"
    wait_nginx
}

# stop_hub DIR: what start_hub started
stop_hub() {
    stop_nginx "$1" "$HUB_MASTER"
    kill "$HUB_REDIS_PID" 2>/dev/null || true
    wait "$HUB_REDIS_PID" 2>/dev/null || true
    forget "$HUB_REDIS_PID"
}
