#!/usr/bin/env bash
# scripts/fuzz.sh -- build and run the libFuzzer harnesses of fuzz/.
#
#   bash scripts/fuzz.sh build              build/fuzz/bin/<harness>
#   bash scripts/fuzz.sh run [SECONDS]      each harness for SECONDS (60)
#   bash scripts/fuzz.sh run SECONDS RUNS   at most RUNS inputs, fixed seed
#   bash scripts/fuzz.sh regress            every committed input, once
#
# The harnesses link the module's own objects and nginx's core, compiled
# by clang with -fsanitize=fuzzer-no-link,address,undefined from the same
# Debian nginx source as `make test-asan` (scripts/asan-nginx.sh fetches
# it); nginx's main() is renamed so libFuzzer's runs.  A run starts from
# the seeds in fuzz/corpus/<harness> and keeps what it finds in
# build/fuzz/corpus/<harness> (not committed); a crash is written to
# build/fuzz/crashes/ and fails the run: fix it, then commit the input under
# fuzz/regressions/<harness>/ so `regress` replays it from then on.
#
# Four harnesses take the bytes of one parser (ws_frame, envelope,
# rest_body, redis_reply).  http_request takes whole HTTP byte streams
# (requests, pipelined ones, several connections, WebSocket frames) and
# runs them through nginx's own HTTP code into every handler of the module,
# in a hub the harness starts in its own process, with a redis-server of
# its own (fuzz/http_request.c says how; its seeds come from
# fuzz/http_request_seeds.py, the endpoints and malformations of
# t/295-malformed-requests.t).  A crash replays with
#   build/fuzz/bin/http_request build/fuzz/crashes/http_request-crash-...
# and IOA_FUZZ_VERBOSE=1 prints what the hub answered.

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$REPO/build/fuzz"
VERSION=1.22.1
HARNESSES="ws_frame envelope rest_body redis_reply http_request"
# nonnull-attribute off: it reports memcpy(p, NULL, 0), which nginx's own
# %V does for every empty ngx_str_t; a NULL with bytes to copy is still a
# SEGV that ASan reports
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-sanitize=nonnull-attribute"

log() { echo "fuzz: $*" >&2; }

build() {
    local src="$OUT/src/nginx-$VERSION" objs
    if [[ ! -d $src ]]; then
        # the same tarball as the ASan build; fetch it through that script's
        # logic when it is not there yet
        if [[ ! -e $REPO/build/asan/src/nginx_$VERSION.orig.tar.gz ]]; then
            bash "$REPO/scripts/asan-nginx.sh" --fetch-only
        fi
        mkdir -p "$OUT/src"
        tar -xzf "$REPO/build/asan/src/nginx_$VERSION.orig.tar.gz" -C "$OUT/src"
    fi

    # configure again only when the module's sources (or these flags)
    # changed.
    # NGX_HAVE_NONALIGNED=0: nginx's request-line parser compares methods
    # with unaligned 32-bit loads on x86, which UBSan (fatal here) reports
    # as soon as http_request sends a pipelined request; this takes the
    # byte-wise branch nginx builds on strict-alignment machines, so the
    # alignment check stays on for the module's own code
    if [[ ! -e $OUT/obj/Makefile || -n $(find "$REPO/config" "$REPO/ngx_ioa_module" "$REPO/lib" "$REPO/redis-scripts" "$REPO/scripts/fuzz.sh" -newer "$OUT/obj/Makefile" 2>/dev/null | head -1) ]]; then
        log "configuring nginx with clang"
        (cd "$src" && CC=clang ./configure --builddir="$OUT/obj" \
            --with-debug --with-threads --with-http_ssl_module \
            --with-http_v2_module --with-http_auth_request_module \
            --with-cc-opt="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link $SAN -DNGX_DEBUG_PALLOC=1 -DNGX_HAVE_NONALIGNED=0" \
            --with-ld-opt="$SAN" --add-module="$REPO" >"$OUT/configure.log" 2>&1) \
            || { cat "$OUT/configure.log" >&2; exit 1; }
    fi

    log "building nginx's objects"
    make -s -j"$(nproc)" -f "$OUT/obj/Makefile" -C "$src" >"$OUT/make.log" 2>&1 \
        || { tail -30 "$OUT/make.log" >&2; exit 1; }

    # nginx's own main() gives way to libFuzzer's
    objcopy --redefine-sym main=ngx_nginx_main "$OUT/obj/src/core/nginx.o" \
        "$OUT/nginx-nomain.o"
    objs=$(find "$OUT/obj" -name '*.o' ! -path '*/src/core/nginx.o' | sort)

    mkdir -p "$OUT/bin"
    for h in $HARNESSES; do
        log "linking $h"
        # http_request sees every message nginx logs (a crit or worse is
        # a finding): the log's one entry point is wrapped at link time
        local wrap=()
        [[ $h == http_request ]] && wrap=(-Wl,--wrap=ngx_log_error_core)
        clang -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer $SAN "${wrap[@]}" \
            -I "$src/src/core" -I "$src/src/event" -I "$src/src/event/modules" \
            -I "$src/src/os/unix" -I "$src/src/http" -I "$src/src/http/v2" \
            -I "$src/src/http/modules" -I "$OUT/obj" -I "$OUT/obj/addon/ioa" \
            -I "$REPO/ngx_ioa_module" $(printf -- '-I %s ' "$REPO"/ngx_ioa_module/*/) \
            -I "$REPO/lib" -I "$REPO/fuzz" \
            "$REPO/fuzz/$h.c" "$REPO/fuzz/fuzz_common.c" $objs "$OUT/nginx-nomain.o" \
            -lcrypt -lpcre2-8 -lssl -lcrypto -lz -lhiredis -lyajl -lunistring -lpthread \
            -o "$OUT/bin/$h"
    done
}

# run SECONDS: each harness for that long (make fuzz); run SECONDS RUNS: at
# most RUNS inputs each from a fixed seed, so a CI pass is the same every
# time and a failure there is a finding, not luck.  http_request runs a
# whole hub per input (a few hundred a second here, against tens of
# thousands for the byte-level harnesses), so it takes a fifth of RUNS;
# its hub keeps nginx's timers on the wall clock, so two passes from one
# seed start alike but may part once a timer decides what an input covers
run() {
    local secs=${1:-60} runs=${2:-} h rc=0
    mkdir -p "$OUT/crashes"
    for h in $HARNESSES; do
        local corpus="$OUT/corpus/$h" fixed=() opts=()
        if [[ -n $runs ]]; then
            # from the committed seeds only: the same inputs on every machine
            corpus="$OUT/corpus-fixed/$h"
            rm -rf "$corpus"
            fixed=(-runs="$runs" -seed=1)
            [[ $h == http_request ]] && fixed=(-runs="$((runs / 5))" -seed=1)
        fi
        mkdir -p "$corpus"
        [[ -e $REPO/fuzz/$h.dict ]] && opts+=(-dict="$REPO/fuzz/$h.dict")
        # nginx in the harness keeps memory across inputs (the module's
        # caches, connections an input left): libFuzzer's per-input leak
        # check would run every such input twice and find nothing
        [[ $h == http_request ]] && opts+=(-detect_leaks=0)
        log "$h for ${secs}s"
        harness_env "$h"
        "$OUT/bin/$h" -max_total_time="$secs" "${fixed[@]}" -print_final_stats=1 \
            -artifact_prefix="$OUT/crashes/$h-" -max_len=65536 "${opts[@]}" \
            "$corpus" "$REPO/fuzz/corpus/$h" 2>"$OUT/$h.log" \
            || { rc=1; log "$h FOUND A CRASH:"; tail -40 "$OUT/$h.log" >&2; }
        grep -E '^stat::number_of_executed_units|^stat::average_exec_per_sec|^stat::peak_rss_mb' "$OUT/$h.log" \
            | sed "s/^/fuzz: $h: /" >&2 || true
        grep -aE '^#[0-9]+.*(DONE|INITED)' "$OUT/$h.log" | tail -1 \
            | sed "s/^/fuzz: $h: /" >&2 || true
    done
    return $rc
}

# http_request's hub (its configuration, error.log, Redis) lives in a
# directory of its own under build/fuzz/http, left there when it crashed
harness_env() {
    if [[ $1 == http_request ]]; then
        rm -rf "$OUT/http"
        mkdir -p "$OUT/http"
        export IOA_FUZZ_DIR="$OUT/http"
    fi
}

regress() {
    local h files rc=0
    for h in $HARNESSES; do
        files=$(find "$REPO/fuzz/corpus/$h" "$REPO/fuzz/regressions/$h" -type f 2>/dev/null | sort || true)
        [[ -n $files ]] || continue
        harness_env "$h"
        # shellcheck disable=SC2086
        "$OUT/bin/$h" $files >"$OUT/$h-regress.log" 2>&1 \
            || { rc=1; log "$h: an input fails:"; tail -40 "$OUT/$h-regress.log" >&2; }
        log "$h: $(echo "$files" | wc -l) inputs replayed"
    done
    return $rc
}

case ${1:-} in
build) build ;;
run) run "${2:-60}" "${3:-}" ;;
regress) regress ;;
*) echo "usage: $0 build | run [SECONDS] | regress" >&2; exit 2 ;;
esac
