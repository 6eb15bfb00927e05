#!/usr/bin/env bash
# make stop: stops what scripts/run.sh started, by PID.
REPO=$(cd "$(dirname "$0")/.." && pwd)
RUN="${IOA_RUN_DIR:-$REPO/build/run}"
# workers and agents first (TERM: they finish or hand back their work),
# then nginx, gracefully on QUIT (agents get 1001), then Redis on TERM
entries=()
for f in "$RUN"/agent-*.pid "$RUN"/worker-*.pid; do
    [ -f "$f" ] && entries+=("$(basename "$f") TERM")
done
entries+=("nginx.pid QUIT" "redis.pid TERM")
for entry in "${entries[@]}"; do
    set -- $entry
    pidfile="$RUN/$1"
    if [ -f "$pidfile" ]; then
        pid=$(cat "$pidfile")
        kill -"$2" "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    fi
done
echo "stopped"
