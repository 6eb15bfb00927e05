#!/usr/bin/env bash
# scripts/deps.sh -- the Debian packages a make target needs, and the
# preflight that checks they are really there.
#
#   scripts/deps.sh install SET...   install what is missing, then check
#   scripts/deps.sh check SET...     the preflight alone
#   scripts/deps.sh packages SET...  the packages, one per line, sorted
#
# The sets and what is in them are scripts/deps.list (one line per package
# with the programs and files a target uses from it).  Every target of the
# Makefile starts with `deps.sh install` of its own set, so a target
# installs what it calls and nothing else: `make run` brings no browser.
#
# Why a preflight after apt: a package can be installed and still not give
# what we call (podman is there, but its network stack runs iptables, which
# --no-install-recommends does not bring; a node from elsewhere shadows
# Debian's), and what then fails is a build or a test ten minutes later,
# with an error that names neither the program nor its package.  The
# preflight fails at once, before anything is built, with one line per
# missing thing: "missing: iptables (program), from Debian package
# iptables".
#
# A package counts as present when every check of its line passes, so a
# program installed some other way is used as it is; one with no check is
# asked of dpkg.  Install runs apt-get update only when something is
# missing, so a second run costs a few `command -v` and no network.

set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
LIST=${IOA_DEPS_LIST:-$HERE/deps.list}

usage() {
    echo "usage: deps.sh install|check|packages SET..." >&2
    exit 2
}

[ $# -ge 2 ] || usage
cmd=$1
shift

# Lines of the list for the sets asked for, includes followed, each
# "PACKAGE CHECK..." once, in the list's order.
declare -A seen_set=() seen_pkg=()
lines=()
add_set() {
    local set=$1 s pkg rest found=0
    [ -n "${seen_set[$set]:-}" ] && return 0
    seen_set[$set]=1
    while read -r s pkg rest; do
        [ "$s" = "$set" ] || continue
        found=1
        if [ "${pkg#@}" != "$pkg" ]; then
            add_set "${pkg#@}"
        elif [ -z "${seen_pkg[$pkg]:-}" ]; then
            seen_pkg[$pkg]=1
            lines+=("$pkg $rest")
        fi
    done < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$LIST")
    [ "$found" = 1 ] || { echo "deps.sh: no set '$set' in $LIST" >&2; exit 2; }
}
SETS="$*"
for set in "$@"; do add_set "$set"; done

# check_one CHECK: true when what it names is there
check_one() {
    case $1 in
        perl:*) perl -M"${1#perl:}" -e 1 >/dev/null 2>&1 ;;
        py:*)   [ -x /usr/bin/python3 ] \
                    && /usr/bin/python3 -c "import ${1#py:}" >/dev/null 2>&1 ;;
        /*)     compgen -G "$1" >/dev/null ;;   # a path, or a glob
        *)      command -v "$1" >/dev/null 2>&1 ;;
    esac
}

what() {
    case $1 in
        perl:*) echo "${1#perl:} (Perl module)" ;;
        py:*)   echo "${1#py:} (module of /usr/bin/python3)" ;;
        /*)     echo "$1 (file)" ;;
        *)      echo "$1 (program)" ;;
    esac
}

dpkg_installed() {
    dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# present PACKAGE CHECK...: its checks pass (or, with none, dpkg has it)
present() {
    local pkg=$1 c
    shift
    [ $# -gt 0 ] || { dpkg_installed "$pkg"; return; }
    for c in "$@"; do check_one "$c" || return 1; done
}

preflight() {
    local line bad=0 c
    for line in "${lines[@]}"; do
        set -- $line
        local pkg=$1
        shift
        for c in "$@"; do
            if ! check_one "$c"; then
                echo "missing: $(what "$c"), from Debian package $pkg" >&2
                bad=1
            fi
        done
        if [ $# -eq 0 ] && ! dpkg_installed "$pkg"; then
            echo "missing: Debian package $pkg" >&2
            bad=1
        fi
    done
    if [ "$bad" = 1 ]; then
        echo "deps.sh: what '$SETS' needs is not all there: apt-get install" \
             "the packages above (or scripts/deps.sh install $SETS)" >&2
        return 1
    fi
}

case $cmd in
packages)
    for line in "${lines[@]}"; do echo "${line%% *}"; done | sort -u
    ;;
check)
    preflight
    ;;
install)
    missing=()
    for line in "${lines[@]}"; do
        present $line || missing+=("${line%% *}")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing: ${missing[*]}"
        SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
            --no-install-recommends "${missing[@]}"
    fi
    preflight
    ;;
*)
    usage
    ;;
esac
