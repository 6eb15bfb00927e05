#!/usr/bin/env bash
# bench/fleet-limits.sh -- what ioa_limit_scope fleet costs (issue 17,
# point 5): the same saturated room load against one hub with the rate
# limits counted per instance, and leased from Redis with the default slice
# (100 ms of the rate) and a fifth of it; runs interleaved, repeated,
# medians and spread.  Limits are set so that nothing is refused: the
# figures are the price of counting, not of refusing.
#
#   make -C bench && bash bench/fleet-limits.sh
#   FLEET_REPEATS=5 FLEET_DURATION=5 bash bench/fleet-limits.sh
#
# Prints one line per run and a table of medians (min..max): published
# envelopes/s, nginx and Redis CPU (% of one core), nginx CPU per envelope,
# and Redis calls for leases per posted envelope (ioa_limit_leases_total
# over ioa_envelopes_posted_total, from /metrics).  Every process is
# started here on free loopback ports and stopped by PID.

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH="$REPO/bench/build/ioa-bench"
MODULE="$REPO/build/ngx_http_ioa_module.so"
REPEATS="${FLEET_REPEATS:-3}"
DURATION="${FLEET_DURATION:-5}"
DIR="$(mktemp -d /tmp/ioa-fleet-bench-XXXXXX)"
RPORT=$((20000 + RANDOM % 10000))
HPORT=$((RPORT + 1))
REDIS_PID=
NGINX_PID=

cleanup() {
    [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null || true
    [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null || true
    sleep 0.3
    rm -rf "$DIR"
}
trap cleanup EXIT

[ -x "$BENCH" ] || { echo "build the generator: make -C bench" >&2; exit 1; }
[ -f "$MODULE" ] || { echo "build the module: make" >&2; exit 1; }

redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$DIR" --logfile "$DIR/redis.log" > /dev/null &
REDIS_PID=$!
for _ in $(seq 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

# variant name -> ioa_limit_scope line
declare -A SCOPE=(
    [instance]="ioa_limit_scope instance;"
    [fleet]="ioa_limit_scope fleet;"
    [fleet-20ms]="ioa_limit_scope fleet slice=20ms;"
)
VARIANTS="instance fleet fleet-20ms"

start_hub() {
    local scope="$1" d="$DIR/hub"
    rm -rf "$d"; mkdir -p "$d/logs" "$d/conf"
    cat > "$d/conf/nginx.conf" <<EOF
load_module $MODULE;
worker_processes 1;
daemon off;
master_process on;
error_log $d/logs/error.log warn;
pid $d/logs/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $d/tmp;
    ioa_redis 127.0.0.1:$RPORT;
    ioa_auth off;
    $scope
    # per agent and per room: far above what the load posts, nothing refused
    ioa_limit_rate 1000r/s burst=2000;
    ioa_limit_room_rate 4000r/s burst=8000;
    ioa_limit_teamup_rate 1000r/s burst=2000;
    ioa_room_log_maxlen 100;
    server {
        listen 127.0.0.1:$HPORT;
        location / { ioa_api; }
        location = /metrics { ioa_metrics; }
    }
}
EOF
    nginx -p "$d/" -c "$d/conf/nginx.conf" -e "$d/logs/error.log" &
    NGINX_PID=$!
    for _ in $(seq 50); do
        curl -sf "http://127.0.0.1:$HPORT/health_check" >/dev/null 2>&1 && return
        sleep 0.1
    done
    echo "hub did not start" >&2; cat "$d/logs/error.log" >&2; exit 1
}

stop_hub() {
    kill -QUIT "$NGINX_PID" 2>/dev/null || true
    wait "$NGINX_PID" 2>/dev/null || true
    NGINX_PID=
}

metric() {
    curl -s "http://127.0.0.1:$HPORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}

RESULTS="$DIR/results"
: > "$RESULTS"

for rep in $(seq "$REPEATS"); do
    for v in $VARIANTS; do
        redis-cli -p "$RPORT" flushall > /dev/null
        start_hub "${SCOPE[$v]}"
        workers=$(pgrep -d, -P "$NGINX_PID")
        "$BENCH" --target ioa --url "http://127.0.0.1:$HPORT" --rooms 100 \
            --members 4 --size 200 --saturate --window 8 \
            --duration "$DURATION" --warmup 1 --quiet \
            --server-pid "$workers" --server-pid "$REDIS_PID" \
            --json "$DIR/run.json" > /dev/null 2>&1 || true
        asked=$(metric 'ioa_limit_leases_total{result="asked"}')
        posted=$(metric 'ioa_envelopes_posted_total{transport="websocket"}')
        limited=$(metric 'ioa_limits_hit_total{limit="rate"}')
        stop_hub
        /usr/bin/python3 - "$DIR/run.json" "$v" "$rep" "${asked:-0}" \
            "${posted:-0}" "${limited:-0}" "$REDIS_PID" >> "$RESULTS" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
v, rep, asked, posted, limited, rpid = sys.argv[2:8]
rate = j["publish_rate"]
ngx = sum(p["cpu_pct"] for p in j["server"]["processes"] if str(p["pid"]) != rpid)
red = sum(p["cpu_pct"] for p in j["server"]["processes"] if str(p["pid"]) == rpid)
print(v, rep, "%.0f" % rate, "%.1f" % ngx, "%.1f" % red,
      "%.2f" % (ngx / 100 * 1e6 / rate if rate else 0),
      "%.5f" % (float(asked) / float(posted) if float(posted) else 0),
      limited, flush=True)
EOF
        tail -1 "$RESULTS" | awk '{ printf "run %s %-11s %7s env/s  nginx %5s%%  redis %5s%%  %5s us/env  leases/env %s  refused %s\n", $2, $1, $3, $4, $5, $6, $7, $8 }'
    done
done

echo
echo "| scope | envelopes/s | nginx CPU % | Redis CPU % | nginx CPU us/envelope | lease calls/envelope |"
echo "|---|---|---|---|---|---|"
/usr/bin/python3 - "$RESULTS" $VARIANTS <<'EOF'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
for v in sys.argv[2:]:
    r = [x for x in rows if x[0] == v]
    cells = []
    for i, fmt in ((2, "%.0f"), (3, "%.1f"), (4, "%.1f"), (5, "%.2f"), (6, "%.4f")):
        xs = [float(x[i]) for x in r]
        cells.append((fmt + " (" + fmt + "..." + fmt + ")") % (statistics.median(xs), min(xs), max(xs)))
    print("| %s | %s |" % (v, " | ".join(cells)))
EOF
