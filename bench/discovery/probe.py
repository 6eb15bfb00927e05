"""bench/discovery/probe.py -- what bench/discovery-load.sh asks the hubs
besides load (ioa-bench --replay makes the load).

    probe.py startup --port P --t0 EPOCH --query FILE --out F
        From nginx's start (t0: the wall clock just before it was launched)
        until POST /retrieve_assistant answers from the in-nginx index: the
        first query of FILE, again and again on one keep-alive connection
        (reopened while nginx is not listening yet), every 5 ms.  The index
        says where an answer came from in the header X-Ioa-Discovery:
        "index" once built, "redis" while the Redis fallback still serves.
        The first "index" ends the poll; answers without the header for
        --absent seconds (a hub that has no index, i.e. before issue 13)
        end it with first_index_s null, and so does --timeout.  Then
        GET /metrics: the index's gauges, null when absent.
    probe.py same --ports P1,P2 --queries FILE --out F
        The first --n queries of FILE to both hubs: the same agents with the
        same scores, in the same order?  Mismatches are asked again every
        0.5 s for up to --settle seconds (an index fed by events may lag a
        moment).  Then --probes agents with a made-up word of their own are
        registered through each hub in turn, and the other hub is asked for
        that word until it answers with the agent: how long an agent
        registered through one instance takes to be found through another.

Both write one JSON object to --out.
"""

import argparse
import json
import os
import random
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lib"))

from http1 import Http  # noqa: E402

HEADER = "x-ioa-discovery"
# name -> how label sets of one gauge combine (one per instance today; a
# per-worker labelling would still sum to the instance's agents and bytes)
GAUGES = {"ioa_discovery_index_agents": sum,
          "ioa_discovery_index_bytes": sum,
          "ioa_discovery_index_build_seconds": max}


def gauges(port):
    """the index's gauges from GET /metrics (Prometheus text), None for
    each one absent; and the error, if the scrape failed"""
    found = {name: [] for name in GAUGES}
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                    timeout=10) as r:
            text = r.read().decode("utf-8", "replace")
    except OSError as e:
        return {name: None for name in GAUGES}, str(e)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        # name[{labels}] value [timestamp]
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in found:
            rest = line.rsplit("}", 1)[1] if "{" in line else line[len(name):]
            try:
                found[name].append(float(rest.split()[0]))
            except (IndexError, ValueError):
                pass
    return {name: GAUGES[name](v) if v else None
            for name, v in found.items()}, None


def startup(o):
    with open(o.query) as f:
        req = Http.request("/retrieve_assistant", json.loads(f.readline()))
    seen, statuses = {}, {}
    first_answer = first_index = None
    reason, h = "timeout", None
    while time.time() < o.t0 + o.timeout:
        try:
            if h is None:
                h = Http(o.port)
            h.s.sendall(req)
            status, _ = h.response()
        except OSError:
            if h is not None:
                h.s.close()
                h = None
            time.sleep(0.005)
            continue
        now = time.time() - o.t0
        if first_answer is None:
            first_answer = now
        statuses[status] = statuses.get(status, 0) + 1
        v = h.headers.get(HEADER)
        seen[v or "none"] = seen.get(v or "none", 0) + 1
        if v == "index" and status == 200:
            first_index, reason = now, "index"
            break
        if v is None and now - first_answer > o.absent:
            reason = "no %s header" % HEADER
            break
        time.sleep(0.005)
    g, err = gauges(o.port)
    agents, size = (g["ioa_discovery_index_agents"],
                    g["ioa_discovery_index_bytes"])
    return {"first_answer_s": rnd(first_answer),
            "first_index_s": rnd(first_index),
            "ended_by": reason, "headers_seen": seen,
            "statuses": {str(k): v for k, v in statuses.items()},
            "gauges": g, "metrics_error": err,
            "bytes_per_agent": round(size / agents, 1)
            if agents and size is not None else None}


def rnd(v, nd=3):
    return None if v is None else round(v, nd)


def ask(h, body):
    h.s.sendall(Http.request("/retrieve_assistant", body))
    status, data = h.response()
    if status != 200:
        raise SystemExit("POST /retrieve_assistant answered %d: %s"
                         % (status, data[:200]))
    return [(a["name"], a.get("score")) for a in json.loads(data)]


def register(h, name, desc):
    h.s.sendall(Http.request("/register", {"name": name, "desc": desc,
                                           "type": "Thing Assistant",
                                           "tags": []}))
    status, data = h.response()
    if status != 200:
        raise SystemExit("POST /register answered %d: %s"
                         % (status, data[:200]))


def same(o):
    ports = [int(p) for p in o.ports.split(",")]
    hs = [Http(p) for p in ports]
    with open(o.queries) as f:
        qs = [json.loads(line) for _, line in zip(range(o.n), f)]
    pending, first_try, examples = list(range(len(qs))), None, []
    t = time.time()
    while True:
        diff = []
        for i in pending:
            a, b = ask(hs[0], qs[i]), ask(hs[1], qs[i])
            if a != b:
                diff.append(i)
                if first_try is None and len(examples) < 3:
                    examples.append({"query": qs[i]["capabilities"],
                                     "first": a, "second": b})
        if first_try is None:
            first_try = len(qs) - len(diff)
        pending = diff
        if not pending or time.time() - t > o.settle:
            break
        time.sleep(0.5)
    agreed_s = round(time.time() - t, 2) if first_try < len(qs) else 0.0

    # consonants only: no stopword, no trailing "s" to be folded, no word
    # of the corpus
    rng, lags = random.Random(), []
    for via, other in ((0, 1), (1, 0)):
        for k in range(o.probes):
            word = "zq" + "".join(rng.choice("bcdfghjklmnpqrtvwxz")
                                  for _ in range(10))
            name = "dload_probe_%s" % word
            register(hs[via], name, "Knows %s well." % word)
            t0, found = time.time(), None
            while time.time() - t0 < o.settle:
                if any(n == name for n, _ in ask(hs[other],
                                                 {"capabilities": [word]})):
                    found = time.time() - t0
                    break
                time.sleep(0.001)
            lags.append({"via": via, "found_by": other,
                         "seconds": rnd(found, 4)})
    found = [x["seconds"] for x in lags if x["seconds"] is not None]
    return {"queries": len(qs), "same": len(qs) - len(pending),
            "same_first_try": first_try,
            "seconds_to_agree": agreed_s if not pending else None,
            "examples": examples,
            "probes": lags, "probes_found": len(found),
            "probe_max_s": max(found) if found else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("startup", "same"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--port", type=int)
    ap.add_argument("--t0", type=float)
    ap.add_argument("--query")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--absent", type=float, default=3)
    ap.add_argument("--ports")
    ap.add_argument("--queries")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--settle", type=float, default=10)
    ap.add_argument("--probes", type=int, default=5)
    o = ap.parse_args()
    res = startup(o) if o.what == "startup" else same(o)
    with open(o.out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
