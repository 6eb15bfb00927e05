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

redis-server --port "$IOA_REDIS_PORT" --bind 127.0.0.1 --daemonize yes \
    --dir "$RUN/redis" --pidfile "$RUN/redis.pid" --logfile "$RUN/redis.log" \
    --save '' --appendonly yes --appendfsync everysec

for _ in $(seq 50); do
    redis-cli -p "$IOA_REDIS_PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
done

# conf.d/ioa.conf as shipped, pointed at our ports
sed -e "s/^ioa_redis .*/ioa_redis 127.0.0.1:$IOA_REDIS_PORT;/" \
    -e "s/^    listen 7788;/    listen 127.0.0.1:$IOA_PORT;/" \
    "$REPO/conf.d/ioa.conf" > "$RUN/ioa.conf"

cat > "$RUN/nginx.conf" <<CONF
load_module $REPO/build/ngx_http_ioa_module.so;
worker_processes 2;
pid $RUN/nginx.pid;
error_log $RUN/logs/error.log info;
events { worker_connections 4096; }
http {
    access_log $RUN/logs/access.log;
    client_body_temp_path $RUN/body;
    include $RUN/ioa.conf;
}
CONF

/usr/sbin/nginx -p "$RUN" -c "$RUN/nginx.conf"

echo "ioa is up: http://127.0.0.1:$IOA_PORT (Redis on 127.0.0.1:$IOA_REDIS_PORT)"
echo "logs: $RUN/logs/error.log"

for _ in $(seq 50); do
    curl -sf "http://127.0.0.1:$IOA_PORT/health_check" >/dev/null && break
    sleep 0.1
done

/usr/bin/python3 "$REPO/scripts/demo.py" "127.0.0.1:$IOA_PORT"

if [ -n "${IOA_RUN_ONCE:-}" ]; then
    bash "$REPO/scripts/stop.sh"
    exit 0
fi

echo
echo "The hub keeps running; Ctrl-C (or make stop) stops it."
trap 'bash "$REPO/scripts/stop.sh"; exit 0' INT TERM
while kill -0 "$(cat "$RUN/nginx.pid")" 2>/dev/null; do sleep 1; done
