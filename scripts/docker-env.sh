# scripts/docker-env.sh -- sourced by docker-build.sh and docker-test.sh:
# which container engine, and the settings it needs on this host.
#
#   ENGINE   podman if it is installed, else docker (IOA_ENGINE overrides)
#   WORK     build/docker: the base image's root file system, the
#            containers.conf below, logs
#
# podman on the project's machines (a sandbox without systemd, with hard
# limits of 20,000 files and fewer processes than podman's defaults) needs
# two settings, in a containers.conf of our own (CONTAINERS_CONF, so the
# host's configuration is left alone): runc instead of crun ("cgroups in
# hybrid mode not supported"), and default ulimits within the shell's hard
# limits (podman's would fail: "setrlimit ... Operation not permitted"),
# nproc also within the kernel's pid_max.
# On a host where the defaults fit, the file says the same as the defaults.

REPO=${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
WORK=$REPO/build/docker
mkdir -p "$WORK"

ENGINE=${IOA_ENGINE:-$(command -v podman >/dev/null 2>&1 && echo podman || echo docker)}

if [ "$ENGINE" = podman ]; then
    nofile=$(ulimit -Hn)
    nproc=$(ulimit -Hu)
    [ "$nofile" = unlimited ] && nofile=1048576
    [ "$nproc" = unlimited ] && nproc=4194304
    [ "$nofile" -gt 1048576 ] && nofile=1048576
    # runc is refused an nproc above the kernel's pid_max here (measured:
    # 32768 taken, 40000 refused, with a hard limit of 96364)
    pidmax=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 4194304)
    [ "$nproc" -gt "$pidmax" ] && nproc=$pidmax
    {
        echo "# made by scripts/docker-env.sh for this host; see there"
        echo "[containers]"
        echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
        if command -v runc >/dev/null 2>&1; then
            echo "[engine]"
            echo "runtime = \"runc\""
        fi
    } > "$WORK/containers.conf"
    export CONTAINERS_CONF=$WORK/containers.conf
fi

# the images' names, as compose.yaml names them
IOA_IMAGES="redis hub worker agent"
image_name() { echo "localhost/ioa-$1:latest"; }
