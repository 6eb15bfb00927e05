#!/usr/bin/python3
"""bench/goal/goal_bench.py -- goal latency, launch to conclusion.

Called by bench/goal.sh once the hub, the workers and the agents are up:

    goal_bench.py --hub http://127.0.0.1:PORT --redis PORT --prefix ioa: \
        --goals 50 --agents Counter,Shouter,Reverser --json OUT.json

Launches the goals one after another (POST /launch_goal?wait=1: the answer
comes when the goal concludes; --mode async instead POSTs without wait and
follows GET /goals/<id> every --poll-ms), times each from just before the
request is sent to the moment the answer has been read, checks the answer
([comm_id, conclusion], state concluded, every agent's result in the room),
and then reads each goal's room log from Redis to place every envelope on
the goal's timeline (Stream ids are Redis' clock in ms, the same machine's
clock as ours): the median of each phase is how the time is spent.

Only the Python standard library (the Debian interpreter, /usr/bin/python3).
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lib"))
from resp import Redis  # noqa: E402

TYPES = {0: "DEFAULT", 1: "PROPOSAL", 2: "VOTE", 3: "VOTING_RESULT",
         4: "DISCUSSION", 5: "SYNC_TASK_ASSIGNMENT", 6: "ASYNC_TASK_ASSIGNMENT",
         7: "INFORM_TASK_RESULT", 8: "INFORM_TASK_PROGRESS", 9: "PAUSE",
         10: "CONCLUDE_GROUP_DISCUSSION", 11: "CONCLUSION"}


def pct(v, p):
    """nearest-rank percentile"""
    v = sorted(v)
    if not v:
        return None
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def request(conn, method, path, body=None, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    return r.status, r.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hub", required=True)
    ap.add_argument("--redis", type=int, required=True)
    ap.add_argument("--prefix", default="ioa:")
    ap.add_argument("--goals", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--agents", required=True)
    ap.add_argument("--goal", required=True)
    ap.add_argument("--team", action="store_true",
                    help="name the team (team_member_names) instead of "
                         "letting the planner find it")
    ap.add_argument("--team-up-depth", type=int, default=None,
                    help="team_up_depth (nested teams)")
    ap.add_argument("--expect-results", type=int, default=None,
                    help="INFORM_TASK_RESULT envelopes expected in the room "
                         "(default: one per agent)")
    ap.add_argument("--mode", choices=("wait", "async"), default="wait")
    ap.add_argument("--poll-ms", type=float, default=2)
    ap.add_argument("--json", required=True)
    ap.add_argument("--timeline", help="write every goal's timeline here")
    a = ap.parse_args()

    u = urllib.parse.urlparse(a.hub)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    red = Redis(a.redis)
    agents = a.agents.split(",")

    body = {"goal": a.goal, "max_turns": 100, "skip_naming": True}
    if a.team:
        body["team_member_names"] = agents
    if a.team_up_depth is not None:
        body["team_up_depth"] = a.team_up_depth
    expect = a.expect_results if a.expect_results is not None else len(agents)
    body = json.dumps(body)

    lat, goals, failures = [], [], []
    for i in range(a.warmup + a.goals):
        t0 = time.time()
        if a.mode == "wait":
            st, out = request(conn, "POST", "/launch_goal?wait=1", body)
            t1 = time.time()
            if st != 200:
                failures.append("goal %d: %d %s" % (i, st, out[:200]))
                continue
            comm_id, conclusion = json.loads(out)
            gid = None
        else:
            st, out = request(conn, "POST", "/launch_goal", body)
            if st != 202:
                failures.append("goal %d: %d %s" % (i, st, out[:200]))
                continue
            gid = json.loads(out)["goal_id"]
            while True:
                st, out = request(conn, "GET", "/goals/" + gid)
                g = json.loads(out)
                if g.get("state") in ("concluded", "failed", "cancelled"):
                    break
                time.sleep(a.poll_ms / 1000.0)
            t1 = time.time()
            if g["state"] != "concluded":
                failures.append("goal %s: %s %s" % (gid, g["state"], g.get("error")))
                continue
            comm_id, conclusion = g["comm_id"], g["conclusion"]
        if i < a.warmup:
            continue
        lat.append((t1 - t0) * 1000.0)
        goals.append({"t0": t0, "t1": t1, "comm_id": comm_id, "goal_id": gid,
                      "conclusion": conclusion})

    # ---- the timelines: every envelope of each goal's room, in ms after t0
    phases = {}
    timelines = []
    for g in goals:
        log = red.cmd("XRANGE", "%s{room:%s}:log" % (a.prefix, g["comm_id"]), "-", "+")
        events, results, nresults = [], set(), 0
        for sid, fields in log:
            d = dict(zip(fields[0::2], fields[1::2]))
            raw = d.get("e", "{}")
            try:
                env = json.loads(raw)
            except ValueError:
                env = {}
            ms = int(sid.split("-")[0])
            ty = env.get("type")
            who = env.get("sender", "?")
            name = "%s %s" % (TYPES.get(ty, ty), who if who != "ioa-coordinator" else "coord")
            if ty == 7:
                results.add(who)
                nresults += 1
            events.append(((ms / 1000.0 - g["t0"]) * 1000.0, name))
        # names repeat (the coordinator's DISCUSSIONs): number them in order
        seen = {}
        tl = []
        for t, name in events:
            seen[name] = seen.get(name, 0) + 1
            k = name if seen[name] == 1 else "%s #%d" % (name, seen[name])
            tl.append((round(t, 2), k))
            phases.setdefault(k, []).append(t)
        tl.append((round((g["t1"] - g["t0"]) * 1000.0, 2), "answer read by the client"))
        phases.setdefault("answer read by the client", []).append((g["t1"] - g["t0"]) * 1000.0)
        if nresults < expect:
            failures.append("room %s: %d task results, %d expected (from %s)"
                            % (g["comm_id"], nresults, expect, ",".join(sorted(results))))
        timelines.append({"comm_id": g["comm_id"], "timeline": tl})

    order = sorted(phases, key=lambda k: statistics.median(phases[k]))
    res = {
        "goals": len(lat),
        "goals_asked": a.goals,
        "warmup": a.warmup,
        "mode": a.mode,
        "planner": "builtin",
        "agents": len(agents),
        "team": "named" if a.team else "discovered",
        "team_up_depth": a.team_up_depth,
        "latency_ms": {
            "p50": round(statistics.median(lat), 2) if lat else None,
            "p90": round(pct(lat, 90), 2) if lat else None,
            "p99": round(pct(lat, 99), 2) if lat else None,
            "max": round(max(lat), 2) if lat else None,
            "min": round(min(lat), 2) if lat else None,
            "mean": round(statistics.mean(lat), 2) if lat else None,
        },
        "phases_median_ms": [[k, round(statistics.median(phases[k]), 2),
                              len(phases[k])] for k in order],
        "failures": failures[:20],
        "failed": len(failures),
    }
    json.dump(res, open(a.json, "w"), indent=1)
    if a.timeline:
        json.dump(timelines, open(a.timeline, "w"), indent=1)

    lm = res["latency_ms"]
    print("goals: %d (mode %s, built-in planner, %d agents, team %s), failures %d"
          % (res["goals"], a.mode, len(agents), res["team"], len(failures)))
    if lat:
        print("launch -> conclusion: p50 %.1f ms  p90 %.1f  p99 %.1f  max %.1f  min %.1f"
              % (lm["p50"], lm["p90"], lm["p99"], lm["max"], lm["min"]))
    print("median timeline (ms after the launch request; envelope times are "
          "their Stream ids, 1 ms resolution):")
    for k, t, n in res["phases_median_ms"]:
        print("  %8.1f  %s%s" % (t, k, "" if n == len(goals) else "  (%d goals)" % n))
    for f in failures[:5]:
        print("failure:", f)
    return 1 if failures or not lat else 0


if __name__ == "__main__":
    sys.exit(main())
