#!/usr/bin/env bash
# bench/discovery-load.sh -- discovery under load: the figures that say
# whether ranking inside nginx (issue 13: an index in each nginx instance
# instead of retrieve.lua in Redis's one thread) meets its targets.  It runs
# unchanged before and after: what the index adds (the X-Ioa-Discovery
# header, the ioa_discovery_index_* gauges on /metrics) is read when there
# and reported as null when not.
#
# One Redis and two nginx instances with the module (A and B, separate
# processes, DLOAD_WORKERS workers each) on free loopback ports, stopped by
# PID at the end.  DLOAD_AGENTS agents of bench/discovery/corpus.py (8-word
# descriptions on average over a 3,000-word Zipf vocabulary) are registered
# with POST /register, half through A and half through B; the queries are
# one capability of 1 to 3 skill words (bench/discovery/bodies.py).  Every
# load is ioa-bench: --replay for POST /retrieve_assistant (closed or open
# loop, bench/replay.c), rooms for the envelopes.  Then:
#
#   (d') same answers: the first DLOAD_SAME_QUERIES queries to A and to B,
#        compared (agents, scores, order), and agents registered through
#        one found through the other (bench/discovery/probe.py same)
#   (e)  A restarted: from its start until an answer says
#        "X-Ioa-Discovery: index" (null when none does), then its index
#        gauges (agents, bytes, build seconds) from GET /metrics
#   (a)  saturation: DLOAD_CONNS keep-alive clients, closed loop, A alone,
#        DLOAD_DURATION s: p50, p99, queries/s, the client's own CPU
#   (b)  from (a)'s window: Redis CPU per query (used_cpu_sys +
#        used_cpu_user of INFO cpu, read by ioa-bench's --on-measure hook)
#        and A's nginx processes' CPU per query (/proc/<pid>/stat)
#   (d)  scale-out: (a)'s load on A and on B at once (one ioa-bench each):
#        total queries/s against (a)'s
#   (c)  interference: rooms (DLOAD_ROOMS x DLOAD_MEMBERS, DLOAD_SIZE-byte
#        envelopes, DLOAD_POSTS posts/s in all, open loop) on A, alone and
#        while discovery runs open loop at DLOAD_OPEN_RATE queries/s on A;
#        the two conditions interleaved, DLOAD_REPEATS times each
#   (e') with DLOAD_MILLION=1: registrations up to DLOAD_MILLION_AGENTS
#        (1,000,000; through both instances, pipelined: minutes), then (e)
#        again
#
# Output: $BENCH_OUT/discovery-load.json (bench/results/ by default) and one
# line per part with the ratios against the targets
# (bench/discovery/summary.py, which also lists the JSON's fields).
#
#   bash bench/discovery-load.sh                       (about 5 minutes)
#   DLOAD_AGENTS=5000 DLOAD_DURATION=3 DLOAD_ROOM_DURATION=3 \
#       DLOAD_REPEATS=1 bash bench/discovery-load.sh   (quickly)
#   DLOAD_MILLION=1 bash bench/discovery-load.sh       (also 1M agents)
#
# Environment:
#   DLOAD_AGENTS         agents registered (100000)
#   DLOAD_QUERIES        distinct query bodies, replayed in a loop (20000)
#   DLOAD_PARTS          parts to run, of "a d c e" (all; b comes with a)
#   DLOAD_CONNS          (a), (d): closed-loop clients per instance (4)
#   DLOAD_DURATION       (a), (d): measured seconds (20), after
#   DLOAD_WARMUP         (2)
#   DLOAD_WORKERS        nginx worker processes per instance (1)
#   DLOAD_POSTS          (c): envelopes/s in all (5000), spread over
#   DLOAD_ROOMS          (100) rooms of
#   DLOAD_MEMBERS        (4) members, one publisher each, envelopes of
#   DLOAD_SIZE           bytes (200)
#   DLOAD_ROOM_DURATION  (c): measured seconds per run (15)
#   DLOAD_REPEATS        (c): runs of each condition (3)
#   DLOAD_OPEN_RATE      (c): discovery queries/s beside the rooms (1000),
#   DLOAD_OPEN_CONNS     on this many connections (16)
#   DLOAD_SAME_QUERIES   (d'): queries compared (200)
#   DLOAD_BUILD_TIMEOUT  (e): longest wait for an "index" answer (300 s)
#   DLOAD_MILLION        1: also (e) at DLOAD_MILLION_AGENTS (1000000)
#   DLOAD_NGINX_EXTRA    directives added to both instances' http { }
#                        (e.g. the index's shared memory size)
#   DLOAD_MODULE         the .so (build/ngx_http_ioa_module.so)
#   BENCH_OUT            the results directory (bench/results)

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${BENCH_OUT:-$REPO/bench/results}"
AGENTS="${DLOAD_AGENTS:-100000}"
QUERIES="${DLOAD_QUERIES:-20000}"
PARTS=" ${DLOAD_PARTS:-a d c e} "
CONNS="${DLOAD_CONNS:-4}"
DURATION="${DLOAD_DURATION:-20}"
WARMUP="${DLOAD_WARMUP:-2}"
WORKERS="${DLOAD_WORKERS:-1}"
POSTS="${DLOAD_POSTS:-5000}"
ROOMS="${DLOAD_ROOMS:-100}"
MEMBERS="${DLOAD_MEMBERS:-4}"
SIZE="${DLOAD_SIZE:-200}"
ROOM_DURATION="${DLOAD_ROOM_DURATION:-15}"
REPEATS="${DLOAD_REPEATS:-3}"
OPEN_RATE="${DLOAD_OPEN_RATE:-1000}"
OPEN_CONNS="${DLOAD_OPEN_CONNS:-16}"
SAME="${DLOAD_SAME_QUERIES:-200}"
BUILD_TIMEOUT="${DLOAD_BUILD_TIMEOUT:-300}"
MILLION="${DLOAD_MILLION:-0}"
MILLION_AGENTS="${DLOAD_MILLION_AGENTS:-1000000}"
EXTRA="${DLOAD_NGINX_EXTRA:-}"
MODULE="${DLOAD_MODULE:-$REPO/build/ngx_http_ioa_module.so}"
BENCH="$REPO/bench/build/ioa-bench"
PY="/usr/bin/python3 -B"
RUN="$(mktemp -d "${TMPDIR:-/tmp}/ioa-dload.XXXXXX")"

BENCH_NAME=discovery-load
# log, stop_all, free_port, wait_port, start_redis, launch_nginx,
# wait_nginx, stop_nginx; PIDS
. "$REPO/bench/lib/common.sh"
trap stop_all EXIT

# both are built from this tree when they are older than it (make does
# nothing when they are up to date)
make -s -C "$REPO" "$MODULE" >&2 || { log "building the module failed"; exit 1; }
make -s -C "$REPO/bench" >&2 || { log "building ioa-bench failed"; exit 1; }
for c in redis-server redis-cli nginx curl; do
    command -v $c >/dev/null || { log "$c missing"; exit 1; }
done
mkdir -p "$OUT"
part() { [[ $PARTS == *" $1 "* ]]; }
part b && PARTS="$PARTS a "

# ------------------------------------------------------------ servers
# Each instance: its own directory, port, master; /metrics for the index's
# gauges; keep-alive connections that last the whole run.
HUB_WORKERS=$WORKERS
HTTP_EXTRA="keepalive_requests 100000000; $EXTRA"
METRICS='location = /metrics { ioa_metrics; }'

start_redis "$RUN/redis"
REDIS_PORT=$HUB_REDIS_PORT
REDIS_PID=$HUB_REDIS_PID

# start_instance NAME: launch_nginx, then instance_up NAME; they set
# NAME_PORT, NAME_MASTER, NAME_T0 and NAME_PIDS (every process of the
# instance, comma-separated)
start_instance() {
    launch_nginx "$RUN/$1" "$MODULE" "$REDIS_PORT" "$HTTP_EXTRA" "$METRICS"
    printf -v "${1}_T0" %s "$HUB_T0"
    printf -v "${1}_PORT" %s "$HUB_PORT"
    printf -v "${1}_MASTER" %s "$HUB_MASTER"
}

# instance_up NAME: once it listens and answers its health check (the
# hub connects to Redis after it starts)
instance_up() {
    local i
    wait_nginx
    printf -v "${1}_PIDS" %s "$HUB_MASTER,$HUB_WORKERS_PIDS"
    for i in $(seq 1 100); do
        curl -sf "http://127.0.0.1:$HUB_PORT/health_check" >/dev/null && return
        sleep 0.1
    done
    log "instance $1 does not answer /health_check"
    exit 1
}

start_instance A; instance_up A
start_instance B; instance_up B

# ------------------------------------------------------------ helpers
# the Redis CPU at both ends of a measured window: ioa-bench runs
# "CMD start" and "CMD stop"; sh -c's $0 is that word
cpu_hook() {
    echo "sh -c 'redis-cli -p $REDIS_PORT INFO cpu > $RUN/$1-cpu.\$0'"
}

# bench NAME ARGS...: ioa-bench in the background -> $RUN/NAME.json (and
# .txt); BENCH_PID is its pid, reap waits for it
bench() {
    local name=$1
    shift
    "$BENCH" --json "$RUN/$name.json" --quiet "$@" >"$RUN/$name.txt" 2>&1 &
    BENCH_PID=$!
    PIDS+=("$BENCH_PID")
}

# reap PID NAME: its exit status, logged unless 0
reap() {
    local rc=0
    wait "$1" || rc=$?
    forget "$1"
    (( rc == 0 )) ||
        log "$2: ioa-bench exited $rc: $(grep -h -m1 first "$RUN/$2.txt")"
    return "$rc"
}

# replay NAME PORT PIDS ARGS...: the queries against one instance, the
# answers tallied by X-Ioa-Discovery, the instance's processes sampled
replay() {
    local name=$1 port=$2 pids=$3
    shift 3
    bench "$name" --replay "$RUN/queries" --path /retrieve_assistant \
        --url "http://127.0.0.1:$port" --tally X-Ioa-Discovery \
        --server-pid "$pids" "$@"
}

# register FILE_PREFIX NAME: the bodies FILE_PREFIX.0 through A and .1
# through B at once, 64 pipelined on each of 2 connections per instance ->
# $RUN/NAME-{A,B}.json, NAME.seconds
register() {
    local prefix=$1 name=$2 t0 pa rc=0
    t0=$(date +%s.%N)
    bench "$name-A" --replay "$prefix.0" --path /register \
        --count "$(wc -l < "$prefix.0")" --url "http://127.0.0.1:$A_PORT" \
        --connections 2 --window 64 --duration 86400 --server-pid "$REDIS_PID"
    pa=$BENCH_PID
    bench "$name-B" --replay "$prefix.1" --path /register \
        --count "$(wc -l < "$prefix.1")" --url "http://127.0.0.1:$B_PORT" \
        --connections 2 --window 64 --duration 86400
    reap "$pa" "$name-A" || rc=1
    reap "$BENCH_PID" "$name-B" || rc=1
    echo "$t0 $(date +%s.%N)" | awk '{printf "%.3f\n", $2 - $1}' \
        > "$RUN/$name.seconds"
    (( rc == 0 )) || { log "registration failed"; exit 1; }
}

# restart_a NAME: A stopped and started again, timed until its index
# answers (probe.py startup) -> $RUN/NAME.json
restart_a() {
    stop_nginx "$RUN/A" "$A_MASTER"
    start_instance A
    $PY "$REPO/bench/discovery/probe.py" startup --port "$A_PORT" \
        --t0 "$A_T0" --query "$RUN/queries" --timeout "$BUILD_TIMEOUT" \
        --out "$RUN/$1.json"
    instance_up A
}


# ------------------------------------------------------------ registry
log "$AGENTS agents through A and B; $QUERIES query bodies"
$PY "$REPO/bench/discovery/bodies.py" register --agents "$AGENTS" --split 2 \
    "$RUN/reg"
$PY "$REPO/bench/discovery/bodies.py" queries --agents "$AGENTS" \
    --queries "$QUERIES" "$RUN/queries"
register "$RUN/reg" register
n=$(redis-cli -p "$REDIS_PORT" HGET 'ioa:{reg}:stats' n)
[[ $n == "$AGENTS" ]] || { log "Redis counts $n agents, not $AGENTS"; exit 1; }
log "registered in $(cat "$RUN/register.seconds") s"

if part d; then
    log "(d) the same answers from A and B"
    $PY "$REPO/bench/discovery/probe.py" same --ports "$A_PORT,$B_PORT" \
        --queries "$RUN/queries" --n "$SAME" --out "$RUN/same.json"
fi

if part e; then
    log "(e) A restarted with $AGENTS agents in Redis"
    restart_a startup
fi

# ------------------------------------------------------------ load
if part a; then
    log "(a) $CONNS clients, closed loop, A alone, ${DURATION} s"
    replay a "$A_PORT" "$A_PIDS" --connections "$CONNS" \
        --duration "$DURATION" --warmup "$WARMUP" --on-measure "$(cpu_hook a)"
    reap "$BENCH_PID" a || true
fi

if part d; then
    log "(d) $CONNS clients on A and $CONNS on B at once, ${DURATION} s"
    replay d-A "$A_PORT" "$A_PIDS" --connections "$CONNS" \
        --duration "$DURATION" --warmup "$WARMUP" --on-measure "$(cpu_hook d)"
    pa=$BENCH_PID
    replay d-B "$B_PORT" "$B_PIDS" --connections "$CONNS" \
        --duration "$DURATION" --warmup "$WARMUP"
    reap "$pa" d-A || true
    reap "$BENCH_PID" d-B || true
fi

if part c; then
    rate=$(awk -v p="$POSTS" -v r="$ROOMS" 'BEGIN {print p / r}')
    for (( i = 1; i <= REPEATS; i++ )); do
        for cond in alone with; do
            log "(c) run $i of $REPEATS: rooms $cond"
            if [[ $cond == with ]]; then
                # open loop until the rooms are done; SIGTERM ends it (it
                # reports the run as interrupted and exits 3)
                replay "c-disc-$i" "$A_PORT" "$A_PIDS" --rate "$OPEN_RATE" \
                    --connections "$OPEN_CONNS" --duration 86400 --warmup 1
                pd=$BENCH_PID
                sleep 1.5
            fi
            bench "c-$cond-$i" --url "http://127.0.0.1:$A_PORT" \
                --rooms "$ROOMS" --members "$MEMBERS" --size "$SIZE" \
                --rate "$rate" --duration "$ROOM_DURATION" --warmup 2 \
                --server-pid "$A_PIDS" --server-pid "$REDIS_PID"
            reap "$BENCH_PID" "c-$cond-$i" || true
            if [[ $cond == with ]]; then
                kill -TERM "$pd"
                wait "$pd" || true
                forget "$pd"
            fi
        done
    done
fi

if [[ $MILLION == 1 ]] && part e; then
    log "(e) registering up to $MILLION_AGENTS agents (minutes)"
    $PY "$REPO/bench/discovery/bodies.py" register --agents "$MILLION_AGENTS" \
        --from "$AGENTS" --split 2 "$RUN/reg-m"
    register "$RUN/reg-m" register-million
    # the (c) runs' room agents are in the registry too
    n=$(redis-cli -p "$REDIS_PORT" HGET 'ioa:{reg}:stats' n)
    log "registered in $(cat "$RUN/register-million.seconds") s; $n agents"
    restart_a startup-million
fi

for name in A B; do
    m=${name}_MASTER
    stop_nginx "$RUN/$name" "${!m}"
done

$PY "$REPO/bench/discovery/summary.py" --run "$RUN" \
    --out "$OUT/discovery-load.json" agents="$AGENTS" queries="$QUERIES" \
    parts="${DLOAD_PARTS:-a d c e}" connections="$CONNS" duration_s="$DURATION" \
    warmup_s="$WARMUP" nginx_workers="$WORKERS" posts_per_s="$POSTS" \
    rooms="$ROOMS" members="$MEMBERS" size="$SIZE" \
    room_duration_s="$ROOM_DURATION" repeats="$REPEATS" \
    open_rate="$OPEN_RATE" open_connections="$OPEN_CONNS" \
    same_queries="$SAME" million="$MILLION" \
    million_agents="$MILLION_AGENTS" nginx_extra="$EXTRA" \
    commit="$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo -)"
log "wrote $OUT/discovery-load.json"
