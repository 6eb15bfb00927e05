#!/usr/bin/env bash
# make docker: the four images of docker/Dockerfile (redis, hub, worker,
# agent) as localhost/ioa-<name>:latest, with podman (or docker).
#
# Every image starts FROM debian:bookworm.  Where the engine has no such
# image and no registry can be reached (the project's machines), one is
# made from Debian's own mirror, the one apt uses here: debootstrap
# --variant=minbase bookworm into build/docker/rootfs, then imported as
# docker.io/library/debian:bookworm.  About 45 s, once.
#
# podman builds in docker format (--format docker), so each image keeps
# its HEALTHCHECK (OCI's format has none).  The labels get the version
# from debian/changelog, the source from the checkout's git remote, the
# commit from git; each step's time is printed.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/scripts/docker-env.sh"

BASE=docker.io/library/debian:bookworm
t0=$(date +%s)

if ! $ENGINE image inspect "$BASE" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || { echo "docker-build: no $BASE image and no debootstrap to make one (apt-get install debootstrap)" >&2; exit 1; }
    mirror=$(awk '/^URIs:/ { print $2; exit } /^deb / { print $2; exit }' \
             /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    echo "docker-build: making $BASE with debootstrap from $mirror"
    rm -rf "$WORK/rootfs"
    debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" \
        > "$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log"; exit 1; }
    security=${mirror%/debian}/debian-security
    {
        echo "deb $mirror bookworm main"
        echo "deb $mirror bookworm-updates main"
        echo "deb $security bookworm-security main"
    } > "$WORK/rootfs/etc/apt/sources.list"
    rm -rf "$WORK"/rootfs/var/cache/apt/archives/*.deb "$WORK"/rootfs/var/lib/apt/lists/*
    # debootstrap mounts /proc inside the tree and, when its unmount at
    # exit fails, leaves it mounted (seen on a fresh machine): unmount
    # whatever is mounted under the tree, deepest first, and let tar stay
    # on the tree's own filesystem, so no /proc goes into the image
    findmnt -rno TARGET | { grep "^$WORK/rootfs/" || true; } | sort -r \
        | while read -r m; do umount -l "$m"; done
    tar --one-file-system -C "$WORK/rootfs" -c . \
        | $ENGINE import - "$BASE" >/dev/null
    rm -rf "$WORK/rootfs"
    echo "docker-build: $BASE made in $(( $(date +%s) - t0 )) s"
fi

version=$(sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' "$REPO/debian/changelog")
source=$(git -C "$REPO" remote get-url origin 2>/dev/null || echo unknown)
revision=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
format=()
[ "$ENGINE" = podman ] && format=(--format docker)

for image in $IOA_IMAGES; do
    t=$(date +%s)
    $ENGINE build "${format[@]}" -f "$REPO/docker/Dockerfile" --target "$image" \
        --build-arg IOA_VERSION="$version" --build-arg IOA_SOURCE="$source" \
        --build-arg IOA_REVISION="$revision" \
        -t "$(image_name "$image")" "$REPO" > "$WORK/build-$image.log" 2>&1 \
        || { tail -30 "$WORK/build-$image.log"; echo "docker-build: $image failed (log: $WORK/build-$image.log)" >&2; exit 1; }
    echo "docker-build: $(image_name "$image") in $(( $(date +%s) - t )) s"
done

echo "docker-build: done in $(( $(date +%s) - t0 )) s"
