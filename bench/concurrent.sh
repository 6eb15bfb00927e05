#!/usr/bin/env bash
# bench/concurrent.sh -- many goals at once against one ioa-worker process
# (issue 30): how long until the last one concludes when every goal waits
# on an agent.
#
# For each N of CONC_GOALS and each worker build, CONC_REPEATS times,
# interleaved (base, current, base, current, ...), on a fresh stack each
# time:
#
#   1. Redis, nginx with the module (one worker process, open mode), ONE
#      ioa-worker process with the built-in planner, and one agent (the
#      reference runtime, workers/build/ioa-agent) whose task program
#      sleeps CONC_TASK_S seconds and then echoes the task: tasks run
#      concurrently in the agent, so the agent is never what queues;
#   2. bench/goal/concurrent.py launches N goals at once (POST
#      /launch_goal from 16 connections), each needing one task of that
#      agent, and follows them to their end;
#   3. the worker's peak RSS (VmHWM) and CPU time (utime + stime) are read
#      from /proc before it is stopped.
#
# The builds: "current" is this checkout's workers/build/ioa-worker;
# "base" is the worker of CONC_BASE_REF (default 31ad6a3, the last commit
# before the event-driven engine of issue 30), built once from `git
# archive` into bench/build/base-<sha>/ (never the checkout's own tree).
#
# Output: $BENCH_OUT/concurrent.json (every run, and per N and build the
# median of the repeats with the spread) and concurrent.txt (the table and
# the ratios base/current), read by bench/report.py.
#
#   bash bench/concurrent.sh
#   CONC_GOALS="20" CONC_REPEATS=1 bash bench/concurrent.sh      (quick)
#
# Environment: CONC_GOALS ("20 100"), CONC_TASK_S (2), CONC_REPEATS (2),
# CONC_BASE_REF (31ad6a3), CONC_BUILDS ("base current"), BENCH_OUT
# (bench/results).

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${BENCH_OUT:-$REPO/bench/results}"
GOALS_LIST="${CONC_GOALS:-20 100}"
TASK_S="${CONC_TASK_S:-2}"
REPEATS="${CONC_REPEATS:-2}"
BASE_REF="${CONC_BASE_REF:-31ad6a3}"
BUILDS="${CONC_BUILDS:-base current}"
MODULE="$REPO/build/ngx_http_ioa_module.so"
AGENT="$REPO/workers/build/ioa-agent"
RUN="$(mktemp -d "${TMPDIR:-/tmp}/ioa-conc.XXXXXX")"
PY=/usr/bin/python3

BENCH_NAME=concurrent
# log, stop_all, free_port, wait_port, start_hub; PIDS
. "$REPO/bench/lib/common.sh"
trap stop_all EXIT

for f in "$MODULE" "$AGENT" "$REPO/workers/build/ioa-worker"; do
    [[ -e $f ]] || { log "missing $f (make)"; exit 1; }
done
mkdir -p "$OUT"
unset IOA_LLM_BASE_URL OPENAI_BASE_URL IOA_LLM_API_KEY OPENAI_API_KEY

# the base build, once per commit
declare -A BIN
BIN[current]="$REPO/workers/build/ioa-worker"
if [[ " $BUILDS " == *" base "* ]]; then
    sha=$(git -C "$REPO" rev-parse --short=12 "$BASE_REF^{commit}")
    base="$REPO/bench/build/base-$sha"
    if [[ ! -x $base/build/ioa-worker ]]; then
        # built aside and renamed into place: two runs at once (the test
        # passes) never share a half-built tree
        tmp="$base.tmp.$$"
        log "building the base worker of $BASE_REF ($sha) in $base"
        rm -rf "$tmp" && mkdir -p "$tmp/src"
        git -C "$REPO" archive "$sha" workers ngx_ioa_module/ngx_ioa_tokenize.c \
            ngx_ioa_module/ngx_ioa_tokenize.h | tar -x -C "$tmp/src"
        make -s -C "$tmp/src/workers/worker" BUILD="$tmp/build" >"$tmp/build.log" 2>&1 \
            || { log "the base build failed: $tmp/build.log"; exit 1; }
        mv -T "$tmp" "$base" 2>/dev/null || rm -rf "$tmp"
    fi
    BIN[base]="$base/build/ioa-worker"
fi

GOAL_TEXT='Count the words in the text {n}.'

# one run: prints its JSON line (the driver's, with the worker's figures)
one_run() {
    local build=$1 n=$2 dir=$RUN/$build-$n-$3 wpid apid res
    mkdir -p "$dir"
    start_hub "$dir" "$MODULE" ""
    "${BIN[$build]}" --redis "127.0.0.1:$HUB_REDIS_PORT" \
        --scripts "$REPO/redis-scripts" --consumer "conc-1" --task-timeout 60 \
        </dev/null >"$dir/worker.log" 2>&1 &
    wpid=$!
    PIDS+=("$wpid")
    "$AGENT" --hub "http://127.0.0.1:$HUB_PORT" --name Counter \
        --desc "counts the words in a text" --timeout 60 \
        --exec /bin/sh -c "sleep $TASK_S; cat" \
        </dev/null >"$dir/agent.log" 2>&1 &
    apid=$!
    PIDS+=("$apid")
    for _ in $(seq 1 100); do
        curl -s -X POST "http://127.0.0.1:$HUB_PORT/query_assistant" \
            -H 'Content-Type: application/json' -d '{"name":["Counter"]}' \
            | grep -q '"online": *true' && break
        sleep 0.1
    done
    res=$($PY "$REPO/bench/goal/concurrent.py" --hub "http://127.0.0.1:$HUB_PORT" \
              --goals "$n" --goal "$GOAL_TEXT" --timeout-s $(( n * TASK_S * 2 + 120 )) \
          || true)
    $PY - "$res" "$wpid" "$build" "$n" <<'PY'
import json, os, sys
res = json.loads(sys.argv[1] or "{}")
pid = sys.argv[2]
hwm = 0
for line in open("/proc/%s/status" % pid):
    if line.startswith("VmHWM:"):
        hwm = int(line.split()[1])
f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
res.update(build=sys.argv[3], n=int(sys.argv[4]), worker_rss_kib=hwm,
           worker_cpu_s=round(cpu, 2))
print(json.dumps(res))
PY
    kill "$apid" "$wpid" 2>/dev/null || true
    wait "$apid" "$wpid" 2>/dev/null || true
    forget "$apid"; forget "$wpid"
    stop_hub "$dir"
}

: > "$RUN/runs.jsonl"
for n in $GOALS_LIST; do
    for (( r = 1; r <= REPEATS; r++ )); do
        for build in $BUILDS; do
            log "$build worker, $n goals of one ${TASK_S} s task each (run $r)"
            one_run "$build" "$n" "$r" | tee -a "$RUN/runs.jsonl" >&2
        done
    done
done

$PY - "$RUN/runs.jsonl" "$OUT/concurrent.json" "$OUT/concurrent.txt" \
    "$TASK_S" "$BASE_REF" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
task_s, base_ref = sys.argv[4], sys.argv[5]
groups = {}
for r in runs:
    groups.setdefault((r["n"], r["build"]), []).append(r)
summary = []
for (n, build), rs in sorted(groups.items()):
    last = [r["first_to_last_s"] for r in rs if r.get("first_to_last_s") is not None]
    summary.append({
        "n": n, "build": build, "runs": len(rs),
        "first_to_last_s": statistics.median(last) if last else None,
        "spread_s": [min(last), max(last)] if last else None,
        "median_s": statistics.median([r["median_s"] for r in rs if r.get("median_s") is not None] or [0]),
        "right": min(r.get("right", 0) for r in rs),
        "rss_kib": max(r["worker_rss_kib"] for r in rs),
        "cpu_ms_per_goal": round(1000 * statistics.median(r["worker_cpu_s"] for r in rs) / n, 2),
    })
json.dump({"task_s": float(task_s), "base_ref": base_ref, "runs": runs,
           "summary": summary}, open(sys.argv[2], "w"), indent=1)
lines = ["goals launched at once against ONE ioa-worker process, each waiting "
         "%s s on an agent (base: %s)" % (task_s, base_ref),
         "%6s %-8s %10s %14s %9s %7s %10s %12s" % ("goals", "build", "last (s)",
         "spread (s)", "median", "right", "RSS KiB", "CPU ms/goal")]
by = {(s["n"], s["build"]): s for s in summary}
for s in summary:
    lines.append("%6d %-8s %10s %14s %9.2f %4d/%-3d %9d %12.2f" % (
        s["n"], s["build"], s["first_to_last_s"],
        "%s-%s" % tuple(s["spread_s"]) if s["spread_s"] else "-",
        s["median_s"], s["right"], s["n"], s["rss_kib"], s["cpu_ms_per_goal"]))
for n in sorted({s["n"] for s in summary}):
    b, c = by.get((n, "base")), by.get((n, "current"))
    if b and c and b["first_to_last_s"] and c["first_to_last_s"]:
        lines.append("%d goals: base/current time to the last conclusion %.2f"
                     % (n, b["first_to_last_s"] / c["first_to_last_s"]))
open(sys.argv[3], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
log "wrote $OUT/concurrent.json and $OUT/concurrent.txt"
