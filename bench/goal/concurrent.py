#!/usr/bin/python3
"""bench/goal/concurrent.py -- N goals launched at once, followed to the end.

Used by bench/concurrent.sh: the goals go to the hub together (POST
/launch_goal, 202 and the goal's id, from --conns connections side by side),
then every goal is followed (GET /goals/<id>, each goal every --poll-ms)
until it ends.  Prints one JSON object:

  {"goals": N, "right": R, "wrong": [...], "first_to_last_s": S,
   "median_s": M, "p90_s": P, "launch_s": L}

first_to_last_s is the time from the first launch to the last conclusion;
median_s and p90_s are of each goal's own launch-to-conclusion time.  A
goal is right when it concluded and its conclusion carries the agent's
result for its text (the agent's program echoes the task, so the goal's own
marker word must come back).
"""

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse


def request(conn, method, path, body=None):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, r.read().decode("utf-8", "replace")


def pct(v, p):
    v = sorted(v)
    if not v:
        return None
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hub", required=True)
    ap.add_argument("--goals", type=int, required=True)
    ap.add_argument("--goal", required=True, help="the text; {n} is the marker")
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--poll-ms", type=int, default=100)
    ap.add_argument("--timeout-s", type=float, default=600)
    a = ap.parse_args()

    u = urllib.parse.urlparse(a.hub)
    texts = [a.goal.replace("{n}", "m%04d" % i) for i in range(a.goals)]
    ids = [None] * a.goals
    t_launch = [0.0] * a.goals
    errors = []
    lock = threading.Lock()

    def launcher(k):
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        for i in range(k, a.goals, a.conns):
            body = json.dumps({"goal": texts[i], "max_turns": 100,
                               "skip_naming": True})
            t = time.time()
            try:
                st, out = request(conn, "POST", "/launch_goal", body)
            except Exception as e:      # noqa: BLE001 -- reported
                with lock:
                    errors.append("goal %d: %s" % (i, e))
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
                continue
            if st != 202:
                with lock:
                    errors.append("goal %d: %d %s" % (i, st, out[:200]))
                continue
            ids[i] = json.loads(out)["goal_id"]
            t_launch[i] = t

    t0 = time.time()
    ths = [threading.Thread(target=launcher, args=(k,))
           for k in range(min(a.conns, a.goals))]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    launched = time.time()

    # follow every goal: one connection, each open goal every poll_ms
    t_end = [None] * a.goals
    final = [None] * a.goals
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    open_ = [i for i in range(a.goals) if ids[i]]
    deadline = t0 + a.timeout_s
    while open_ and time.time() < deadline:
        still = []
        for i in open_:
            st, out = request(conn, "GET", "/goals/" + ids[i])
            g = json.loads(out) if st == 200 else {}
            if g.get("state") in ("concluded", "failed", "cancelled"):
                t_end[i] = time.time()
                final[i] = g
            else:
                still.append(i)
        open_ = still
        if open_:
            time.sleep(a.poll_ms / 1000.0)

    right, wrong, lat = 0, list(errors), []
    for i in range(a.goals):
        g = final[i]
        if not ids[i]:
            continue
        if g is None:
            wrong.append("goal %s: not ended after %.0f s" % (ids[i], a.timeout_s))
            continue
        lat.append(t_end[i] - t_launch[i])
        marker = "m%04d" % i
        if g.get("state") == "concluded" and marker in (g.get("conclusion") or ""):
            right += 1
        else:
            wrong.append("goal %s: %s %s" % (ids[i], g.get("state"),
                                             (g.get("conclusion") or g.get("error") or "")[:120]))
    ends = [t for t in t_end if t]
    print(json.dumps({
        "goals": a.goals, "right": right, "wrong": wrong[:10],
        "first_to_last_s": round(max(ends) - t0, 2) if ends else None,
        "median_s": round(pct(lat, 50), 2) if lat else None,
        "p90_s": round(pct(lat, 90), 2) if lat else None,
        "launch_s": round(launched - t0, 2),
    }))
    return 0 if right == a.goals else 1


if __name__ == "__main__":
    sys.exit(main())
