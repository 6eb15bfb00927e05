# bench/lib/common.sh -- what every benchmark script needs to start its own
# servers on loopback and stop them by PID; sourced, not run.
#
# The script sets, before sourcing:
#   BENCH_NAME   the prefix of its log lines ("bench", "goal", ...)
#   RUN          its scratch directory (removed by stop_all)
# and appends every process it starts to PIDS.  stop_all is installed as
# the EXIT trap; a script with more to stop (nginx masters known only by
# their pid files) adds them to PIDS in its own trap before calling it.

PIDS=()

log() { echo "$BENCH_NAME: $*" >&2; }

# TERM to every process started, then reap them, then the scratch directory
stop_all() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$RUN"
}

# a loopback port nobody listens on right now (the kernel's choice)
free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# waits up to 10 s for something to accept on the port
wait_port() {
    local port=$1 i
    for i in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    log "nothing listens on $port"
    return 1
}
