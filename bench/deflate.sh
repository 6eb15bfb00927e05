#!/usr/bin/env bash
# bench/deflate.sh -- permessage-deflate on the hub: bytes on the wire and
# nginx CPU per envelope with and without it, the memory of a deflate
# connection, and the zlib choices of ngx_ioa_ws_deflate.c (issue 16,
# point 3).  Starts its own Redis and one nginx worker, then runs
# bench/deflate.py (python3-websockets clients; see there for what is
# measured and how).
#
#   bash bench/deflate.sh [REPEATS] [COUNT]
#       REPEATS  runs of each mode, interleaved (default 3)
#       COUNT    envelopes per room and run (default 100; 20 rooms of 4)
#
# Prints Markdown tables (BENCHMARKS.md, "permessage-deflate"); the figures
# also go to $BENCH_OUT/deflate.json (bench/results).

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPEATS=${1:-3}
COUNT=${2:-100}
OUT="${BENCH_OUT:-$REPO/bench/results}"
MODULE="$REPO/build/ngx_http_ioa_module.so"
BENCH_NAME=deflate
RUN=$(mktemp -d "${TMPDIR:-/tmp}/ioa-deflate.XXXXXX")

. "$REPO/bench/lib/common.sh"
trap stop_all EXIT

make -s -C "$REPO" "$MODULE" >&2 || { log "building the module failed"; exit 1; }
/usr/bin/python3 -c 'import websockets' 2>/dev/null \
    || { log "python3-websockets is needed (apt-get install python3-websockets)"; exit 1; }
mkdir -p "$OUT"

# deflate on where a client offers it; the limits off as for every bench;
# /metrics for the byte counters
start_redis "$RUN/redis"
launch_nginx "$RUN/hub" "$MODULE" "$HUB_REDIS_PORT" "ioa_ws_deflate on;" \
    'location = /metrics { ioa_metrics; }'
wait_nginx
log "hub on 127.0.0.1:$HUB_PORT, worker $HUB_WORKER"

/usr/bin/python3 "$REPO/bench/deflate.py" --port "$HUB_PORT" \
    --worker "$HUB_WORKER" --repeats "$REPEATS" --count "$COUNT" \
    --json "$OUT/deflate.json"
