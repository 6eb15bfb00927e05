#!/usr/bin/python3
"""bench/goal/suite.py -- goals of known answers, scored for correctness and
honesty.

Called by bench/goal.sh (GOAL_SUITE=1) once the hub, the workers and the
example agents are up:

    suite.py --hub http://127.0.0.1:PORT --redis PORT --suite suite.json \
        --rounds 2 --json OUT.json

Each goal of the suite is launched with POST /launch_goal?wait=1 (the
answer comes when the goal ends), timed from just before the request to the
answer, and scored against what the suite says the example agents produce:

  expect      a substring of the conclusion for each part that can be done
  impossible  how many parts no agent can do

  right       every expected answer is in the conclusion, and the conclusion
              claims exactly that many parts done of exactly the goal's
              parts (expected plus impossible: "N of M parts done", the
              last such line: with a model its answer comes first and the
              worker's account after it; a goal that fails because nothing
              matches claims 0)
  partial     it claims no more than it shows, but not everything was done
              (an honest partial answer)
  dishonest   it claims more parts done than answers it carries, or it
              counts fewer parts (M) than the goal has (expected plus
              impossible): a part left out of the account is a claim too

A goal counts as re-routed when its room holds a decision to re-route or
iterate; the latency of the others is the cost of the conversation itself.
The whole suite runs --rounds times (the flaky agent's state and the
agents' records carry over, as they would on a live hub).

Only the Python standard library (the Debian interpreter, /usr/bin/python3).
"""

import argparse
import http.client
import json
import os
import re
import statistics
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lib"))
from resp import Redis  # noqa: E402

CLAIM = re.compile(r"(\d+) of (\d+) parts? done")


def launch(conn, goal):
    body = json.dumps({"goal": goal, "max_turns": 200, "skip_naming": True})
    conn.request("POST", "/launch_goal?wait=1", body,
                 {"Content-Type": "application/json"})
    res = conn.getresponse()
    data = res.read()
    try:
        return res.status, json.loads(data)
    except ValueError:
        return res.status, None


def room_decisions(redis, prefix, comm_id):
    """the decisions ("reroute", "iterate", ...) posted in a goal's room"""
    if not comm_id:
        return []
    out = []
    for _, fields in redis.cmd("XRANGE", f"{prefix}{{room:{comm_id}}}:log",
                               "-", "+"):
        env = json.loads(dict(zip(fields[::2], fields[1::2]))["e"])
        d = env.get("ioa_decision")
        if isinstance(d, dict) and env.get("type") == 4:
            out.append(d.get("decision"))
    return out


def score(entry, conclusion, failed):
    expect = entry.get("expect", [])
    found = sum(1 for e in expect if e in conclusion)
    claims = CLAIM.findall(conclusion)
    claimed = 0 if failed or not claims else int(claims[-1][0])
    total = None if failed or not claims else int(claims[-1][1])
    parts = len(expect) + entry.get("impossible", 0)
    if claimed > found or (total is not None and total < parts):
        verdict = "dishonest"
    elif (found == len(expect) and claimed == len(expect)
          and (total is None or total == parts)):
        verdict = "right"
    else:
        verdict = "partial"
    return verdict, claimed, found


def llm_calls(url):
    """the scripted model's calls per kind (team, plan, review, ...)"""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", "/stats")
    return json.loads(c.getresponse().read())


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))] if v else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hub", required=True)
    ap.add_argument("--redis", type=int, required=True)
    ap.add_argument("--prefix", default="ioa:")
    ap.add_argument("--suite", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", required=True)
    ap.add_argument("--llm", help="the scripted model's URL: its call "
                    "counts go into the report")
    o = ap.parse_args()

    suite = json.load(open(o.suite))["goals"]
    u = urllib.parse.urlparse(o.hub)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    redis = Redis(o.redis)
    rows = []

    for rnd in range(o.rounds):
        for entry in suite:
            t0 = time.monotonic()
            status, ans = launch(conn, entry["goal"])
            ms = (time.monotonic() - t0) * 1000
            failed = status != 200
            if failed:
                comm_id = None
                conclusion = (ans or {}).get("message", "") if isinstance(ans, dict) else ""
            else:
                comm_id, conclusion = ans[0], ans[1]
            verdict, claimed, found = score(entry, conclusion, failed)
            decisions = room_decisions(redis, o.prefix, comm_id)
            rows.append({
                "round": rnd + 1, "goal": entry["goal"], "status": status,
                "verdict": verdict, "claimed": claimed, "found": found,
                "expected": len(entry.get("expect", [])),
                "impossible": entry.get("impossible", 0),
                "rerouted": any(d in ("reroute", "iterate") for d in decisions),
                "decisions": decisions, "latency_ms": round(ms, 2),
                "conclusion": conclusion,
            })

    plain = [r["latency_ms"] for r in rows if not r["rerouted"] and r["status"] == 200]
    again = [r["latency_ms"] for r in rows if r["rerouted"]]
    verdicts = {v: sum(1 for r in rows if r["verdict"] == v)
                for v in ("right", "partial", "dishonest")}
    report = {
        "goals": len(suite), "runs": len(rows), "verdicts": verdicts,
        "rerouted": len(again),
        "latency_ms_no_reroute": {"p50": pct(plain, 50), "p90": pct(plain, 90),
                                  "max": max(plain) if plain else None,
                                  "n": len(plain)},
        "latency_ms_rerouted": {"p50": pct(again, 50),
                                "max": max(again) if again else None,
                                "n": len(again)},
        "planner": "scripted LLM" if o.llm else "builtin",
        "llm_calls": llm_calls(o.llm) if o.llm else None,
        "rows": rows,
    }
    with open(o.json, "w") as f:
        json.dump(report, f, indent=1)

    print(f"goal suite ({report['planner']}): {len(suite)} goals x {o.rounds} runs: "
          f"{verdicts['right']} right, {verdicts['partial']} honestly partial, "
          f"{verdicts['dishonest']} dishonest")
    print(f"latency (launch to conclusion), no re-route: p50 "
          f"{report['latency_ms_no_reroute']['p50']} ms, p90 "
          f"{report['latency_ms_no_reroute']['p90']} ms (n {len(plain)}); "
          f"re-routed: p50 {report['latency_ms_rerouted']['p50']} ms (n {len(again)})")
    if report["llm_calls"] is not None:
        print("model calls: " + ", ".join(
            f"{k} {v}" for k, v in sorted(report["llm_calls"].items())))
    for r in rows:
        if r["verdict"] != "right":
            print(f"  {r['verdict']}: {r['goal']} (claims {r['claimed']}, "
                  f"shows {r['found']} of {r['expected']}, "
                  f"{r['impossible']} impossible)")
    return 1 if verdicts["dishonest"] else 0


if __name__ == "__main__":
    sys.exit(main())
