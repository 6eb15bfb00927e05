#!/usr/bin/env bash
# bench/discovery.sh -- agent discovery at scale: POST /retrieve_assistant
# against a registry of DISC_AGENTS agents (100,000 by default).
#
# Starts its own redis-server and an nginx with the module on free loopback
# ports (stopped by PID at the end, as bench/run.sh does), registers the
# synthetic corpus of bench/discovery/corpus.py (a few thousand skill words
# drawn with a Zipf law, 5-10 per description, 0-3 tags), marks a share of
# the agents online, then sends the queries through nginx one at a time and
# times every request (bench/discovery/client.py).  Writes
# bench/results/discovery.json and prints one line.
#
#   bash bench/discovery.sh
#   DISC_AGENTS=20000 DISC_QUERIES=1000 bash bench/discovery.sh
#
# Environment:
#   DISC_AGENTS        agents registered (100000)
#   DISC_QUERIES       measured queries (5000), after DISC_WARMUP (200)
#   DISC_CONNS         client connections, one request in flight on each (1)
#   DISC_ONLINE        share of the agents online (0.2)
#   DISC_VOCAB         skill words in the vocabulary (3000)
#   DISC_ZIPF          their Zipf exponent (1.0: the commonest word is in
#                      about half of the descriptions)
#   DISC_REGISTER      http: POST /register through nginx, pipelined (the
#                      default); pipe: register.lua straight into Redis, with
#                      the terms of build/ioa-terms (the hub's tokenizer)
#   DISC_OLD_QUERIES   queries also run through the previous retrieve.lua
#                      (the full-scan BM25, which still tokenized in Lua),
#                      directly in Redis, for a before/after ratio (30; 0
#                      skips it and its index)
#   DISC_OLD_REF       the commit to take the previous scripts from (found
#                      from the history when unset)
#   DISC_WORKERS       nginx worker processes (1)
#   DISC_OUT           the JSON report (bench/results/discovery.json)

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AGENTS="${DISC_AGENTS:-100000}"
QUERIES="${DISC_QUERIES:-5000}"
WARMUP="${DISC_WARMUP:-200}"
CONNS="${DISC_CONNS:-1}"
ONLINE="${DISC_ONLINE:-0.2}"
REGISTER="${DISC_REGISTER:-http}"
VOCAB="${DISC_VOCAB:-3000}"
ZIPF="${DISC_ZIPF:-1.0}"
OLD_QUERIES="${DISC_OLD_QUERIES:-30}"
WORKERS="${DISC_WORKERS:-1}"
OUT="${DISC_OUT:-$REPO/bench/results/discovery.json}"
MODULE="$REPO/build/ngx_http_ioa_module.so"
TERMS="$REPO/build/ioa-terms"
PY="/usr/bin/python3 -B"
RUN="$(mktemp -d "${TMPDIR:-/tmp}/ioa-discovery.XXXXXX")"

BENCH_NAME=discovery
# log, stop_all, free_port, wait_port; PIDS
. "$REPO/bench/lib/common.sh"

cleanup() {
    local pid
    [[ -e $RUN/nginx/master.pid ]] && PIDS+=("$(cat "$RUN/nginx/master.pid")")
    stop_all
}
trap cleanup EXIT

command -v redis-server >/dev/null || { log "redis-server missing"; exit 1; }
command -v nginx >/dev/null || { log "nginx missing"; exit 1; }

# The scripts are embedded into the module when it is built: a module older
# than one of them would measure other scripts than the ones named here.
if [[ ! -e $MODULE ]] || [[ -n $(find "$REPO/redis-scripts" -name '*.lua' -newer "$MODULE") ]]; then
    log "building $MODULE"
    make -s -C "$REPO" "$MODULE" >&2
fi
# what goes straight into Redis is tokenized by the hub's tokenizer first
make -s -C "$REPO" terms >&2

# The previous scripts (full-scan BM25 over postings hashes): those of the
# newest commit whose retrieve.lua still has the scan.
OLD_ARGS=()
if (( OLD_QUERIES > 0 )); then
    ref="${DISC_OLD_REF:-}"
    if [[ -z $ref ]]; then
        scan="redis.call('HGETALL', B .. 'postings:' .. t)"
        for c in $(git -C "$REPO" log --format=%H -- redis-scripts/retrieve.lua); do
            if git -C "$REPO" show "$c:redis-scripts/retrieve.lua" | grep -qF "$scan"; then
                ref=$c
                break
            fi
        done
    fi
    if [[ -n $ref ]] && git -C "$REPO" show "$ref:redis-scripts/retrieve.lua" > "$RUN/old-retrieve.lua" 2>/dev/null \
        && git -C "$REPO" show "$ref:redis-scripts/register.lua" > "$RUN/old-register.lua" 2>/dev/null; then
        OLD_ARGS=(--old-register "$RUN/old-register.lua" --old-retrieve "$RUN/old-retrieve.lua"
                  --old-queries "$OLD_QUERIES")
        log "before/after against the scripts of $(git -C "$REPO" rev-parse --short "$ref")"
    else
        log "no previous scripts found: no before/after"
    fi
fi

# ---------------------------------------------------------------- Redis
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' \
    --appendonly no --daemonize no --dir "$RUN" --logfile "$RUN/redis.log" &
PIDS+=("$!")
wait_port "$REDIS_PORT"

# ---------------------------------------------------------------- nginx
HTTP_PORT=$(free_port)
mkdir -p "$RUN/nginx/logs"
cat > "$RUN/nginx/nginx.conf" <<EOF
load_module $MODULE;
worker_processes $WORKERS;
worker_rlimit_nofile 20000;
daemon off;
master_process on;
pid $RUN/nginx/nginx.pid;
error_log $RUN/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 10000000;
    client_body_temp_path $RUN/nginx/body;
    ioa_redis 127.0.0.1:$REDIS_PORT;
    ioa_limit_rate off; ioa_limit_room_rate off; ioa_limit_teamup_rate off; ioa_limit_conn 0;
    server {
        listen 127.0.0.1:$HTTP_PORT;
        location / { ioa_api; ioa_auth off; }
    }
}
EOF
nginx -p "$RUN/nginx" -c "$RUN/nginx/nginx.conf" </dev/null >"$RUN/nginx/logs/stdout" 2>&1 &
echo "$!" > "$RUN/nginx/master.pid"
wait_port "$HTTP_PORT"
# the hub connects to Redis asynchronously: wait until it answers "ok"
for i in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$HTTP_PORT/health_check" >/dev/null && break
    sleep 0.1
done

log "$AGENTS agents ($REGISTER), $QUERIES queries on $CONNS connection(s)"
$PY "$REPO/bench/discovery/client.py" --http "$HTTP_PORT" --redis "$REDIS_PORT" \
    --scripts "$REPO/redis-scripts" --terms "$TERMS" --out "$OUT" --agents "$AGENTS" \
    --queries "$QUERIES" --warmup "$WARMUP" --conns "$CONNS" --online "$ONLINE" \
    --register "$REGISTER" --vocab "$VOCAB" --zipf "$ZIPF" "${OLD_ARGS[@]}"

if grep -q '\[\(alert\|crit\|emerg\)\]' "$RUN/nginx/logs/error.log"; then
    log "nginx logged errors:"
    grep '\[\(alert\|crit\|emerg\)\]' "$RUN/nginx/logs/error.log" >&2
    exit 1
fi
