#!/usr/bin/env bash
# bench/idle.sh -- workload (d): server memory per idle agent WebSocket.
#
# For each server (ioa: nginx + ngx_http_ioa_module + Redis; nchan-mem:
# nginx + nchan's memory store, its WebSocket subscriber location) and each
# shape (one_worker: IDLE_ONE agents on one nginx worker; three_workers:
# IDLE_THREE agents over three workers, listen ... reuseport):
#
#   1. start a fresh Redis (ioa) and a fresh nginx on free loopback ports;
#   2. ioa: register every agent (POST /register, pipelined), as agents do
#      before they connect;
#   3. read the baseline: every nginx worker's RSS, PSS and Private_Dirty
#      (/proc/PID/smaps_rollup) and Redis' used_memory (INFO memory);
#   4. connect the agents with bench/build/ioa-bench --idle (ioa:
#      /ws/<name>; nchan: /sub/<channel>, one channel each), several
#      generator processes when one cannot hold them all (20,000
#      descriptors per process here), over several source addresses;
#   5. wait until every connection is established and the workers' memory
#      is steady, read the same figures again, divide the deltas by N;
#   6. stop the generators and the servers (by PID).
#
# Output: $BENCH_OUT/idle.json (default bench/results/idle.json)
#
#   {"ioa": {"one_worker": {"agents":19000, "bytes_per_agent":..,
#            "rss_before":.., "rss_after":.., (bytes, nginx workers summed)
#            "pss_bytes_per_agent":.., "private_dirty_bytes_per_agent":..,
#            "pss_before":.., "pss_after":.., "private_dirty_before":..,
#            "private_dirty_after":.., "workers":1,
#            "redis_bytes_per_agent":.., "redis_register_bytes_per_agent":..,
#            "redis_used_before":.., "redis_used_after":..,
#            "connected":19000},
#          "three_workers": {... 50000 ...}},
#    "nchan-mem": {"one_worker": {...}, "three_workers": {...}},
#    "nchan_reference_bytes_per_agent": 10957, "target_bytes_per_agent": 4096}
#
# bytes_per_agent is the RSS delta / N (what the issue's figures use);
# PSS and Private_Dirty are given beside it (PSS counts shared memory, e.g.
# nchan's shm store, in proportion).  And $BENCH_OUT/idle.txt, the summary.
#
#   bash bench/idle.sh
#   IDLE_ONE=2000 IDLE_THREE=6000 bash bench/idle.sh       (a quick run)
#   IDLE_SERVERS=ioa IDLE_SHAPES=one_worker bash bench/idle.sh
#
# Environment: IDLE_ONE (19000), IDLE_THREE (50000), IDLE_SERVERS ("ioa
# nchan-mem"), IDLE_SHAPES ("one_worker three_workers"), IDLE_SETTLE
# (seconds of steady memory before the reading, 3), IDLE_HOLD (seconds
# every agent is held before the readings start, 35: one ping round),
# IDLE_MODULE (the .so,
# build/ngx_http_ioa_module.so: point it at a private build to compare),
# BENCH_OUT (bench/results).

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${BENCH_OUT:-$REPO/bench/results}"
BENCH="$REPO/bench/build/ioa-bench"
MODULE="${IDLE_MODULE:-$REPO/build/ngx_http_ioa_module.so}"
NCHAN=/usr/lib/nginx/modules/ngx_nchan_module.so
IDLE_ONE="${IDLE_ONE:-19000}"
IDLE_THREE="${IDLE_THREE:-50000}"
SERVERS="${IDLE_SERVERS:-ioa nchan-mem}"
SHAPES="${IDLE_SHAPES:-one_worker three_workers}"
SETTLE="${IDLE_SETTLE:-3}"
HOLD="${IDLE_HOLD:-35}"
PER_GEN=16000           # connections per generator process (< 20,000 fds)
RUN="$(mktemp -d "${TMPDIR:-/tmp}/ioa-idle.XXXXXX")"
PY=/usr/bin/python3

BENCH_NAME=idle
# log, stop_all, free_port, wait_port; PIDS
. "$REPO/bench/lib/common.sh"

stop_pids() {
    local pid
    for pid in "$@"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "$@"; do
        wait "$pid" 2>/dev/null || true
    done
}

cleanup() {
    stop_run
    rm -rf "$RUN"
}
trap cleanup EXIT

for f in "$BENCH" "$NCHAN"; do
    [[ -e "$f" ]] || { log "missing $f (make -C bench; apt-get install libnginx-mod-nchan)"; exit 1; }
done
[[ $SERVERS != *ioa* || -e $MODULE ]] || { log "missing $MODULE (make)"; exit 1; }
mkdir -p "$OUT"

# the generators raise their own soft limit; nginx gets worker_rlimit_nofile
HARD=$(ulimit -Hn)
ulimit -Sn "$HARD"
(( HARD >= 19500 )) || log "warning: only $HARD descriptors per process"
# worker_connections are slots, not descriptors (432 bytes each, allocated
# and touched at start, so they are in the baseline): nginx starts closing
# reusable connections (those still in their handshake) once fewer than
# 1/16 of the slots are free, so give every worker room above its share
WORKER_CONNS=24000

# ----------------------------------------------------------------- helpers

# register NAME_PREFIX COUNT PORT: POST /register for <prefix>_idle_<i>,
# pipelined on one keep-alive connection, 500 in flight
register() {
    $PY - "$@" <<'EOF'
import socket, sys
prefix, n, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# nginx closes a keep-alive connection after keepalive_requests (1000):
# a new connection every 900 requests, 300 in flight
def read_one(s, buf):
    while True:
        i = buf.find(b"\r\n\r\n")
        if i >= 0:
            head = buf[:i].decode("latin1")
            status = int(head.split(" ", 2)[1])
            cl = 0
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    cl = int(v)
            if len(buf) >= i + 4 + cl:
                return status, buf[i + 4:i + 4 + cl], buf[i + 4 + cl:]
        d = s.recv(65536)
        if not d:
            raise SystemExit("register: connection closed")
        buf += d
i = 0
while i < n:
    s = socket.create_connection(("127.0.0.1", port))
    buf = b""
    end = min(n, i + 900)
    while i < end:
        batch = range(i, min(end, i + 300))
        req = b""
        for k in batch:
            body = ('{"name":"%s_idle_%d","type":"Thing Assistant",'
                    '"desc":"idle agent %d of the memory benchmark"}' % (prefix, k, k)).encode()
            req += (b"POST /register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body)) + body
        s.sendall(req)
        for k in batch:
            st, body, buf = read_one(s, buf)
            if st not in (200, 201):
                raise SystemExit("register: %d %r" % (st, body[:200]))
        i += len(batch)
    s.close()
EOF
}

# mem PID... -> "rss pss private_dirty" in bytes, summed
mem() {
    $PY - "$@" <<'EOF'
import sys
t = {"Rss": 0, "Pss": 0, "Private_Dirty": 0}
for pid in sys.argv[1:]:
    for line in open("/proc/%s/smaps_rollup" % pid):
        k, _, v = line.partition(":")
        if k in t:
            t[k] += int(v.split()[0]) * 1024
print(t["Rss"], t["Pss"], t["Private_Dirty"])
EOF
}

redis_used() {
    redis-cli -p "$1" info memory | tr -d '\r' | sed -n 's/^used_memory://p'
}

established() {
    ss -Htn state established "( sport = :$1 )" | wc -l
}

# ------------------------------------------------------------------ a run

# the current run's processes, stopped by stop_run (and by cleanup)
GPIDS=()
MASTER=""
REDIS_PID=""

stop_run() {
    stop_pids "${GPIDS[@]}"
    [[ -n $MASTER ]] && stop_pids "$MASTER"
    [[ -n $REDIS_PID ]] && stop_pids "$REDIS_PID"
    GPIDS=()
    MASTER=""
    REDIS_PID=""
}

# measure SERVER SHAPE -> one JSON object in $RUN/result.json
measure() {
    local server=$1 shape=$2 workers n port dir redis_port=""
    local http listen wpids g gens nprefix per i left module
    if [[ $shape == one_worker ]]; then workers=1; n=$IDLE_ONE; else workers=3; n=$IDLE_THREE; fi

    dir="$RUN/$server-$shape"
    mkdir -p "$dir/logs"
    port=$(free_port)
    listen="listen 127.0.0.1:$port"
    (( workers > 1 )) && listen="$listen reuseport"

    if [[ $server == ioa ]]; then
        redis_port=$(free_port)
        redis-server --port "$redis_port" --bind 127.0.0.1 --save '' \
            --appendonly no --daemonize no --logfile "$dir/redis.log" &
        REDIS_PID=$!
        wait_port "$redis_port"
        http="
    ioa_redis 127.0.0.1:$redis_port;
    ioa_limit_rate off; ioa_limit_room_rate off; ioa_limit_teamup_rate off; ioa_limit_conn 0;
    server {
        $listen;
        location / { ioa_api; ioa_auth off; }
    }"
        module=$MODULE
    else
        http="
    nchan_max_reserved_memory 512M;
    server {
        $listen;
        location ~ ^/sub/(\w+)\$ {
            nchan_subscriber websocket;
            nchan_channel_id \$1;
            nchan_subscriber_first_message oldest;
        }
    }"
        module=$NCHAN
    fi

    cat > "$dir/nginx.conf" <<EOF
load_module $module;
worker_processes $workers;
worker_rlimit_nofile $HARD;
daemon off;
master_process on;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections $WORKER_CONNS; }
http {
    access_log off;
    client_body_temp_path $dir/body;
$http
}
EOF
    nginx -p "$dir" -c "$dir/nginx.conf" </dev/null >"$dir/logs/stdout" 2>&1 &
    MASTER=$!
    wait_port "$port" || return 1
    sleep 0.5
    wpids=$(pgrep -P "$MASTER" | tr '\n' ' ')

    # generators: each holds at most PER_GEN connections
    gens=$(( (n + PER_GEN - 1) / PER_GEN ))
    nprefix="id$RANDOM"

    local rb=0 ra=0
    if [[ $server == ioa ]]; then
        rb=$(redis_used "$redis_port")
        left=$n
        for (( g = 0; g < gens; g++ )); do
            per=$(( left / (gens - g) ))
            register "${nprefix}g$g" "$per" "$port" || { log "$server $shape: registration failed"; tail -n 3 "$dir/logs/error.log" >&2; return 1; }
            left=$(( left - per ))
        done
        ra=$(redis_used "$redis_port")
        # one /ws connection and away, so the worker's lazily built state
        # (subscriptions, timers, pools) is in the baseline for everyone
        "$BENCH" --target ioa --url "http://127.0.0.1:$port" --idle 1 \
            --duration 0.5 --prefix "${nprefix}warm" --quiet >/dev/null 2>&1 || true
    else
        "$BENCH" --target nchan --url "http://127.0.0.1:$port" --idle 1 \
            --duration 0.5 --prefix "${nprefix}warm" --quiet >/dev/null 2>&1 || true
    fi
    sleep 1

    local before after r0 r1
    # shellcheck disable=SC2086
    before=$(mem $wpids)
    r0=0
    [[ $server == ioa ]] && r0=$(redis_used "$redis_port")

    local target=ioa addrs
    [[ $server == nchan-* ]] && target=nchan
    left=$n
    for (( g = 0; g < gens; g++ )); do
        per=$(( left / (gens - g) ))
        left=$(( left - per ))
        # source addresses 127.0.0.1-4 from the start (the kernel picks
        # ports per destination, so generators may share them); more are
        # added if those run out of ports
        addrs=4
        "$BENCH" --target "$target" --url "http://127.0.0.1:$port" \
            --idle "$per" --duration 3600 --prefix "${nprefix}g$g" \
            --source-addrs "$addrs" --connect-concurrency 128 \
            --json "$dir/gen$g.json" >"$dir/gen$g.txt" 2>&1 &
        GPIDS+=("$!")
    done

    # every connection up, then memory steady for SETTLE seconds
    local t0=$SECONDS c=0 last="" steady=0 now
    while (( SECONDS - t0 < 300 )); do
        c=$(established "$port")
        (( c >= n )) && break
        for g in "${GPIDS[@]}"; do
            kill -0 "$g" 2>/dev/null || { log "$server $shape: a generator ended early:"; tail -n 3 "$dir"/gen*.txt >&2; return 1; }
        done
        sleep 1
    done
    log "$server $shape: $c of $n connections established after $(( SECONDS - t0 )) s; holding ${HOLD} s"
    (( c >= n )) || return 1
    # a whole ping round (ioa_ping_interval, 30 s by default): the read
    # buffers have then seen the pongs, as on a real idle connection
    sleep "$HOLD"
    t0=$SECONDS
    while (( steady < SETTLE && SECONDS - t0 < 120 )); do
        sleep 1
        # shellcheck disable=SC2086
        now=$(mem $wpids | cut -d' ' -f1)
        if [[ -n $last ]] && (( now - last < 64 * 1024 && last - now < 64 * 1024 )); then
            steady=$(( steady + 1 ))
        else
            steady=0
        fi
        last=$now
    done
    # shellcheck disable=SC2086
    after=$(mem $wpids)
    r1=0
    [[ $server == ioa ]] && r1=$(redis_used "$redis_port")
    c=$(established "$port")

    stop_run
    if [[ -s $dir/logs/error.log ]]; then
        grep -v '\[notice\]\|exceed open file resource limit' "$dir/logs/error.log" | head -3 >&2 || true
    fi

    $PY - "$n" "$c" "$workers" "$before" "$after" "$rb" "$ra" "$r0" "$r1" > "$RUN/result.json" <<'EOF'
import json, sys
n, c, w = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
b = [int(x) for x in sys.argv[4].split()]
a = [int(x) for x in sys.argv[5].split()]
rb, ra, r0, r1 = (int(x) for x in sys.argv[6:10])
d = {"agents": n, "connected": c, "workers": w,
     "bytes_per_agent": round((a[0] - b[0]) / n),
     "rss_before": b[0], "rss_after": a[0],
     "pss_bytes_per_agent": round((a[1] - b[1]) / n),
     "pss_before": b[1], "pss_after": a[1],
     "private_dirty_bytes_per_agent": round((a[2] - b[2]) / n),
     "private_dirty_before": b[2], "private_dirty_after": a[2]}
if r1:
    d.update({"redis_bytes_per_agent": round((r1 - r0) / n),
              "redis_register_bytes_per_agent": round((ra - rb) / n),
              "redis_used_before": r0, "redis_used_after": r1})
print(json.dumps(d))
EOF
}

# ------------------------------------------------------------------- main

RESULTS="$RUN/results.jsonl"
: > "$RESULTS"
for server in $SERVERS; do
    for shape in $SHAPES; do
        log "$server $shape: starting"
        rm -f "$RUN/result.json"
        if measure "$server" "$shape" && [[ -s $RUN/result.json ]]; then
            r=$(cat "$RUN/result.json")
            echo "{\"server\":\"$server\",\"shape\":\"$shape\",\"r\":$r}" >> "$RESULTS"
            log "$server $shape: $r"
        else
            log "$server $shape: failed"
            stop_run
        fi
    done
done

$PY - "$RESULTS" "$OUT/idle.json" "$OUT/idle.txt" <<'EOF'
import json, sys
res = {}
for line in open(sys.argv[1]):
    x = json.loads(line)
    res.setdefault(x["server"], {})[x["shape"]] = x["r"]
res["nchan_reference_bytes_per_agent"] = 10957     # the issue's ~10.7 KB
res["target_bytes_per_agent"] = 4096
json.dump(res, open(sys.argv[2], "w"), indent=1)
lines = ["idle agent WebSockets: server memory per connection (nginx workers; "
         "RSS, PSS and Private_Dirty deltas / N)", ""]
fmt = "%-10s %-14s %7s %6s %10s %10s %10s %12s"
lines.append(fmt % ("server", "shape", "agents", "conn", "RSS B/ag", "PSS B/ag",
                    "PrivD B/ag", "Redis B/ag"))
for s in ("ioa", "nchan-mem"):
    for shape, r in res.get(s, {}).items():
        lines.append(fmt % (s, shape, r["agents"], r["connected"], r["bytes_per_agent"],
                            r["pss_bytes_per_agent"], r["private_dirty_bytes_per_agent"],
                            r.get("redis_bytes_per_agent", "-")))
lines.append("")
lines.append("target: <= 4096 B per idle agent (nchan, measured in the issue: ~10.7 KB)")
open(sys.argv[3], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
log "wrote $OUT/idle.json and $OUT/idle.txt"
