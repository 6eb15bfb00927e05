#!/usr/bin/env bash
# scripts/asan-nginx.sh -- nginx 1.22.1 (Debian bookworm's version, from
# Debian's source package) built with AddressSanitizer and UBSan and the ioa
# module compiled in, for `make test-asan`:
#
#   bash scripts/asan-nginx.sh [OUT]      (OUT: build/asan)
#   bash scripts/asan-nginx.sh --fetch-only   only fetch and unpack the source
#   -> OUT/sbin/nginx
#
# Why a build of its own: Debian's /usr/sbin/nginx is not instrumented, and
# a sanitizer must see nginx's pools as well as our code, so nginx is built
# with NGX_DEBUG_PALLOC (every pool allocation a malloc ASan can watch) and
# the module is linked in statically (config supports --add-module).  The
# features the tests use are the ones Debian enables for them: TLS, HTTP/2,
# auth_request, stub_status, sub_filter, threads, PCRE2 JIT.  The source is
# Debian's orig tarball, fetched with apt-get source (deb-src entries are
# added when missing).
# Nothing is written outside OUT but the deb-src entry.

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FETCH_ONLY=
if [[ ${1:-} == --fetch-only ]]; then
    FETCH_ONLY=1      # scripts/fuzz.sh only wants the source
    shift
fi
OUT="${1:-$REPO/build/asan}"
VERSION=1.22.1
# the newest revision's source may be gone from the mirror; every
# 1.22.1-9+deb12uN has the same orig tarball
DEBVER=1.22.1-9+deb12u9
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)

log() { echo "asan-nginx: $*" >&2; }

mkdir -p "$OUT/src"

if [[ ! -d $OUT/src/nginx-$VERSION ]]; then
    if [[ ! -e $OUT/src/nginx_$VERSION.orig.tar.gz ]]; then
        if ! grep -rqsE '^deb-src .* bookworm main' /etc/apt/sources.list /etc/apt/sources.list.d/; then
            log "adding deb-src entries for bookworm"
            printf '%s\n' \
                'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main' \
                'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main' \
                | $SUDO tee /etc/apt/sources.list.d/ioa-debsrc.list >/dev/null
            $SUDO apt-get update -qq
        fi
        log "fetching Debian's nginx source ($DEBVER)"
        (cd "$OUT/src" && apt-get source --download-only "nginx=$DEBVER" >/dev/null 2>&1) \
            || (cd "$OUT/src" && apt-get source --download-only nginx >/dev/null)
    fi
    tar -xzf "$OUT/src/nginx_$VERSION.orig.tar.gz" -C "$OUT/src"
fi

[[ -n $FETCH_ONLY ]] && exit 0

SAN="-fsanitize=address,undefined -fno-omit-frame-pointer"

log "configuring"
cd "$OUT/src/nginx-$VERSION"
./configure --prefix="$OUT" --builddir="$OUT/obj" \
    --with-debug --with-threads --with-pcre-jit \
    --with-http_ssl_module --with-http_v2_module \
    --with-http_auth_request_module --with-http_realip_module \
    --with-http_stub_status_module --with-http_sub_module \
    --with-cc-opt="-O1 -g $SAN -DNGX_DEBUG_PALLOC=1" \
    --with-ld-opt="$SAN" \
    --add-module="$REPO" >"$OUT/configure.log" 2>&1 \
    || { cat "$OUT/configure.log" >&2; exit 1; }

log "building"
make -s -j"$(nproc)" -f "$OUT/obj/Makefile" >"$OUT/make.log" 2>&1 \
    || { tail -40 "$OUT/make.log" >&2; exit 1; }

mkdir -p "$OUT/sbin"
cp "$OUT/obj/nginx" "$OUT/sbin/nginx.tmp"
mv -f "$OUT/sbin/nginx.tmp" "$OUT/sbin/nginx"
log "built $OUT/sbin/nginx"
