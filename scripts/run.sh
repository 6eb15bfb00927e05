#!/usr/bin/env bash
# make run: Redis + nginx with the ioa module on 127.0.0.1:$IOA_PORT, then the
# demo (agents register, discover each other, team up and talk).  The stack
# stays up until Ctrl-C; `make stop` stops it from another terminal.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
RUN="${IOA_RUN_DIR:-$REPO/build/run}"
IOA_PORT=${IOA_PORT:-7788}
IOA_REDIS_PORT=${IOA_REDIS_PORT:-7789}

bash "$REPO/scripts/stop.sh" >/dev/null 2>&1 || true
mkdir -p "$RUN/logs" "$RUN/redis"

# Whatever fails on the way up (a port taken, a missing binary) stops what
# was already started: no Redis or worker is left running behind an error.
on_exit() {
    local rc=$?
    [ "$rc" = 0 ] && return
    echo "make run failed (exit $rc); stopped what it had started; logs in $RUN/logs/" >&2
    bash "$REPO/scripts/stop.sh" >/dev/null 2>&1 || true
}
trap on_exit EXIT

redis-server --port "$IOA_REDIS_PORT" --bind 127.0.0.1 --daemonize yes \
    --dir "$RUN/redis" --pidfile "$RUN/redis.pid" --logfile "$RUN/redis.log" \
    --save '' --appendonly yes --appendfsync everysec

# Redis writes its pid file once it listens; without it a PONG could come
# from some other Redis on that port
for _ in $(seq 50); do
    [ -s "$RUN/redis.pid" ] && redis-cli -p "$IOA_REDIS_PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
done
if [ ! -s "$RUN/redis.pid" ]; then
    echo "Redis did not start (is 127.0.0.1:$IOA_REDIS_PORT taken? IOA_REDIS_PORT picks another port):" >&2
    tail -3 "$RUN/redis.log" >&2 || true
    exit 1
fi

# Authentication as shipped (ioa_auth jwt): a key of our own, made once,
# and a token for everyone in the demo
[ -e "$RUN/jwt.key" ] || "$REPO/scripts/ioa-token" new-key "$RUN/jwt.key"
mint() { "$REPO/scripts/ioa-token" sign --key "$RUN/jwt.key" --sub "$1" --scope "$2"; }
{
    echo "{"
    for a in Planner Coder Researcher Counter Shouter Reverser; do
        echo "  \"$a\": \"$(mint "$a" agent)\","
    done
    echo "  \"observer\": \"$(mint observer observer)\","
    echo "  \"user\": \"$(mint user "launch admin")\","
    # the web console's: sees everything, launches, and searches agents
    # (/retrieve_assistant acts as the token's subject, an agent scope)
    echo "  \"console\": \"$(mint console "observer launch admin agent")\""
    echo "}"
} > "$RUN/tokens.json"
chmod 600 "$RUN/tokens.json"
token() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$RUN/tokens.json" "$1"; }

# conf.d/ioa.conf as shipped, pointed at our ports and our key
sed -e "s/^ioa_redis .*/ioa_redis 127.0.0.1:$IOA_REDIS_PORT;/" \
    -e "s/^    listen 7788;/    listen 127.0.0.1:$IOA_PORT;/" \
    -e "s|^ioa_auth_jwt_key .*|ioa_auth_jwt_key $RUN/jwt.key;|" \
    -e "s|alias /usr/share/ioa/console/;|alias $REPO/console/;|" \
    "$REPO/conf.d/ioa.conf" > "$RUN/ioa.conf"

# conf.d's advice (2 x 8192 connections, twice as many files), within what
# this shell may open
NOFILE=$(ulimit -Hn)
[[ $NOFILE == unlimited || $NOFILE -gt 20000 ]] && NOFILE=20000

cat > "$RUN/nginx.conf" <<CONF
load_module $REPO/build/ngx_http_ioa_module.so;
worker_processes 2;
worker_rlimit_nofile $NOFILE;
pid $RUN/nginx.pid;
error_log $RUN/logs/error.log info;
events { worker_connections 8192; }
http {
    access_log $RUN/logs/access.log;
    client_body_temp_path $RUN/body;
    include $RUN/ioa.conf;
}
CONF

if ! /usr/sbin/nginx -p "$RUN" -c "$RUN/nginx.conf"; then
    echo "nginx did not start (is 127.0.0.1:$IOA_PORT taken? IOA_PORT picks another port):" >&2
    grep -E '\[(emerg|alert|crit)\]' "$RUN/logs/error.log" | tail -3 >&2 || true
    exit 1
fi

for _ in $(seq 50); do
    curl -sf "http://127.0.0.1:$IOA_PORT/health_check" >/dev/null && break
    sleep 0.1
done

# two goal workers and three example agents (ioa-agent with the exec
# adapter), each recorded by PID for stop.sh
HUB="http://127.0.0.1:$IOA_PORT"
for i in 1 2; do
    "$REPO/workers/build/ioa-worker" --redis "127.0.0.1:$IOA_REDIS_PORT" \
        --scripts "$REPO/redis-scripts" --consumer "worker-$i" \
        --task-timeout 20 </dev/null >>"$RUN/logs/worker-$i.log" 2>&1 &
    echo $! > "$RUN/worker-$i.pid"
done

start_agent() {
    local name=$1 desc=$2 mode=$3
    IOA_TOKEN=$(token "$name") \
    "$REPO/workers/build/ioa-agent" --hub "$HUB" --name "$name" \
        --desc "$desc" --timeout 10 \
        --exec /usr/bin/python3 "$REPO/scripts/demo_agent.py" "$mode" \
        </dev/null >>"$RUN/logs/agent-$name.log" 2>&1 &
    echo $! > "$RUN/agent-$name.pid"
}
start_agent Counter "counts the words in a text" count
start_agent Shouter "shouts a text in upper case" shout
start_agent Reverser "reverses the order of the words of a text" reverse

echo "ioa is up: $HUB (Redis on 127.0.0.1:$IOA_REDIS_PORT)"
echo "running: 2 ioa-workers, agents Counter, Shouter, Reverser"
if [ -n "${IOA_LLM_BASE_URL:-${OPENAI_BASE_URL:-}}" ]; then
    echo "planner: the LLM at ${IOA_LLM_BASE_URL:-$OPENAI_BASE_URL}" \
         "(model ${IOA_LLM_MODEL:-gpt-4o-mini})"
else
    echo "planner: built-in (set IOA_LLM_BASE_URL to use an LLM)"
fi
echo "logs: $RUN/logs/"
echo "authentication: ioa_auth jwt, key $RUN/jwt.key; the demo's tokens"
echo "(also in $RUN/tokens.json; more with scripts/ioa-token sign --key $RUN/jwt.key --sub NAME --scope agent):"
for who in Planner Coder Researcher Counter Shouter Reverser observer user; do
    printf '  %-10s %s\n' "$who" "$(token "$who")"
done
echo "  e.g. curl -H \"Authorization: Bearer $(token user)\" $HUB/list_all_agents"
console_help() {
    echo "console: $HUB/console/ -- sign in with this token (the console's,"
    echo "  scopes observer launch admin agent; kept in the browser tab only):"
    echo "  $(token console)"
    echo "metrics: $HUB/metrics   command line: scripts/ioactl (IOA_URL=$HUB)"
}
console_help

if ! IOA_DEMO_TOKENS="$RUN/tokens.json" /usr/bin/python3 "$REPO/scripts/demo.py" "127.0.0.1:$IOA_PORT"; then
    echo "the demo failed; logs in $RUN/logs/"
    bash "$REPO/scripts/stop.sh"
    exit 1
fi

if [ -n "${IOA_RUN_ONCE:-}" ]; then
    bash "$REPO/scripts/stop.sh"
    exit 0
fi

echo
console_help
echo "The hub keeps running; Ctrl-C (or make stop) stops it."
trap 'bash "$REPO/scripts/stop.sh"; exit 0' INT TERM
while kill -0 "$(cat "$RUN/nginx.pid")" 2>/dev/null; do sleep 1; done
