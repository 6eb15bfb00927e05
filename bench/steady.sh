#!/usr/bin/env bash
# bench/steady.sh -- is Redis' memory flat under steady traffic that keeps
# opening new rooms and registering new agents (as goals do)?  Side by
# side in one run: the hub with short retentions (ioa_room_retention and
# ioa_agent_retention STEADY_RETENTION seconds) and the same hub with
# retention off, interleaved, STEADY_RUNS times each; each run a fresh
# Redis and nginx on free loopback ports (bench/steady/client.py drives
# them and reads Redis; see there for the workload and the model that
# predicts the plateau).
#
# Output: $BENCH_OUT/steady.json (default bench/results/steady.json)
#
#   {"retention": {"runs": [..client.py reports..]}, "off": {...},
#    "seconds": .., "retention_s": ..}
#
#   bash bench/steady.sh
#   STEADY_SECONDS=40 STEADY_RUNS=1 bash bench/steady.sh      (quickly)
#
# Environment: STEADY_SECONDS (120: several retentions), STEADY_RETENTION
# (10), STEADY_RUNS (2), STEADY_POSTS (posts/s, 200), STEADY_ROOMS
# (rooms/s, 5), STEADY_AGENTS (agents/s, 10), STEADY_SIZE (content bytes,
# 500), STEADY_ACTIVE (seconds a room talks, 10), STEADY_MODULE (the .so),
# BENCH_OUT (bench/results).

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${BENCH_OUT:-$REPO/bench/results}"
MODULE="${STEADY_MODULE:-$REPO/build/ngx_http_ioa_module.so}"
SECONDS_RUN="${STEADY_SECONDS:-120}"
RETENTION="${STEADY_RETENTION:-10}"
RUNS="${STEADY_RUNS:-2}"
RUN="$(mktemp -d "${TMPDIR:-/tmp}/ioa-steady.XXXXXX")"
PY=/usr/bin/python3

BENCH_NAME=steady
# log, stop_all, free_port, wait_port, start_hub, stop_hub; PIDS
. "$REPO/bench/lib/common.sh"
trap stop_all EXIT

[[ -e $MODULE ]] || { log "missing $MODULE (make)"; exit 1; }
mkdir -p "$OUT"

# one_run MODE I -> $RUN/MODE-I.json; MODE is retention or off
one_run() {
    local mode=$1 i=$2 dir r=0
    dir="$RUN/$mode-$i"
    [[ $mode == retention ]] && r=$RETENTION
    if (( r > 0 )); then
        start_hub "$dir" "$MODULE" "ioa_room_retention ${r}s; ioa_agent_retention ${r}s;"
    else
        start_hub "$dir" "$MODULE" "ioa_room_retention off; ioa_agent_retention off;"
    fi
    log "$mode run $i: ${SECONDS_RUN} s"
    $PY "$REPO/bench/steady/client.py" --port "$HUB_PORT" \
        --redis "$HUB_REDIS_PORT" --seconds "$SECONDS_RUN" \
        --posts-per-s "${STEADY_POSTS:-200}" --rooms-per-s "${STEADY_ROOMS:-5}" \
        --agents-per-s "${STEADY_AGENTS:-10}" --size "${STEADY_SIZE:-500}" \
        --active "${STEADY_ACTIVE:-10}" --room-retention "$r" \
        --agent-retention "$r" --out "$RUN/$mode-$i.json" \
        || log "$mode run $i: the client failed"
    stop_hub "$dir"
}

for (( i = 1; i <= RUNS; i++ )); do
    one_run retention "$i"
    one_run off "$i"
done

$PY - "$RUN" "$RUNS" "$SECONDS_RUN" "$RETENTION" "$OUT/steady.json" <<'PYEOF'
import json, os, sys
run, runs, secs, keep, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
res = {"seconds": secs, "retention_s": keep}
for mode in ("retention", "off"):
    rs = []
    for i in range(1, runs + 1):
        p = os.path.join(run, "%s-%d.json" % (mode, i))
        if os.path.exists(p):
            rs.append(json.load(open(p)))
    res[mode] = {"runs": rs}
json.dump(res, open(out, "w"))
mib = lambda b: "%.1f" % (b / 1048576)
for mode in ("retention", "off"):
    for r in res[mode]["runs"]:
        print("%s: plateau %s MiB (predicted %s), last %s, max %s, base %s; "
              "posted %d, errors %s" % (mode, mib(r["plateau_used"]),
              mib(r["predicted_used"]), mib(r["last_used"]), mib(r["max_used"]),
              mib(r["base_used"]), r["posted"], r["errors"]))
PYEOF
log "wrote $OUT/steady.json"
