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
#      from /proc before it is stopped, and its RSS just before the launch:
#      (peak - idle) / N is what a waiting goal costs (an upper bound: the
#      peak also holds what the busiest moment allocated, and at small N
#      the fixed costs: the steps' fiber stacks, libcurl's handles); the
#      slope of the peak between the two largest N is the cost of one
#      goal more.
#
# Two modes (CONC_MODES): "builtin", the built-in planner; "llm", every
# decision asked of a model that answers after CONC_LLM_MS ms
# (bench/goal/scripted_llm.py with no suite: {} each time, which the
# worker replaces with the built-in decision, so the outcome is the same
# and every goal waits on the model at least twice, for its plan and its
# conclusion), the worker's IOA_LLM_CONCURRENCY at CONC_LLM_CONCURRENCY.
# The base worker blocks for each of those waits, so it only runs up to
# CONC_BASE_MAX goals (more would take hours).
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
# Environment: CONC_GOALS ("20 100 1000"), CONC_TASK_S (2), CONC_REPEATS
# (2), CONC_BASE_REF (31ad6a3), CONC_BUILDS ("base current"), CONC_MODES
# ("builtin llm"), CONC_LLM_MS (500), CONC_LLM_CONCURRENCY (64),
# CONC_BASE_MAX (100; llm mode: 20), BENCH_OUT (bench/results).

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${BENCH_OUT:-$REPO/bench/results}"
GOALS_LIST="${CONC_GOALS:-20 100 1000}"
TASK_S="${CONC_TASK_S:-2}"
REPEATS="${CONC_REPEATS:-2}"
BASE_REF="${CONC_BASE_REF:-31ad6a3}"
BUILDS="${CONC_BUILDS:-base current}"
MODES="${CONC_MODES:-builtin llm}"
LLM_MS="${CONC_LLM_MS:-500}"
LLM_CONC="${CONC_LLM_CONCURRENCY:-64}"
BASE_MAX="${CONC_BASE_MAX:-100}"
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
        # what the worker builds from, wherever that commit kept it: lib/
        # now, the module's tokenizer file (in registry/ or above it) before
        git -C "$REPO" archive "$sha" $(git -C "$REPO" ls-tree --name-only \
            "$sha" workers lib ngx_ioa_module/ngx_ioa_tokenize.c \
            ngx_ioa_module/ngx_ioa_tokenize.h \
            ngx_ioa_module/registry/ngx_ioa_tokenize.c \
            ngx_ioa_module/registry/ngx_ioa_tokenize.h) | tar -x -C "$tmp/src"
        make -s -C "$tmp/src/workers/worker" BUILD="$tmp/build" >"$tmp/build.log" 2>&1 \
            || { log "the base build failed: $tmp/build.log"; exit 1; }
        mv -T "$tmp" "$base" 2>/dev/null || rm -rf "$tmp"
    fi
    BIN[base]="$base/build/ioa-worker"
fi

GOAL_TEXT='Count the words in the text {n}.'

# one run: prints its JSON line (the driver's, with the worker's figures)
one_run() {
    local build=$1 n=$2 mode=$4 dir=$RUN/$build-$n-$4-$3 wpid apid lpid res
    local idle lport
    local -a env=()
    mkdir -p "$dir"
    start_hub "$dir" "$MODULE" ""
    lpid=
    if [[ $mode == llm ]]; then
        lport=$(free_port)
        $PY "$REPO/bench/goal/scripted_llm.py" --port "$lport" --delay-ms "$LLM_MS" \
            </dev/null >"$dir/llm.log" 2>&1 &
        lpid=$!
        PIDS+=("$lpid")
        wait_port "$lport"
        env=(IOA_LLM_BASE_URL="http://127.0.0.1:$lport/v1" IOA_LLM_MAX_ATTEMPTS=1
             IOA_LLM_CONCURRENCY="$LLM_CONC")
    fi
    env "${env[@]}" "${BIN[$build]}" --redis "127.0.0.1:$HUB_REDIS_PORT" \
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
    sleep 0.5                   # the worker's start settles
    idle=$(awk '/^VmRSS:/ { print $2 }' "/proc/$wpid/status")
    res=$($PY "$REPO/bench/goal/concurrent.py" --hub "http://127.0.0.1:$HUB_PORT" \
              --goals "$n" --goal "$GOAL_TEXT" --timeout-s $(( n * TASK_S * 4 + 300 )) \
          || true)
    $PY - "$res" "$wpid" "$build" "$n" "$mode" "$idle" <<'PY'
import json, os, sys
res = json.loads(sys.argv[1] or "{}")
pid = sys.argv[2]
hwm = 0
for line in open("/proc/%s/status" % pid):
    if line.startswith("VmHWM:"):
        hwm = int(line.split()[1])
f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
n, idle = int(sys.argv[4]), int(sys.argv[6])
res.update(build=sys.argv[3], n=n, mode=sys.argv[5], worker_rss_kib=hwm,
           worker_idle_kib=idle,
           kib_per_goal=round(max(hwm - idle, 0) / n, 2),
           worker_cpu_s=round(cpu, 2))
print(json.dumps(res))
PY
    kill "$apid" "$wpid" $lpid 2>/dev/null || true
    wait "$apid" "$wpid" $lpid 2>/dev/null || true
    forget "$apid"; forget "$wpid"
    [[ -n $lpid ]] && forget "$lpid"
    stop_hub "$dir"
}

: > "$RUN/runs.jsonl"
for mode in $MODES; do
    for n in $GOALS_LIST; do
        for (( r = 1; r <= REPEATS; r++ )); do
            for build in $BUILDS; do
                max=$BASE_MAX
                [[ $mode == llm && $max -gt 20 ]] && max=20
                if [[ $build == base ]] && (( n > max )); then
                    continue
                fi
                log "$build worker ($mode), $n goals of one ${TASK_S} s task each (run $r)"
                one_run "$build" "$n" "$r" "$mode" | tee -a "$RUN/runs.jsonl" >&2
            done
        done
    done
done

$PY - "$RUN/runs.jsonl" "$OUT/concurrent.json" "$OUT/concurrent.txt" \
    "$TASK_S" "$BASE_REF" "$LLM_MS" "$LLM_CONC" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
task_s, base_ref, llm_ms, llm_conc = sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
groups = {}
for r in runs:
    groups.setdefault((r.get("mode", "builtin"), r["n"], r["build"]), []).append(r)
summary = []
for (mode, n, build), rs in sorted(groups.items()):
    last = [r["first_to_last_s"] for r in rs if r.get("first_to_last_s") is not None]
    summary.append({
        "mode": mode, "n": n, "build": build, "runs": len(rs),
        "first_to_last_s": round(statistics.median(last), 2) if last else None,
        "spread_s": [min(last), max(last)] if last else None,
        "median_s": statistics.median([r["median_s"] for r in rs if r.get("median_s") is not None] or [0]),
        "right": min(r.get("right", 0) for r in rs),
        "rss_kib": max(r["worker_rss_kib"] for r in rs),
        "kib_per_goal": max(r.get("kib_per_goal", 0) for r in rs),
        "cpu_ms_per_goal": round(1000 * statistics.median(r["worker_cpu_s"] for r in rs) / n, 2),
    })
json.dump({"task_s": float(task_s), "base_ref": base_ref, "llm_ms": int(llm_ms),
           "llm_concurrency": int(llm_conc), "runs": runs,
           "summary": summary}, open(sys.argv[2], "w"), indent=1)
lines = ["goals launched at once against ONE ioa-worker process, each waiting "
         "%s s on an agent (base: %s); llm: every decision also waits %s ms on "
         "a model (IOA_LLM_CONCURRENCY %s)" % (task_s, base_ref, llm_ms, llm_conc),
         "%-7s %6s %-8s %10s %14s %9s %9s %10s %9s %12s" % ("mode", "goals", "build",
         "last (s)", "spread (s)", "median", "right", "RSS KiB", "KiB/goal",
         "CPU ms/goal")]
by = {(s["mode"], s["n"], s["build"]): s for s in summary}
for s in summary:
    lines.append("%-7s %6d %-8s %10s %14s %9.2f %4d/%-4d %10d %9.2f %12.2f" % (
        s["mode"], s["n"], s["build"], s["first_to_last_s"],
        "%s-%s" % tuple(s["spread_s"]) if s["spread_s"] else "-",
        s["median_s"], s["right"], s["n"], s["rss_kib"], s["kib_per_goal"],
        s["cpu_ms_per_goal"]))
for mode, n in sorted({(s["mode"], s["n"]) for s in summary}):
    b, c = by.get((mode, n, "base")), by.get((mode, n, "current"))
    if b and c and b["first_to_last_s"] and c["first_to_last_s"]:
        lines.append("%s, %d goals: base/current time to the last conclusion %.2f"
                     % (mode, n, b["first_to_last_s"] / c["first_to_last_s"]))
# what one more waiting goal costs: the slope of the peak RSS between the
# two largest N of a build (the fixed costs, such as the fibers' stacks and
# libcurl's handles, do not grow with the goals and fall out)
for mode, build in sorted({(s["mode"], s["build"]) for s in summary}):
    ns = sorted(s["n"] for s in summary if s["mode"] == mode and s["build"] == build)
    if len(ns) >= 2:
        lo, hi = by[(mode, ns[-2], build)], by[(mode, ns[-1], build)]
        slope = (hi["rss_kib"] - lo["rss_kib"]) / (ns[-1] - ns[-2])
        for s in summary:
            if s["mode"] == mode and s["build"] == build:
                s["kib_per_more_goal"] = round(slope, 2)
        lines.append("%s, %s: %.2f KiB for each goal more (peak RSS from %d to %d goals)"
                     % (mode, build, slope, ns[-2], ns[-1]))
json.dump({"task_s": float(task_s), "base_ref": base_ref, "llm_ms": int(llm_ms),
           "llm_concurrency": int(llm_conc), "runs": runs,
           "summary": summary}, open(sys.argv[2], "w"), indent=1)
open(sys.argv[3], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
log "wrote $OUT/concurrent.json and $OUT/concurrent.txt"
