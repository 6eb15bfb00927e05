#!/usr/bin/env bash
# scripts/prove-report.sh [--retry-failed] PROVE-ARGS... -- runs prove and,
# when something failed, ends its output with what failed and why.
#
# Why: prove prints a failed assertion's diagnostics ("#   Failed test",
# got/expected, the scenario's own diag) where it happens, and its summary
# at the end names only the file and the test's number.  A CI log that
# keeps only its tail then says "Failed test: 223" and nothing else, and
# Test::Nginx shuffles blocks, so the number does not even name a block.
# So the whole output is kept in a file and, on failure, every failed
# assertion's lines are printed again after prove's own summary.
#
# --retry-failed (make test-asan only): each file that failed is run once
# more, alone and verbose, and the pass then counts that second run.  The
# sanitizer pass exists to catch memory errors, which its report files
# show whatever the tests said (the Makefile fails on any report); its
# processes run several times slower, so a bounded wait in a scenario can
# run out there and nowhere else.  The first failure is never hidden: its
# diagnostics are printed, marked as failed once, and a file that fails
# twice fails the run.  make test's own passes never retry.
#
# Exit status: prove's (or the retry's).  The last line is prove's.

set -u

retry=0
if [ "${1:-}" = --retry-failed ]; then
    retry=1
    shift
fi

log=$(mktemp /tmp/prove-report.XXXXXX)
trap 'rm -f "$log" "$log".*' EXIT

prove "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && exit 0

# Every failed assertion: its "#   Failed test" line and the "#" lines
# that follow it (got, expected, the scenario's diag).
failures() {
    awk '/^#   Failed test/ { on = 1 }
         on && /^#/ { print; next }
         { on = 0 }' "$1"
}

# The files prove's summary names as failed ("t/x.t  (Wstat: ...").
failed_files() {
    awk '/^Test Summary Report/ { on = 1; next }
         on && /^t\/[^ ]+/ { print $1 }' "$1" | sort -u
}

echo
echo "==== what failed (from the output above) ===="
failures "$log" | head -n 400
[ "$retry" -eq 1 ] || { tail -n 3 "$log"; exit "$rc"; }

files=$(failed_files "$log")
[ -n "$files" ] || exit "$rc"      # prove itself failed: nothing to retry

# prove's options, without the directories and files it was given: the
# failed files are passed alone.
opts=()
for a in "$@"; do
    case $a in -r) ;; -*) opts+=("$a") ;; esac
done

echo
echo "==== failed once, run again alone:" $files "===="
rc=0
for f in $files; do
    prove "${opts[@]}" "$f" >"$log.retry" 2>&1
    frc=$?
    if [ "$frc" -eq 0 ]; then
        echo "$f: passed when run again (failed once, above):"
        tail -n 2 "$log.retry"
    else
        cat "$log.retry"
        echo "==== $f failed twice; its second run's failures ===="
        failures "$log.retry" | head -n 400
        rc=$frc
    fi
done
[ "$rc" -eq 0 ] && echo "Result: PASS (after running again what failed once)"
exit "$rc"
