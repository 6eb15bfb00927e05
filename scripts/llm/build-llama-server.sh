#!/usr/bin/env bash
# build-llama-server.sh -- build (once) and cache a static llama-server binary
# for offline tests that need a real OpenAI-compatible LLM endpoint.
#
# Design:
#   * Source: the npm package node-llama-cpp@3.22.1 ships the complete
#     llama.cpp source tree as a git bundle (package/llama/gitRelease.bundle).
#     The npm registry is the only network source we rely on, so we fetch it
#     with `npm pack` and clone the bundle locally -- no GitHub access needed.
#   * Build: CPU-only, target llama-server only, at -O1: about 4 minutes
#     on 2 cores (Release's -O3 takes about 7; the tests' model is tiny
#     and the server's speed does not matter to them, the CI's time does).
#     Self-contained binary: llama/ggml linked statically (BUILD_SHARED_LIBS=
#     OFF), no curl/OpenSSL/OpenMP/web UI, libstdc++/libgcc linked statically,
#     so it needs only glibc (libc, libm). GGML_NATIVE=OFF keeps it portable
#     to other x86-64 machines (AVX2/FMA/F16C baseline) sharing the cache.
#   * Cache: outside the repo, at
#       ${IOA_CACHE_DIR:-$HOME/.cache/ioa}/llama-server-3.22.1/llama-server
#     The build happens in a temp dir; the binary is copied next to its final
#     name and renamed into place (atomic on the same filesystem), so a
#     half-built binary is never visible and concurrent runs are harmless.
#   * Idempotent: if the cached binary exists and `--version` runs, nothing
#     is built. Concurrent invocations are serialised with flock on
#     $DEST_DIR/.lock. Missing build tools are installed with apt-get only
#     if absent.
#   * Output: build noise goes to build.log in the cache dir (its tail is shown
#     on failure). The last stdout line is always the binary path.
set -euo pipefail

VERSION=3.22.1
CACHE_ROOT="${IOA_CACHE_DIR:-$HOME/.cache/ioa}"
DEST_DIR="$CACHE_ROOT/llama-server-$VERSION"
BIN="$DEST_DIR/llama-server"
LOG="$DEST_DIR/build.log"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

log() { echo "build-llama-server: $*" >&2; }

if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
    echo "$BIN"
    exit 0
fi

mkdir -p "$DEST_DIR"
# Serialise concurrent callers (e.g. parallel test runs): the first one
# builds, the others wait on the lock and then reuse its binary.
exec 9>"$DEST_DIR/.lock"
if ! flock -n 9; then
    log "another build is in progress; waiting for it"
    flock 9
fi
if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
    echo "$BIN"
    exit 0
fi
: >"$LOG"

# --- build dependencies (only what is missing) ------------------------------
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++   >/dev/null 2>&1 || need+=(g++)
command -v make  >/dev/null 2>&1 || need+=(make)
command -v git   >/dev/null 2>&1 || need+=(git)
command -v npm   >/dev/null 2>&1 || need+=(npm)
command -v tar   >/dev/null 2>&1 || need+=(tar)
if ((${#need[@]})); then
    log "installing missing packages: ${need[*]}"
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    if ! $SUDO apt-get install -y --no-install-recommends "${need[@]}" >>"$LOG" 2>&1; then
        $SUDO apt-get update >>"$LOG" 2>&1
        $SUDO apt-get install -y --no-install-recommends "${need[@]}" >>"$LOG" 2>&1
    fi
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/llama-build.XXXXXX")"
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT

fail() {
    log "FAILED: $*  (log: $LOG)"
    tail -n 40 "$LOG" >&2 || true
    exit 1
}

run() { "$@" >>"$LOG" 2>&1 || fail "$*"; }

log "fetching node-llama-cpp@$VERSION from npm (log: $LOG)"
cd "$WORK"
run npm pack --silent "node-llama-cpp@$VERSION"
run tar -xzf "node-llama-cpp-$VERSION.tgz" package/llama/gitRelease.bundle
run git clone --quiet package/llama/gitRelease.bundle llama.cpp

log "configuring + building llama-server with $JOBS jobs (takes minutes)"
cd llama.cpp
run cmake -B build -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_OPENMP=OFF -DGGML_NATIVE=OFF \
    "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc"
run cmake --build build --target llama-server -j "$JOBS"

built="build/bin/llama-server"
[[ -x "$built" ]] || fail "binary not found at $built"
"$built" --version >>"$LOG" 2>&1 || fail "$built --version"

tmpbin="$(mktemp "$DEST_DIR/.llama-server.XXXXXX")"
cp "$built" "$tmpbin"
chmod 0755 "$tmpbin"
strip "$tmpbin" 2>/dev/null || true
mv -f "$tmpbin" "$BIN"
log "built $BIN"
echo "$BIN"
