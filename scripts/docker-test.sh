#!/usr/bin/env bash
# make docker-test: the images and docker/compose.yaml, tested as a user
# deploying ioa with containers would use them (after make docker).
#
#   - each image: runs as ioa, has a HEALTHCHECK and the OCI labels, and
#     the hub's module is the one built inside (not a checkout's);
#   - configuration at start: a hub without a key, or with an IOA_AUTH it
#     does not know, refuses with one line and exit 78; an open-mode hub
#     whose Redis does not resolve yet starts (nginx -t passes, health 503)
#     and connects once a Redis by that name appears; a worker without
#     IOA_REDIS refuses;
#   - compose.yaml is valid Compose Specification (docker-compose config);
#     `up` brings the whole network: every container healthy (each
#     image's own check), nothing running as root, agents of one hub seen
#     on the other, a goal through each hub answered with the right
#     conclusion by IoA's blocking /launch_goal?wait=1;
#   - a hub whose nginx exits is brought back by its restart policy;
#   - Redis restarted while envelopes are posted through both hubs: every
#     envelope a hub accepted (200) is in the room's log afterwards, in
#     order, and a goal after it concludes;
#   - the same compose.yaml brought up by Docker's own docker-compose
#     (against podman's Docker API), with its health-based start order:
#     a goal through it too;
#   - everything is torn down by id (containers, volumes, network), and
#     checked gone.
#
# The compose project is ioatest<pid>, on free host ports, so a network a
# user runs (project "ioa") is not touched.  Output: ok / not ok lines,
# each phase's time, and "N passed, N failed".
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/scripts/docker-env.sh"

COMPOSE_FILE=$REPO/docker/compose.yaml
PROJECT=ioatest$$
PY=/usr/bin/python3
pass=0
fail=0
t0=$(date +%s)
tphase=$t0

if [ "$ENGINE" = podman ]; then
    COMPOSE=(podman-compose -p "$PROJECT" -f "$COMPOSE_FILE")
    ctr() { echo "${PROJECT}_$1_1"; }
else
    COMPOSE=(docker compose -p "$PROJECT" -f "$COMPOSE_FILE")
    ctr() { echo "${PROJECT}-$1-1"; }
fi

ok()  { pass=$((pass + 1)); echo "ok $((pass + fail)) - $1"; }
nok() { fail=$((fail + 1)); echo "not ok $((pass + fail)) - $1"; [ -z "${2:-}" ] || echo "$2" | sed 's/^/#   /'; }
check() {   # check DESC COMMAND...: ok when COMMAND succeeds
    local desc=$1; shift
    local out
    if out=$("$@" 2>&1); then ok "$desc"; else nok "$desc" "$out"; fi
}
phase() {
    local now
    now=$(date +%s)
    echo "# $1: $((now - tphase)) s"
    tphase=$now
}

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# the containers, volumes and networks of our projects (podman-compose's
# and Docker Compose's), by id
PROJECTS="$PROJECT ${PROJECT}dc"
ours_containers() {
    for p in $PROJECTS; do $ENGINE ps -a -q --filter "label=com.docker.compose.project=$p"; done
    $ENGINE ps -a -q --filter "name=^${PROJECT}-solo-"
}
ours_volumes() {
    for p in $PROJECTS; do $ENGINE volume ls -q --filter "label=com.docker.compose.project=$p"; done
}
ours_networks() {
    for p in $PROJECTS; do $ENGINE network ls -q --filter "label=com.docker.compose.project=$p"; done
    $ENGINE network ls -q --filter "name=^${PROJECT}-solo$"
}

service=
ticker=
teardown() {
    [ -z "$ticker" ] || kill "$ticker" 2>/dev/null
    [ -n "${DC:-}" ] && "${DC[@]}" down -v >"$WORK/dc-down.log" 2>&1
    [ -z "$service" ] || kill "$service" 2>/dev/null
    "${COMPOSE[@]}" down -v >"$WORK/down.log" 2>&1 || true
    local ids
    ids=$(ours_containers | sort -u)
    [ -z "$ids" ] || $ENGINE rm -f -v $ids >/dev/null 2>&1
    ids=$(ours_volumes | sort -u)
    [ -z "$ids" ] || $ENGINE volume rm -f $ids >/dev/null 2>&1
    ids=$(ours_networks | sort -u)
    [ -z "$ids" ] || $ENGINE network rm -f $ids >/dev/null 2>&1
}
trap teardown EXIT

wait_for() {   # wait_for SECONDS COMMAND...
    local until=$(( $(date +%s) + $1 )); shift
    while [ "$(date +%s)" -lt "$until" ]; do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    return 1
}

http_code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
healthy_at() { [ "$(http_code "http://127.0.0.1:$1/health_check")" = 200 ]; }

# ------------------------------------------------------------ the images

for image in $IOA_IMAGES; do
    name=$(image_name "$image")
    user=$($ENGINE image inspect "$name" --format '{{.Config.User}}' 2>&1)
    [ "$user" = ioa ] && ok "$image image runs as ioa" || nok "$image image runs as ioa" "user: $user"
    hc=$($ENGINE image inspect "$name" --format '{{.Config.Healthcheck}}' 2>&1)
    case $hc in *CMD*) ok "$image image has a HEALTHCHECK" ;; *) nok "$image image has a HEALTHCHECK" "$hc" ;; esac
    labels=$($ENGINE image inspect "$name" --format '{{json .Config.Labels}}' 2>&1)
    missing=
    for l in source version licenses revision title; do
        echo "$labels" | grep -q "\"org.opencontainers.image.$l\":\"[^\"]" || missing="$missing $l"
    done
    [ -z "$missing" ] && ok "$image image has the OCI labels" || nok "$image image has the OCI labels" "missing:$missing in $labels"
done

inside=$($ENGINE run --rm --entrypoint sha256sum "$(image_name hub)" /usr/lib/nginx/modules/ngx_http_ioa_module.so 2>/dev/null | cut -d' ' -f1)
if [ -e "$REPO/build/ngx_http_ioa_module.so" ]; then
    outside=$(sha256sum "$REPO/build/ngx_http_ioa_module.so" | cut -d' ' -f1)
    [ -n "$inside" ] && [ "$inside" != "$outside" ] \
        && ok "the hub's module was built in the image, not copied from the checkout's build/" \
        || nok "the hub's module was built in the image, not copied from the checkout's build/" "image $inside, checkout $outside"
fi
phase "images"

# ------------------------------------------- configuration at start

# one line of our own on stderr (podman may add its own notes: not ours)
refusal() {   # refusal IMAGE PATTERN [ENV...]
    local image=$1 pattern=$2; shift 2
    local args=() out rc lines
    for e in "$@"; do args+=(-e "$e"); done
    out=$($ENGINE run --rm --name "${PROJECT}-solo-refuse" "${args[@]}" ${RUN_ARGS[@]+"${RUN_ARGS[@]}"} "$(image_name "$image")" 2>&1)
    rc=$?
    lines=$(echo "$out" | grep -c '^ioa-')
    [ "$rc" = 78 ] && [ "$lines" = 1 ] && echo "$out" | grep -q "^ioa-.*$pattern" \
        || { echo "exit $rc, $lines line(s) of ours: $out"; return 1; }
}
check "a hub without a key refuses to start, in one line, exit 78" \
    refusal hub "no JWT key at /etc/ioa/jwt.key: mount one .* or set IOA_AUTH=off"
# a key the image's user cannot read (a root-owned 0600 file, mounted)
"$REPO/scripts/ioa-token" new-key "$WORK/root-only.key.$$" >/dev/null
refusal_mount() {
    local k=$1 rc; shift
    RUN_ARGS=(-v "$k:/etc/ioa/jwt.key:ro")
    refusal "$@"; rc=$?
    RUN_ARGS=()
    return $rc
}
check "a hub whose key its user cannot read refuses, saying so" \
    refusal_mount "$WORK/root-only.key.$$" hub "the JWT key /etc/ioa/jwt.key is not readable by uid 10001"
rm -f "$WORK/root-only.key.$$"
check "a hub with IOA_AUTH=maybe refuses, naming the value" \
    refusal hub 'IOA_AUTH: "maybe" is not jwt or off' IOA_AUTH=maybe
check "a hub with IOA_REDIS='a;b' refuses (nothing is pasted into nginx.conf unchecked)" \
    refusal hub 'IOA_REDIS: "a;b" is not host:port' 'IOA_REDIS=a;b' IOA_AUTH=off
check "a worker without IOA_REDIS refuses" refusal worker "IOA_REDIS is empty" IOA_REDIS=

$ENGINE network create "${PROJECT}-solo" >/dev/null
$ENGINE run -d --name "${PROJECT}-solo-hub" --network "${PROJECT}-solo" \
    -e IOA_AUTH=off -e IOA_REDIS=later-redis:6379 "$(image_name hub)" >/dev/null 2>&1
solo_code() { $ENGINE exec "${PROJECT}-solo-hub" curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:7788/health_check; }
solo_is() { [ "$(solo_code)" = "$1" ]; }
check "an open-mode hub whose Redis does not resolve yet is up (health 503)" wait_for 20 solo_is 503
check "and its configuration passes nginx -t" \
    $ENGINE exec "${PROJECT}-solo-hub" nginx -t -q -e stderr -p /run/ioa/ -c /run/ioa/nginx.conf
out=$($ENGINE logs "${PROJECT}-solo-hub" 2>&1)
echo "$out" | grep -q 'cannot look up "later-redis"' \
    && echo "$out" | grep -q "^ioa-hub: IOA_AUTH=off: IoA's open mode" \
    && ok "its log says which name is missing, and that it runs in open mode" \
    || nok "its log says which name is missing, and that it runs in open mode" "$out"
$ENGINE run -d --name "${PROJECT}-solo-redis" --network "${PROJECT}-solo" \
    --network-alias later-redis "$(image_name redis)" >/dev/null 2>&1
check "once a Redis named so appears, the hub connects by itself (health 200)" \
    wait_for 30 solo_is 200
$ENGINE rm -f -v "${PROJECT}-solo-hub" "${PROJECT}-solo-redis" >/dev/null 2>&1
$ENGINE network rm "${PROJECT}-solo" >/dev/null 2>&1
phase "configuration at start"

# --------------------------------------------------- the whole network

if command -v docker-compose >/dev/null 2>&1; then
    check "compose.yaml is valid for Docker Compose too (docker-compose config)" \
        docker-compose -f "$COMPOSE_FILE" config -q
fi

P1=$(free_port)
P2=$(free_port)
export IOA_HUB1_PORT=$P1 IOA_HUB2_PORT=$P2
if "${COMPOSE[@]}" up -d >"$WORK/up.log" 2>&1; then
    ok "compose up (project $PROJECT, hubs on $P1 and $P2)"
else
    nok "compose up" "$(tail -20 "$WORK/up.log")"
fi
check "hub1 answers /health_check 200" wait_for 60 healthy_at "$P1"
check "hub2 answers /health_check 200" wait_for 60 healthy_at "$P2"

TOKEN=$($ENGINE exec "$(ctr hub1)" ioa-token sign --key /keys/jwt.key --sub tester --scope "launch admin" 2>/dev/null)
[ -n "$TOKEN" ] && ok "a token from the documented command (exec hub1 ioa-token sign)" || nok "a token from exec hub1 ioa-token sign"
AUTH=(-H "Authorization: Bearer $TOKEN")
[ "$(http_code "http://127.0.0.1:$P1/list_all_agents")" = 401 ] \
    && ok "without it the hub answers 401 (ioa_auth jwt with compose's key)" \
    || nok "without it the hub answers 401"

online() {   # online PORT NAME...: every NAME registered and online there
    local port=$1; shift
    curl -s "${AUTH[@]}" "http://127.0.0.1:$port/list_all_agents" | $PY -c '
import json, sys
agents = {a["name"]: a for a in json.load(sys.stdin)}
sys.exit(0 if all(agents.get(n, {}).get("online") for n in sys.argv[1:]) else 1)' "$@"
}
check "Counter and Shouter (connected to hub1) are seen online on hub2" wait_for 60 online "$P2" Counter Shouter
check "Reverser (connected to hub2) is seen online on hub1" wait_for 60 online "$P1" Reverser

healthy() { $ENGINE healthcheck run "$(ctr "$1")" >/dev/null 2>&1; }
for s in redis hub1 hub2 worker1 worker2 counter shouter reverser; do
    check "$s is healthy by its image's own check" wait_for 60 healthy "$s"
done

rootless=
for s in redis hub1 hub2 worker1 worker2 counter shouter reverser; do
    users=$($ENGINE top "$(ctr "$s")" user 2>/dev/null | tail -n +2 | sort -u | tr '\n' ' ')
    [ "$users" = "ioa " ] || rootless="$rootless $s:[$users]"
done
[ -z "$rootless" ] && ok "no process of the network runs as root" || nok "no process of the network runs as root" "$rootless"
phase "compose up"

goal() {   # goal PORT SENTENCE: the blocking launch's conclusion is right
    local port=$1 s=$2 shout reverse
    shout=$(echo "$s" | tr a-z A-Z)
    reverse=$(echo "$s" | tr ' ' '\n' | tac | tr '\n' ' ' | sed 's/ $//')
    words=$(echo "$s" | wc -w)
    body=$($PY -c 'import json,sys; s=sys.argv[1]; print(json.dumps({"goal": f"Count the words in \"{s}\". Shout \"{s}\" in upper case. Reverse the words of \"{s}\"."}))' "$s")
    out=$(curl -s --max-time 120 "${AUTH[@]}" -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$port/launch_goal?wait=1")
    echo "$out" | $PY -c '
import json, sys
doc = json.load(sys.stdin)
ok = isinstance(doc, list) and len(doc) == 2
c = doc[1] if ok else ""
need = ["3 of 3 parts done", "has %s words" % sys.argv[1], sys.argv[2], sys.argv[3]]
missing = [n for n in need if n not in c]
if not ok or missing:
    print("missing %r in %r" % (missing, doc))
    sys.exit(1)' "$words" "$shout" "$reverse" || { echo "$out"; return 1; }
}
check "a goal through hub1 (/launch_goal?wait=1): the right conclusion" goal "$P1" "agents that cooperate solve harder problems"
check "a goal through hub2 (/launch_goal?wait=1): the right conclusion" goal "$P2" "many hubs serve one network of agents"
phase "goals"

# ----------------------------------------------------- restart policy

before=$($ENGINE inspect "$(ctr hub1)" --format '{{.RestartCount}}')
$ENGINE exec "$(ctr hub1)" sh -c 'kill -TERM 1' >/dev/null 2>&1
restarted() { [ "$($ENGINE inspect "$(ctr hub1)" --format '{{.RestartCount}}')" -gt "$before" ]; }
check "hub1's nginx exits: its restart policy brings it back" wait_for 30 restarted
check "and it is healthy again" wait_for 60 healthy_at "$P1"
phase "restart policy"

# ------------------------------------------ Redis restarted under traffic

for a in Ann Ben; do
    t=$($ENGINE exec "$(ctr hub1)" ioa-token sign --key /keys/jwt.key --sub "$a" --scope agent 2>/dev/null)
    eval "TOKEN_$a=\$t"
    curl -s -o /dev/null -H "Authorization: Bearer $t" -H 'Content-Type: application/json' \
        -d "{\"name\":\"$a\",\"type\":\"Human Assistant\",\"desc\":\"agent $a\"}" "http://127.0.0.1:$P1/register"
done
CID=$(curl -s -H "Authorization: Bearer $TOKEN_Ann" -H 'Content-Type: application/json' \
    -d '{"sender":"Ann","agent_names":["Ben"]}' "http://127.0.0.1:$P1/teamup" \
    | $PY -c 'import json,sys; print(json.load(sys.stdin)["comm_id"])' 2>/dev/null)
[ -n "$CID" ] && ok "a room of two agents (comm_id $CID)" || nok "a room of two agents"

# posts through both hubs, one every 20 ms, for POST_SECONDS; the ids the
# hubs accepted (200), in order, into a file; every other answer counted
cat > "$WORK/poster.py" <<'EOF'
import json, sys, time, urllib.request, urllib.error
ports, cid, token, seconds, out = sys.argv[1].split(","), sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
ids, refused, n, end = [], {}, 0, time.time() + seconds
while time.time() < end:
    port = ports[n % len(ports)]
    body = json.dumps({"comm_id": cid, "content": "envelope %d" % n}).encode()
    req = urllib.request.Request("http://127.0.0.1:%s/agents/Ann/messages" % port, data=body,
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            ids.append(json.load(r)["id"])
    except urllib.error.HTTPError as e:
        refused[e.code] = refused.get(e.code, 0) + 1
    except OSError as e:
        refused[type(e).__name__] = refused.get(type(e).__name__, 0) + 1
    n += 1
    time.sleep(0.02)
json.dump({"ids": ids, "refused": refused, "sent": n}, open(out, "w"))
EOF
$PY "$WORK/poster.py" "$P1,$P2" "$CID" "$TOKEN_Ann" 8 "$WORK/posted.json" &
poster=$!
sleep 2
runid_before=$($ENGINE exec "$(ctr redis)" redis-cli INFO server 2>/dev/null | grep '^run_id:' | tr -d '\r')
$ENGINE restart "$(ctr redis)" >/dev/null 2>&1
wait $poster
runid_after=$($ENGINE exec "$(ctr redis)" redis-cli INFO server 2>/dev/null | grep '^run_id:' | tr -d '\r')
[ -n "$runid_after" ] && [ "$runid_before" != "$runid_after" ] \
    && ok "Redis was restarted while envelopes were posted (run_id changed)" \
    || nok "Redis was restarted while envelopes were posted" "$runid_before / $runid_after"
check "hub1 is healthy again after it" wait_for 60 healthy_at "$P1"
check "hub2 is healthy again after it" wait_for 60 healthy_at "$P2"
verify_log() {
    $ENGINE exec "$(ctr redis)" redis-cli --no-raw XRANGE "ioa:{room:$CID}:log" - + > "$WORK/log.txt" 2>&1
    $PY - "$WORK/posted.json" "$WORK/log.txt" <<'EOF'
import json, re, sys
posted = json.load(open(sys.argv[1]))
log = re.findall(r'^\s*\d+\) 1\) "(\d+-\d+)"', open(sys.argv[2]).read(), re.M)
accepted = posted["ids"]
print("sent %d, accepted %d, refused %s, in the log %d"
      % (posted["sent"], len(accepted), posted["refused"], len(log)))
if not accepted or not posted["refused"]:
    print("the restart was not seen by the posts (nothing refused): not a test")
    sys.exit(1)
missing = [i for i in accepted if i not in set(log)]
if missing:
    print("accepted but not in the log:", missing[:10])
    sys.exit(1)
if [i for i in log if i in set(accepted)] != accepted:
    print("the log's order is not the order they were accepted in")
    sys.exit(1)
EOF
}
out=$(verify_log)
[ $? = 0 ] && ok "every envelope a hub accepted is in the log, in order ($out)" \
    || nok "every envelope a hub accepted is in the log, in order" "$out"
check "a goal through hub2 after the Redis restart: the right conclusion" goal "$P2" "nothing accepted is ever lost"
phase "Redis restart"

# -------------------------------------- the same file with Docker Compose

# docker-compose (Docker's own Compose, 1.29 from Debian) against the
# Docker API that podman serves: Docker's reading of compose.yaml, with its
# health-based start order.  podman runs healthchecks from systemd timers,
# and there is no systemd on the project's machines, so a loop here runs
# each container's check every 2 s instead (what the timer would do); the
# checks are the images' own.
if [ "$ENGINE" = podman ] && command -v docker-compose >/dev/null 2>&1; then
    "${COMPOSE[@]}" down -v >"$WORK/down.log" 2>&1
    sock=$WORK/podman.sock
    rm -f "$sock"
    podman system service --time=0 "unix://$sock" >"$WORK/podman-service.log" 2>&1 &
    service=$!
    wait_for 20 test -S "$sock"
    DC=(env DOCKER_HOST="unix://$sock" docker-compose -p "${PROJECT}dc" -f "$COMPOSE_FILE")
    (
        while :; do
            for c in $(podman ps -q --filter "label=com.docker.compose.project=${PROJECT}dc"); do
                podman healthcheck run "$c" >/dev/null 2>&1
            done
            sleep 2
        done
    ) &
    ticker=$!
    P1=$(free_port)
    P2=$(free_port)
    export IOA_HUB1_PORT=$P1 IOA_HUB2_PORT=$P2
    if timeout 300 "${DC[@]}" up -d >"$WORK/dc-up.log" 2>&1; then
        ok "docker-compose up: each service started once what it depends on was healthy"
    else
        nok "docker-compose up" "$(tail -20 "$WORK/dc-up.log")"
    fi
    check "its hub1 answers /health_check 200" wait_for 60 healthy_at "$P1"
    check "its hub2 answers /health_check 200" wait_for 60 healthy_at "$P2"
    TOKEN=$($ENGINE exec "${PROJECT}dc_hub1_1" ioa-token sign --key /keys/jwt.key --sub tester --scope "launch admin" 2>/dev/null)
    AUTH=(-H "Authorization: Bearer $TOKEN")
    check "all three demo agents online on its hub2" wait_for 60 online "$P2" Counter Shouter Reverser
    check "a goal through its hub2: the right conclusion" goal "$P2" "compose files read alike by both tools"
    kill "$ticker" 2>/dev/null
    ticker=
    "${DC[@]}" down -v >"$WORK/dc-down.log" 2>&1 \
        && ok "docker-compose down -v" || nok "docker-compose down -v" "$(tail -5 "$WORK/dc-down.log")"
    DC=
    kill "$service" 2>/dev/null
    service=
    phase "Docker Compose"
fi

# ------------------------------------------------------------ teardown

trap - EXIT
teardown
left="$(ours_containers)$(ours_volumes)$(ours_networks)"
[ -z "$left" ] && ok "torn down: no container, volume or network of $PROJECT is left" \
    || nok "torn down: nothing of $PROJECT left" "$left"
phase "teardown"

echo "# docker-test took $(( $(date +%s) - t0 )) s (after make docker)"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
