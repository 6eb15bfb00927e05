#!/usr/bin/env bash
# scripts/phases.sh -- the phases of make test, timed, and what each ended
# with.
#
#   phases.sh --start             a new run: forget the last one's phases
#   phases.sh NAME COMMAND...     run COMMAND as phase NAME
#   phases.sh --must NAME COMMAND...   the same, but a failure ends the
#                                 run there (the build: nothing after it
#                                 could run)
#   phases.sh --summary           each phase's time and result; exit 1 if
#                                 any failed
#
# A phase that fails is recorded and the next one still runs (exit 0), so
# that one make test says everything that is wrong, not only the first
# thing: a failed suite does not hide a broken container build.  The
# summary, last, is what fails the target.  Phases are kept in
# build/phases (one "NAME SECONDS RC" line each).

set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
STATE=$REPO/build/phases

case ${1:-} in
--start)
    mkdir -p "$REPO/build"
    : > "$STATE"
    date +%s > "$STATE.t0"
    ;;
--summary)
    [ -s "$STATE" ] || { echo "phases: none ran"; exit 1; }
    echo
    echo "make test, phase by phase:"
    bad=0
    while read -r name secs rc; do
        printf '  %-12s %5d s  %s\n' "$name" "$secs" \
            "$([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)")"
        [ "$rc" = 0 ] || bad=1
    done < "$STATE"
    if [ -s "$STATE.t0" ]; then
        printf '  %-12s %5d s\n' total $(( $(date +%s) - $(cat "$STATE.t0") ))
    fi
    [ "$bad" = 0 ] && echo "make test: PASS" || echo "make test: FAIL"
    exit "$bad"
    ;;
"")
    echo "usage: phases.sh --start | NAME COMMAND... | --summary" >&2
    exit 2
    ;;
*)
    must=0
    if [ "$1" = --must ]; then must=1; shift; fi
    name=$1
    shift
    echo "==== phase $name: $*"
    t0=$(date +%s)
    "$@"
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    echo "==== phase $name: $([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)") in $secs s"
    echo "$name $secs $rc" >> "$STATE"
    if [ "$must" = 1 ] && [ "$rc" != 0 ]; then
        "$0" --summary
        exit "$rc"
    fi
    ;;
esac
exit 0
