#!/usr/bin/env bash
# scripts/phases.sh -- the phases of make test, timed, and what each ended
# with.
#
#   phases.sh --start             a new run: forget the last one's phases
#   phases.sh NAME COMMAND...     run COMMAND as phase NAME
#   phases.sh --must NAME COMMAND...   the same, but a failure ends the
#                                 run there (the build: nothing after it
#                                 could run)
#   phases.sh --bg NAME COMMAND...     start phase NAME in the background,
#                                 its output into build/phases.NAME.log
#   phases.sh --wait NAME         wait for it, print its output, record it
#   phases.sh --summary           each phase's time and result; exit 1 if
#                                 any failed
#
# A phase that fails is recorded and the next one still runs (exit 0), so
# that one make test says everything that is wrong, not only the first
# thing: a failed suite does not hide a broken container build.  The
# summary, last, is what fails the target.  Phases are kept in
# build/phases (one "NAME SECONDS RC" line each).
#
# A background phase is for work that neither needs the machine to itself
# nor gets in the way of what runs beside it: make test builds the
# container images and tests them (mostly downloads and waits) while the
# build phase compiles, so the containers cost no time of their own.

set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
STATE=$REPO/build/phases

record() {   # record NAME SECONDS RC
    echo "==== phase $1: $([ "$3" = 0 ] && echo ok || echo "FAILED (exit $3)") in $2 s"
    echo "$1 $2 $3" >> "$STATE"
}

kill_background() {
    local f
    for f in "$STATE".*.pid; do
        [ -e "$f" ] || continue
        kill -- -"$(cat "$f")" 2>/dev/null || kill "$(cat "$f")" 2>/dev/null
        rm -f "$f"
    done
}

case ${1:-} in
--start)
    mkdir -p "$REPO/build"
    kill_background
    rm -f "$STATE".*
    : > "$STATE"
    date +%s > "$STATE.t0"
    ;;
--bg)
    name=$2
    shift 2
    echo "==== phase $name (in the background): $*"
    rm -f "$STATE.$name.rc" "$STATE.$name.t1"
    date +%s > "$STATE.$name.t0"
    # its own process group (set -m), so that a failed build can stop it
    set -m
    ( "$@" > "$STATE.$name.log" 2>&1; rc=$?; date +%s > "$STATE.$name.t1"
      echo $rc > "$STATE.$name.rc" ) < /dev/null &
    echo $! > "$STATE.$name.pid"
    ;;
--wait)
    name=$2
    [ -e "$STATE.$name.t0" ] || { echo "phases: no phase $name started" >&2; exit 1; }
    while [ ! -s "$STATE.$name.rc" ]; do
        if ! kill -0 "$(cat "$STATE.$name.pid" 2>/dev/null)" 2>/dev/null \
           && [ ! -s "$STATE.$name.rc" ]; then
            sleep 1
            [ -s "$STATE.$name.rc" ] || echo 125 > "$STATE.$name.rc"
        fi
        sleep 1
    done
    echo "==== phase $name: its output"
    cat "$STATE.$name.log"
    rm -f "$STATE.$name.pid"
    # its own time, not the time until it was waited for
    end=$(cat "$STATE.$name.t1" 2>/dev/null || date +%s)
    record "$name" $(( end - $(cat "$STATE.$name.t0") )) "$(cat "$STATE.$name.rc")"
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
    # what the suite said failed (scripts/suite.pl), here at the end too
    if grep -q '^suite [0-9]* [1-9]' "$STATE" \
       && [ -s "$REPO/build/suite/failed.txt" ]; then
        echo "  the suite's failures:"
        head -n 40 "$REPO/build/suite/failed.txt" | sed 's/^/    /'
    fi
    [ "$bad" = 0 ] && echo "make test: PASS" || echo "make test: FAIL"
    exit "$bad"
    ;;
"")
    echo "usage: phases.sh --start | [--must] NAME COMMAND... | --bg NAME COMMAND... | --wait NAME | --summary" >&2
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
    record "$name" $(( $(date +%s) - t0 )) "$rc"
    if [ "$must" = 1 ] && [ "$rc" != 0 ]; then
        kill_background
        "$0" --summary
        exit "$rc"
    fi
    ;;
esac
exit 0
