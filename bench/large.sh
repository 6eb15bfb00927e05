#!/usr/bin/env bash
# bench/large.sh -- large envelopes: what 1,000 agents each sending a 1 MiB
# envelope at the same moment cost the nginx worker in memory, and what
# 1,000 each sending one over ioa_max_message_size cost (it is read past,
# not buffered, and the connection stays usable).
#
# Each run starts a fresh Redis and a fresh nginx (one worker, open mode,
# the shipped defaults for ioa_max_message_size (1m) and
# ioa_send_queue_limit (4m)) on free loopback ports, then
# bench/large/client.py registers the agents, pairs them into rooms, opens
# one WebSocket each, waits for the worker's memory to be steady, and has
# every connection write its envelope at once (see client.py for how the
# peak is read: VmHWM reset before the send, and VmRSS sampled every
# 10 ms).  The two modes are interleaved, LARGE_RUNS times each, so that
# both see the same machine.
#
# Output: $BENCH_OUT/large.json (default bench/results/large.json)
#
#   {"accepted": {"runs": [..client.py reports..], "peak_mib": [..],
#                 "peak_per_connection_kib": [..], ...},
#    "oversized": {...}, "connections": 1000, "size_accepted": 1048576,
#    "size_oversized": 2097152}
#
#   bash bench/large.sh
#   LARGE_CONNECTIONS=200 LARGE_RUNS=1 bash bench/large.sh     (quickly)
#
# Environment: LARGE_CONNECTIONS (1000, even), LARGE_RUNS (3),
# LARGE_SIZE (bytes of JSON per accepted envelope, 1048576),
# LARGE_OVERSIZE (bytes per oversized one, 2097152), LARGE_MODES
# ("accepted oversized"), LARGE_ROUNDS (sends on the same connections, 3),
# LARGE_MODULE (the
# .so, build/ngx_http_ioa_module.so), BENCH_OUT (bench/results).

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${BENCH_OUT:-$REPO/bench/results}"
MODULE="${LARGE_MODULE:-$REPO/build/ngx_http_ioa_module.so}"
N="${LARGE_CONNECTIONS:-1000}"
RUNS="${LARGE_RUNS:-3}"
SIZE="${LARGE_SIZE:-1048576}"
OVERSIZE="${LARGE_OVERSIZE:-2097152}"
MODES="${LARGE_MODES:-accepted oversized}"
ROUNDS="${LARGE_ROUNDS:-3}"
RUN="$(mktemp -d "${TMPDIR:-/tmp}/ioa-large.XXXXXX")"
PY=/usr/bin/python3

BENCH_NAME=large
# log, stop_all, free_port, wait_port, start_hub, stop_hub; PIDS
. "$REPO/bench/lib/common.sh"
trap stop_all EXIT

[[ -e $MODULE ]] || { log "missing $MODULE (make)"; exit 1; }
mkdir -p "$OUT"

ulimit -Sn "$(ulimit -Hn)"     # the client holds a socket per agent

# one_run MODE SIZE I -> $RUN/MODE-I.json
one_run() {
    local mode=$1 size=$2 i=$3 dir
    dir="$RUN/$mode-$i"
    start_hub "$dir" "$MODULE" ""
    log "$mode run $i: $N connections, $size bytes each"
    $PY "$REPO/bench/large/client.py" --port "$HUB_PORT" \
        --worker-pid "$HUB_WORKER" --redis "$HUB_REDIS_PORT" \
        --connections "$N" --size "$size" --mode "$mode" --rounds "$ROUNDS" \
        --prefix "lg$i" --out "$RUN/$mode-$i.json" \
        || log "$mode run $i: the client failed"
    stop_hub "$dir"
}

for (( i = 1; i <= RUNS; i++ )); do
    [[ " $MODES " == *" accepted "* ]] && one_run accepted "$SIZE" "$i"
    [[ " $MODES " == *" oversized "* ]] && one_run oversized "$OVERSIZE" "$i"
done

$PY - "$RUN" "$RUNS" "$N" "$SIZE" "$OVERSIZE" "$OUT/large.json" <<'EOF'
import json, os, sys
run, runs, n, size, over, out = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:6]), sys.argv[6]
mib = lambda b: round(b / 1048576, 1)
res = {"connections": n, "size_accepted": size, "size_oversized": over}
for mode in ("accepted", "oversized"):
    rs = []
    for i in range(1, runs + 1):
        p = os.path.join(run, "%s-%d.json" % (mode, i))
        if os.path.exists(p):
            rs.append(json.load(open(p)))
    if not rs:
        continue
    m = {"runs": rs, "rss_before_mib": [mib(r["rss_before"]) for r in rs]}
    for k in range(len(rs[0]["rounds"])):
        rd = [r["rounds"][k] for r in rs]
        m["round%d" % (k + 1)] = {
            "peak_mib": [mib(x["rss_peak"]) for x in rd],
            "after_mib": [mib(x["rss_after"]) for x in rd],
            "peak_per_connection_kib": [
                round((x["rss_peak"] - r["rss_before"]) / n / 1024)
                for x, r in zip(rd, rs)],
            "seconds": [x["seconds"] for x in rd],
            "whole_envelopes_received": [x["whole_envelopes_received"] for x in rd],
            "error_codes": [x["error_codes"] for x in rd],
            "closed_by_server": [x["closed_by_server"] for x in rd],
            "usable_after": [x.get("usable_after") for x in rd],
        }
    m["stored"] = [r["stored"] for r in rs]
    res[mode] = m
json.dump(res, open(out, "w"), indent=1)
for mode in ("accepted", "oversized"):
    for k, v in sorted(res.get(mode, {}).items()):
        if k.startswith("round"):
            print("%s %s: peak %s MiB, %s KiB/connection, after %s MiB, %s s, "
                  "whole %s, errors %s" % (mode, k, v["peak_mib"],
                  v["peak_per_connection_kib"], v["after_mib"], v["seconds"],
                  v["whole_envelopes_received"], v["error_codes"]))
EOF
log "wrote $OUT/large.json"
