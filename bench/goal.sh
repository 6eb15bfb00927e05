#!/usr/bin/env bash
# bench/goal.sh -- goal latency: a goal with three agents and the built-in
# planner, from POST /launch_goal to its conclusion (the cost of the system
# itself: the agents answer at once).
#
#   1. start Redis, nginx with the module (one worker) and GOAL_WORKERS
#      ioa-worker processes with the built-in planner (no LLM variables);
#   2. start three agents with the reference runtime (workers/build/
#      ioa-agent, SSE inbox) whose task program is /bin/cat: it answers as
#      soon as it has read the task;
#   3. bench/goal/goal_bench.py launches GOAL_GOALS goals one after another
#      (POST /launch_goal?wait=1, answered when the goal concludes), after
#      two warm-up goals, times each, checks that every agent's result is in
#      the room, and reads every room's log to put each envelope on the
#      goal's timeline;
#   4. everything is stopped by PID.
#
# Output: $BENCH_OUT/goal.json (default bench/results/goal.json)
#
#   {"goals":50, "latency_ms":{"p50":..,"p90":..,"p99":..,"max":..,"min":..,
#    "mean":..}, "planner":"builtin", "mode":"wait", "agents":3,
#    "team":"discovered", "phases_median_ms":[[envelope, ms, n], ...],
#    "failures":[...], "failed":0}
#
# and $BENCH_OUT/goal.txt (the summary and the median timeline),
# $BENCH_OUT/goal-timelines.json (every goal's), goal-worker-*.log.
#
#   bash bench/goal.sh
#   GOAL_GOALS=20 GOAL_MODE=async bash bench/goal.sh
#
# GOAL_NESTED=1: five agents and team_up_depth 1, so one task goes to a
# sub-team (a sub-goal run by a second worker): goal-nested.json/.txt.
#
# GOAL_SUITE=1: the goal suite instead (bench/goal/suite.json, scored by
# bench/goal/suite.py): goals of known answers over the example agents of
# `make run` (scripts/demo_agent.py) plus Tallier, a counter that fails
# every other task, and Teller, a reliable one with the same description;
# several clauses, impossible parts, re-routes; each goal right, honestly
# partial or dishonest, and the latency apart for re-routed goals:
# goal-suite.json/.txt.  GOAL_SUITE_ROUNDS (2) runs of the suite.
# GOAL_SUITE_LLM=scripted: the same suite with the workers' LLM path, every
# decision asked of bench/goal/scripted_llm.py (the answers the suite
# scripts for each goal, a fixed review policy): goal-suite-llm.json/.txt.
#
# Environment: GOAL_GOALS (50), GOAL_WORKERS (1; 2 nested), GOAL_MODE (wait: IoA's
# blocking form; async: 202 then GET /goals/<id> every 2 ms), GOAL_TEAM
# (0: the planner finds the agents by their descriptions, as without
# team_member_names; 1: the team is named), GOAL_MODULE (the .so,
# build/ngx_http_ioa_module.so), GOAL_SCRIPTS (the worker's --scripts,
# redis-scripts: the same as the module embeds), GOAL_WORKER_BIN,
# GOAL_AGENT_BIN, GOAL_MONITOR (1: after the run, one more goal under
# redis-cli MONITOR, every command in $BENCH_OUT/goal-monitor.txt),
# BENCH_OUT (bench/results).

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${BENCH_OUT:-$REPO/bench/results}"
GOALS="${GOAL_GOALS:-50}"
NWORKERS="${GOAL_WORKERS:-}"
MODE="${GOAL_MODE:-wait}"
TEAM="${GOAL_TEAM:-0}"
MONITOR="${GOAL_MONITOR:-1}"
NESTED="${GOAL_NESTED:-0}"
SUITE="${GOAL_SUITE:-0}"
NAME=goal
[[ $NESTED == 1 ]] && NAME=goal-nested
SUITE_LLM="${GOAL_SUITE_LLM:-}"
[[ $SUITE == 1 ]] && NAME=goal-suite
[[ $SUITE == 1 && $SUITE_LLM == scripted ]] && NAME=goal-suite-llm
[[ -n $NWORKERS ]] || { NWORKERS=1; [[ $NESTED == 1 ]] && NWORKERS=2; }
MODULE="${GOAL_MODULE:-$REPO/build/ngx_http_ioa_module.so}"
WORKER="${GOAL_WORKER_BIN:-$REPO/workers/build/ioa-worker}"
AGENT="${GOAL_AGENT_BIN:-$REPO/workers/build/ioa-agent}"
SCRIPTS="${GOAL_SCRIPTS:-$REPO/redis-scripts}"
RUN="$(mktemp -d "${TMPDIR:-/tmp}/ioa-goal.XXXXXX")"
PY=/usr/bin/python3

BENCH_NAME=goal
# log, stop_all, free_port, wait_port; PIDS
. "$REPO/bench/lib/common.sh"

trap stop_all EXIT

for f in "$MODULE" "$WORKER" "$AGENT"; do
    [[ -e "$f" ]] || { log "missing $f (make; make -C workers/worker; make -C workers/agent)"; exit 1; }
done
mkdir -p "$OUT" "$RUN/logs"
unset IOA_LLM_BASE_URL OPENAI_BASE_URL IOA_LLM_API_KEY OPENAI_API_KEY

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' \
    --appendonly no --daemonize no --logfile "$RUN/logs/redis.log" &
PIDS+=("$!")
wait_port "$REDIS_PORT"

PORT=$(free_port)
cat > "$RUN/nginx.conf" <<EOF
load_module $MODULE;
worker_processes 1;
daemon off;
master_process on;
pid $RUN/nginx.pid;
error_log $RUN/logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $RUN/body;
    ioa_redis 127.0.0.1:$REDIS_PORT;
    ioa_limit_rate off; ioa_limit_room_rate off; ioa_limit_teamup_rate off; ioa_limit_conn 0;
    ioa_limit_launch_rate off;
    ioa_limit_goals_in_flight off;
    server {
        listen 127.0.0.1:$PORT;
        location / { ioa_api; ioa_auth off; }
    }
}
EOF
nginx -p "$RUN" -c "$RUN/nginx.conf" </dev/null >"$RUN/logs/nginx.out" 2>&1 &
PIDS+=("$!")
wait_port "$PORT"
HUB="http://127.0.0.1:$PORT"

LLM_URL=
if [[ $SUITE == 1 && $SUITE_LLM == scripted ]]; then
    LLM_PORT=$(free_port)
    $PY "$REPO/bench/goal/scripted_llm.py" --suite "$REPO/bench/goal/suite.json" \
        --port "$LLM_PORT" </dev/null >"$RUN/logs/scripted-llm.log" 2>&1 &
    PIDS+=("$!")
    wait_port "$LLM_PORT"
    LLM_URL="http://127.0.0.1:$LLM_PORT"
    export IOA_LLM_BASE_URL="$LLM_URL/v1" IOA_LLM_RESPONSE_FORMAT=json_schema
elif [[ -n $SUITE_LLM ]]; then
    log "GOAL_SUITE_LLM must be \"scripted\" (with GOAL_SUITE=1), not \"$SUITE_LLM\""
    exit 1
fi

for (( i = 1; i <= NWORKERS; i++ )); do
    "$WORKER" --redis "127.0.0.1:$REDIS_PORT" --scripts "$SCRIPTS" \
        --consumer "bench-$i" --task-timeout 20 \
        </dev/null >"$RUN/logs/worker-$i.log" 2>&1 &
    PIDS+=("$!")
done

# three agents whose descriptions match the goal's three clauses (nested:
# five, and a fifth clause whose agent no longer fits in the team goes to
# a sub-team, run by another worker)
AGENTS=(Counter Shouter Reverser)
DESCS=("counts the words in a text" "shouts a text in upper case"
       "reverses the order of the words of a text")
GOAL_TEXT="Count the words in a text. Shout a text in upper case. Reverse the order of the words of a text."
EXTRA=()
if [[ $NESTED == 1 ]]; then
    AGENTS+=(Sorter Deduper)
    DESCS+=("sorts the lines of a file alphabetically"
            "removes duplicate entries from a list")
    GOAL_TEXT="$GOAL_TEXT Sort the lines of a file alphabetically. Remove duplicate entries from a list."
    EXTRA=(--team-up-depth 1 --expect-results 4)
fi
PROGS=(/bin/cat /bin/cat /bin/cat /bin/cat /bin/cat)
if [[ $SUITE == 1 ]]; then
    AGENTS+=(Tallier Teller)
    DESCS+=("tallies the words in a text" "tallies the words in a text")
    PROGS=("$REPO/scripts/demo_agent.py count" "$REPO/scripts/demo_agent.py shout"
           "$REPO/scripts/demo_agent.py reverse"
           "$REPO/scripts/demo_agent.py flaky-count"
           "$REPO/scripts/demo_agent.py count")
    export IOA_DEMO_STATE="$RUN/flaky-state"
fi
for i in "${!AGENTS[@]}"; do
    # shellcheck disable=SC2086  # a program and its arguments
    "$AGENT" --hub "$HUB" --name "${AGENTS[$i]}" --desc "${DESCS[$i]}" \
        --timeout 10 --exec ${PROGS[$i]} \
        </dev/null >"$RUN/logs/agent-${AGENTS[$i]}.log" 2>&1 &
    PIDS+=("$!")
done

# every agent registered and online (its inbox is open)
names=$(printf '"%s",' "${AGENTS[@]}")
names="[${names%,}]"
ok=0
for _ in $(seq 1 100); do
    n=$(curl -s -X POST "$HUB/query_assistant" -H 'Content-Type: application/json' \
        -d '{"name":'"$names"'}' \
        | $PY -c 'import json,sys
try:
    print(sum(1 for a in json.load(sys.stdin) if a.get("online")))
except Exception:
    print(0)')
    if [[ $n == "${#AGENTS[@]}" ]]; then ok=1; break; fi
    sleep 0.1
done
(( ok )) || { log "the agents did not come online"; tail -n 5 "$RUN"/logs/agent-*.log >&2; exit 1; }

if [[ $SUITE == 1 ]]; then
    rc=0
    $PY "$REPO/bench/goal/suite.py" --hub "$HUB" --redis "$REDIS_PORT" \
        --suite "$REPO/bench/goal/suite.json" \
        --rounds "${GOAL_SUITE_ROUNDS:-2}" --json "$OUT/$NAME.json" \
        ${LLM_URL:+--llm "$LLM_URL"} \
        | tee "$OUT/$NAME.txt" || rc=$?
    for (( i = 1; i <= NWORKERS; i++ )); do
        cp "$RUN/logs/worker-$i.log" "$OUT/$NAME-worker-$i.log"
    done
    log "wrote $OUT/$NAME.json and $OUT/$NAME.txt"
    exit "$rc"
fi

team=()
[[ $TEAM == 1 ]] && team=(--team)
rc=0
$PY "$REPO/bench/goal/goal_bench.py" --hub "$HUB" --redis "$REDIS_PORT" \
    --goals "$GOALS" --agents "$(IFS=,; echo "${AGENTS[*]}")" --goal "$GOAL_TEXT" \
    --mode "$MODE" "${team[@]}" "${EXTRA[@]}" --json "$OUT/$NAME.json" \
    --timeline "$OUT/$NAME-timelines.json" | tee "$OUT/$NAME.txt" || rc=$?

# one more goal under MONITOR: every Redis command of the whole system
# (nginx, workers, the agents' posts through nginx), timestamped
if [[ $MONITOR == 1 ]]; then
    redis-cli -p "$REDIS_PORT" monitor > "$OUT/$NAME-monitor.txt" &
    mon=$!
    sleep 0.3
    body='{"goal":"'"$GOAL_TEXT"'","max_turns":100,"skip_naming":true}'
    [[ $TEAM == 1 ]] && body='{"goal":"'"$GOAL_TEXT"'","max_turns":100,"skip_naming":true,"team_member_names":'"$names"'}'
    [[ $NESTED == 1 ]] && body='{"goal":"'"$GOAL_TEXT"'","max_turns":100,"skip_naming":true,"team_up_depth":1}'
    t0=$(date +%s.%N)
    curl -s -X POST "$HUB/launch_goal?wait=1" -H 'Content-Type: application/json' -d "$body" >/dev/null
    t1=$(date +%s.%N)
    sleep 0.3
    kill "$mon" 2>/dev/null || true
    wait "$mon" 2>/dev/null || true
    $PY - "$OUT/$NAME-monitor.txt" "$t0" "$t1" <<'PY'
import re, sys
t0, t1 = float(sys.argv[2]), float(sys.argv[3])
rows = []
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r'([0-9.]+) \[\d+ ([^\]]+)\] (.*)', line)
    if m and t0 <= float(m.group(1)) <= t1:
        rows.append((float(m.group(1)), m.group(2), m.group(3)))
clients = {}
for t, c, _ in rows:
    clients[c] = clients.get(c, 0) + 1
print("monitor: %d Redis commands during one goal of %.1f ms, by client: %s"
      % (len(rows), (t1 - t0) * 1000, ", ".join("%s %d" % kv for kv in sorted(clients.items()))))
PY
fi

for (( i = 1; i <= NWORKERS; i++ )); do
    cp "$RUN/logs/worker-$i.log" "$OUT/$NAME-worker-$i.log"
done
if grep -v '\[notice\]' "$RUN/logs/error.log" | grep -q .; then
    log "nginx error log:"
    grep -v '\[notice\]' "$RUN/logs/error.log" | head -n 5 >&2
fi
log "wrote $OUT/$NAME.json and $OUT/$NAME.txt"
exit "$rc"
