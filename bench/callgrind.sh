#!/usr/bin/env bash
# bench/callgrind.sh -- instructions per routed envelope in the module.
#
# nginx (master_process off, daemon off: one process, the module loaded)
# runs under `valgrind --tool=callgrind` with a Redis of its own; ioa-bench
# drives a fixed workload: R rooms x K members, one publisher per room, each
# publisher sending exactly M messages (--count) at a modest steady rate,
# so that every envelope is read, posted and fanned out on its own (a
# saturated window would let the number of envelopes per read() depend on
# timing, and with it the instructions per envelope).  Around the measured
# phase the generator runs `callgrind_control -z` and `--dump` (its
# --on-measure hook), so start-up, registration, room forming, the
# WebSocket handshakes and shutdown are not counted.
#
# Each run starts a fresh Redis and nginx and makes two generator runs in
# that nginx, both with the same connections and the same measured time:
#
#   baseline   --count 0: rooms formed, members connected, no message
#   measured   --count M
#
#   Ir per delivery = (Ir(measured) - Ir(baseline)) / envelopes delivered
#   Ir per publish  = (Ir(measured) - Ir(baseline)) / envelopes published
#
# where a delivery is one envelope written to one member's WebSocket (the
# publisher's own echo included) and both counts come from the generator's
# integrity check (every message reached every member, or the run fails).
# CALLGRIND_RUNS runs (2) show the figures repeat; the JSON has each run and
# the spread.  The top functions of the last run's measured phase, by
# inclusive and by self Ir, go to callgrind.txt, its raw profile to
# callgrind.out (callgrind_annotate --inclusive=yes callgrind.out).
#
#   bash bench/callgrind.sh                      (make bench runs it)
#   CALLGRIND_COUNT=50 CALLGRIND_RUNS=1 bash bench/callgrind.sh
#
# Environment: CALLGRIND_ROOMS (10), CALLGRIND_MEMBERS (4), CALLGRIND_COUNT
# (messages per publisher, 200), CALLGRIND_RATE (per publisher, 20/s),
# CALLGRIND_SIZE (200 B), CALLGRIND_MODE (rate, or window: saturated with
# CALLGRIND_WINDOW, 4 -- less repeatable, see above), CALLGRIND_RUNS (2),
# CALLGRIND_OUT (bench/results), IOA_MODULE (build/ngx_http_ioa_module.so).
# Writes callgrind.json, callgrind.txt, callgrind.out in CALLGRIND_OUT.

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOMS="${CALLGRIND_ROOMS:-10}"
MEMBERS="${CALLGRIND_MEMBERS:-4}"
COUNT="${CALLGRIND_COUNT:-200}"
RATE="${CALLGRIND_RATE:-20}"
SIZE="${CALLGRIND_SIZE:-200}"
MODE="${CALLGRIND_MODE:-rate}"
WINDOW="${CALLGRIND_WINDOW:-4}"
RUNS="${CALLGRIND_RUNS:-2}"
OUT="${CALLGRIND_OUT:-$REPO/bench/results}"
BENCH="$REPO/bench/build/ioa-bench"
MODULE="${IOA_MODULE:-$REPO/build/ngx_http_ioa_module.so}"
RUN="$(mktemp -d "${TMPDIR:-/tmp}/ioa-callgrind.XXXXXX")"

BENCH_NAME=callgrind
# log, stop_all, free_port, wait_port; PIDS
. "$REPO/bench/lib/common.sh"

trap stop_all EXIT

for tool in valgrind callgrind_control callgrind_annotate redis-server nginx; do
    command -v "$tool" >/dev/null || {
        log "$tool is missing (make bench installs valgrind)"
        exit 1
    }
done
for f in "$BENCH" "$MODULE"; do
    [[ -e $f ]] || { log "missing $f (make bench builds it)"; exit 1; }
done
case $MODE in
    rate)   LOAD=(--rate "$RATE")
            # the messages take COUNT/RATE s; the measured time has room
            # for a slow start under valgrind
            DURATION=$(/usr/bin/python3 -c "print(round($COUNT / $RATE * 1.25 + 2, 1))") ;;
    window) LOAD=(--saturate --window "$WINDOW")
            DURATION=$(/usr/bin/python3 -c "print(round($COUNT / 20 + 5, 1))") ;;
    *)      log "CALLGRIND_MODE is rate or window, not $MODE"; exit 2 ;;
esac
mkdir -p "$OUT"

# the Ir of a dump file: its "summary:" line (what callgrind_annotate calls
# PROGRAM TOTALS)
ir_of() {
    sed -n 's/^summary: *//p' "$1" | head -1
}

# one_run N: fresh Redis and nginx under callgrind, the baseline and the
# measured generator runs; leaves $RUN/N/{baseline,measured}.{json,cg}
one_run() {
    local n=$1 dir="$RUN/$1" redis_port port vg_pid redis_pid what count
    mkdir -p "$dir/logs"
    redis_port=$(free_port)
    redis-server --port "$redis_port" --bind 127.0.0.1 --save '' \
        --appendonly no --daemonize no --logfile "$dir/redis.log" &
    redis_pid=$!
    PIDS+=("$redis_pid")
    wait_port "$redis_port"

    port=$(free_port)
    cat > "$dir/nginx.conf" <<EOF
load_module $MODULE;
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/body;
    ioa_redis 127.0.0.1:$redis_port;
    ioa_limit_rate off; ioa_limit_room_rate off; ioa_limit_teamup_rate off; ioa_limit_conn 0;
    server {
        listen 127.0.0.1:$port;
        location / { ioa_api; ioa_auth off; }
    }
}
EOF
    valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
        --dump-instr=no --collect-jumps=no \
        nginx -p "$dir" -c "$dir/nginx.conf" </dev/null \
        >"$dir/valgrind.log" 2>&1 &
    vg_pid=$!
    PIDS+=("$vg_pid")
    wait_port "$port"
    # the hub reaches Redis after it starts (slowly under valgrind): the
    # run begins once it answers its health check
    for _ in $(seq 1 300); do
        curl -sf "http://127.0.0.1:$port/health_check" >/dev/null && break
        sleep 0.1
    done

    # the hook: zero the counters before the first message, dump after the
    # drain; the dump's file is renamed to what it measured
    cat > "$dir/hook.sh" <<EOF
#!/bin/sh
case \$1 in
start) exec callgrind_control -z $vg_pid >/dev/null 2>&1 ;;
stop)  callgrind_control --dump="\$IOA_CG_WHAT" $vg_pid >/dev/null 2>&1 || exit 1
       # callgrind writes the dump as it handles the request: wait for it
       for i in \$(seq 1 100); do
           f=\$(grep -l "^desc: Trigger: .*\$IOA_CG_WHAT" $dir/cg.out.* 2>/dev/null | head -1)
           [ -n "\$f" ] && grep -q '^totals:' "\$f" && { mv "\$f" "$dir/\$IOA_CG_WHAT.cg"; exit 0; }
           sleep 0.1
       done
       exit 1 ;;
esac
EOF
    chmod +x "$dir/hook.sh"

    for what in baseline measured; do
        count=0
        [[ $what == measured ]] && count=$COUNT
        IOA_CG_WHAT=$what "$BENCH" --url "http://127.0.0.1:$port" \
            --rooms "$ROOMS" --members "$MEMBERS" --size "$SIZE" \
            "${LOAD[@]}" --count "$count" --duration "$DURATION" \
            --drain 30 --connect-timeout 60 --quiet \
            --on-measure "$dir/hook.sh" --json "$dir/$what.json" \
            >"$dir/$what.txt" 2>&1 || {
                log "run $n, $what: ioa-bench exited $?:"
                cat "$dir/$what.txt" >&2
                return 1
            }
        [[ -s $dir/$what.cg ]] || { log "run $n, $what: no callgrind dump"; return 1; }
    done

    kill "$vg_pid" "$redis_pid" 2>/dev/null || true
    wait "$vg_pid" "$redis_pid" 2>/dev/null || true
}

log "$RUNS run(s): $ROOMS rooms x $MEMBERS members, $COUNT messages of $SIZE B per publisher ($MODE), nginx under callgrind"
for n in $(seq 1 "$RUNS"); do
    one_run "$n"
    log "run $n: baseline $(ir_of "$RUN/$n/baseline.cg") Ir, measured $(ir_of "$RUN/$n/measured.cg") Ir"
done

# the top functions of the last run's measured phase
last="$RUN/$RUNS/measured.cg"
cp "$last" "$OUT/callgrind.out"
top() {
    # callgrind_annotate's function table, without the frames every
    # function is under (process start, main, the event loop's callers)
    # (from /: run inside the repository, it splits functions by how
    # their file names are spelled)
    (cd / && callgrind_annotate --threshold=100 --auto=no "$@" "$last") 2>/dev/null \
        | sed -n '/file:function/,$p' | sed '1,2d' | sed '/^ *$/,$d' \
        | grep -vE 'libc-start|below main|\?\?\?:main |ld-linux|ngx_single_process_cycle' \
        | sed "s#$REPO/##g; s# \[/usr/lib/x86_64-linux-gnu/# [#; s# \[build/ngx_http_ioa_module.so\]##" \
        | sed -n 1,15p || true
}

/usr/bin/python3 - "$RUN" "$RUNS" "$OUT" "$ROOMS" "$MEMBERS" "$COUNT" \
    "$SIZE" "$MODE" "$RATE" "$WINDOW" <<'EOF'
import json, os, sys
run, runs, out, rooms, members, count, size, mode, rate, window = sys.argv[1:]
runs = int(runs)

def ir(path):
    with open(path) as f:
        for line in f:
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise SystemExit("callgrind: no summary in %s" % path)

res = []
for n in range(1, runs + 1):
    d = os.path.join(run, str(n))
    m = json.load(open(os.path.join(d, "measured.json")))
    b = json.load(open(os.path.join(d, "baseline.json")))
    integ = m["integrity"]
    pubs, dels = integ["published_total"], integ["received"]
    want = int(rooms) * int(count)
    if not integ["ok"] or pubs != want or dels != want * int(members) \
            or m["errors"]["total"]:
        raise SystemExit("callgrind: run %d is not clean: published %s of %s, "
                         "delivered %s of %s, errors %s" % (
                             n, pubs, want, dels, want * int(members),
                             m["errors"]["total"]))
    irm, irb = ir(os.path.join(d, "measured.cg")), ir(os.path.join(d, "baseline.cg"))
    res.append({"ir_measured": irm, "ir_baseline": irb,
                "ir_per_delivery": (irm - irb) / dels,
                "ir_per_publish": (irm - irb) / pubs,
                "deliveries": dels, "publishes": pubs,
                "baseline_s": b["duration_s"], "measured_s": m["duration_s"]})

def spread(key):
    v = [r[key] for r in res]
    mean = sum(v) / len(v)
    return (max(v) - min(v)) / mean * 100 if mean else 0.0

mean = lambda k: sum(r[k] for r in res) / len(res)
doc = {
    "ir_per_delivery": round(mean("ir_per_delivery"), 1),
    "ir_per_publish": round(mean("ir_per_publish"), 1),
    "deliveries": res[-1]["deliveries"], "publishes": res[-1]["publishes"],
    "spread_pct": round(spread("ir_per_delivery"), 2),
    "workload": {"rooms": int(rooms), "members": int(members),
                 "count": int(count), "size": int(size), "mode": mode,
                 "rate": float(rate) if mode == "rate" else None,
                 "window": int(window) if mode == "window" else None},
    "runs": res,
}
with open(os.path.join(out, "callgrind.json"), "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print("callgrind: %.0f Ir per delivery, %.0f Ir per publish (%d runs, spread "
      "%.2f%%: %s)" % (doc["ir_per_delivery"], doc["ir_per_publish"], runs,
                      doc["spread_pct"],
                      ", ".join("%.0f" % r["ir_per_delivery"] for r in res)),
      file=sys.stderr)
EOF

{
    echo "# bench/callgrind.sh: nginx + ioa under callgrind, the measured phase of the last run"
    echo "# $ROOMS rooms x $MEMBERS members, $COUNT messages of $SIZE B per publisher ($MODE);"
    echo "# Ir of the phase: $(ir_of "$last"), baseline $(ir_of "$RUN/$RUNS/baseline.cg") (callgrind.json has the per-envelope figures)"
    echo "# Debian's nginx is stripped: its static functions show as addresses (the one"
    echo "# right under ngx_process_events_and_timers is the epoll event handler)"
    echo
    echo "## top 15 by inclusive Ir (a function and everything it calls)"
    top --inclusive=yes
    echo
    echo "## top 15 by self Ir (the function's own instructions)"
    top
} > "$OUT/callgrind.txt"
log "wrote $OUT/callgrind.json, callgrind.txt, callgrind.out"
