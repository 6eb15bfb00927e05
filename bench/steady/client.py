"""bench/steady/client.py -- the measuring side of bench/steady.sh: steady
traffic that keeps opening new rooms and registering new agents, as goals
do, and Redis' memory over time.

    client.py --port P --redis PORT --seconds S --out FILE [options]

Every second, on the hub's REST API (one keep-alive connection each for
registering, teaming up and posting, requests pipelined per second):

  - --agents-per-s new agents register (each a short description);
  - --rooms-per-s new rooms are formed, each of 3 of the newest agents;
  - --posts-per-s envelopes of --size bytes of content are posted, spread
    over the rooms younger than --active seconds (a conversation that
    lasts --active seconds, then falls silent, as a finished goal's room);

and Redis' used_memory, the number of keys and the envelopes stored are
read.  The hub's retention (bench/steady.sh sets it) is what should make
the memory level off; the report gives the series, the plateau (the median
of the last third) and what the model predicts for it:

    envelopes alive  = posts/s x (active / 2 + room retention + lag)
    rooms alive      = rooms/s x (active + room retention + lag)
    agents alive     = agents/s x (agent retention + lag)
    memory           = base + envelopes x e + rooms x r + agents x a

with lag the sweep's delay (half a tick on average, 2.5 s) and e, r, a the
bytes per envelope, room and agent, measured one at a time before the run
(calibrate()).  Without retention the model is what was written.  Plain sockets and the standard library only.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lib"))

from http1 import Http  # noqa: E402
from resp import Redis, used_memory as info  # noqa: E402


def exchange(h, reqs, port):
    """sends reqs pipelined and reads every answer; a fresh connection
    before nginx's keepalive_requests runs out"""
    if h["n"] + len(reqs) > 900:
        h["c"].s.close()
        h["c"], h["n"] = Http(port), 0
    h["c"].s.sendall(b"".join(reqs))
    out = []
    for _ in reqs:
        out.append(h["c"].response())
    h["n"] += len(reqs)
    return out


def calibrate(o, redis, conns, pad):
    """Redis bytes per agent, per room and per envelope, each measured on
    its own (1,000 agents, then rooms of 3, then 3,000 envelopes of the
    run's size in those rooms, as many per room as the run puts in one:
    a Stream's cost per entry depends on how many share its nodes), before
    the run; the run starts from an empty Redis again"""
    names = ["cal%05d" % i for i in range(1000)]
    m0 = info(redis)
    for i in range(0, len(names), 250):
        exchange(conns["reg"], [Http.request("/register", {
            "name": n, "type": "Thing Assistant",
            "desc": "agent %s of the steady-state benchmark" % n})
            for n in names[i:i + 250]], o.port)
    m1 = info(redis)
    per_room = max(1, round(o.posts_per_s / max(o.rooms_per_s, 1)))
    nrooms = max(1, min(300, 3000 // per_room))
    rooms = []
    for i in range(0, nrooms, 100):
        for st, body in exchange(conns["team"], [Http.request("/teamup", {
                "sender": names[3 * k], "agent_names": names[3 * k:3 * k + 3]})
                for k in range(i, min(i + 100, nrooms))], o.port):
            rooms.append(json.loads(body)["comm_id"])
    m2 = info(redis)
    for i in range(0, 3000, 250):
        exchange(conns["post"], [Http.request(
            "/agents/%s/messages" % names[3 * (k % nrooms)], {
                "comm_id": rooms[k % nrooms], "content": "%d %s" % (k, pad)})
            for k in range(i, i + 250)], o.port)
    m3 = info(redis)
    return {"agents": (m1 - m0) / 1000, "rooms": (m2 - m1) / nrooms,
            "envelopes": (m3 - m2) / 3000}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--redis", type=int, required=True)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--agents-per-s", type=int, default=10)
    ap.add_argument("--rooms-per-s", type=int, default=5)
    ap.add_argument("--posts-per-s", type=int, default=200)
    ap.add_argument("--size", type=int, default=500)
    ap.add_argument("--active", type=float, default=10)
    ap.add_argument("--room-retention", type=float, default=0)
    ap.add_argument("--agent-retention", type=float, default=0)
    ap.add_argument("--prefix", default="st")
    ap.add_argument("--out", required=True)
    o = ap.parse_args()

    redis = Redis(o.redis)
    conns = {k: {"c": Http(o.port), "n": 0} for k in ("reg", "team", "post")}
    pad = "p" * o.size
    unit = calibrate(o, redis, conns, pad)
    redis.cmd("FLUSHALL")
    time.sleep(0.5)
    agents, rooms = [], []          # rooms: (created, comm_id, sender)
    series, errors = [], {}
    t0 = time.time()
    base = info(redis)
    posted = 0

    for sec in range(o.seconds):
        tick = t0 + sec
        # agents
        new = ["%s%06d" % (o.prefix, len(agents) + i)
               for i in range(o.agents_per_s)]
        for (st, body), n in zip(exchange(conns["reg"], [
                Http.request("/register", {
                    "name": n, "type": "Thing Assistant",
                    "desc": "agent %s of the steady-state benchmark" % n})
                for n in new], o.port), new):
            if st != 200:
                errors["register %d" % st] = errors.get("register %d" % st, 0) + 1
        agents.extend(new)
        # rooms of 3 of the newest agents
        reqs, senders = [], []
        for i in range(o.rooms_per_s):
            team = agents[-3 - i:len(agents) - i]
            reqs.append(Http.request("/teamup", {"sender": team[0],
                                                 "agent_names": team}))
            senders.append(team[0])
        for (st, body), s in zip(exchange(conns["team"], reqs, o.port),
                                 senders):
            if st == 200:
                rooms.append((time.time(), json.loads(body)["comm_id"], s))
            else:
                errors["teamup %d" % st] = errors.get("teamup %d" % st, 0) + 1
        # posts over the active rooms
        now = time.time()
        active = [r for r in rooms if now - r[0] < o.active]
        reqs = []
        for i in range(o.posts_per_s if active else 0):
            _, cid, sender = active[i % len(active)]
            reqs.append(Http.request("/agents/%s/messages" % sender, {
                "comm_id": cid, "content": "%d %s" % (posted + i, pad)}))
        for st, body in exchange(conns["post"], reqs, o.port):
            if st == 200:
                posted += 1
            else:
                errors["post %d" % st] = errors.get("post %d" % st, 0) + 1
        series.append({"t": sec, "used": info(redis),
                       "keys": int(redis.cmd("DBSIZE")),
                       "agents": len(agents), "rooms": len(rooms),
                       "posted": posted})
        delay = tick + 1 - time.time()
        if delay > 0:
            time.sleep(delay)

    last = series[len(series) * 2 // 3:]
    plateau = sorted(s["used"] for s in last)[len(last) // 2]
    lag = 2.5
    alive = {
        "envelopes": o.posts_per_s * (o.active / 2 + o.room_retention + lag)
        if o.room_retention else posted,
        "rooms": o.rooms_per_s * (o.active + o.room_retention + lag)
        if o.room_retention else len(rooms),
        "agents": o.agents_per_s * (o.agent_retention + lag)
        if o.agent_retention else len(agents),
    }
    predicted = base + sum(unit[k] * alive[k] for k in alive)
    report = {
        "seconds": o.seconds, "agents_per_s": o.agents_per_s,
        "rooms_per_s": o.rooms_per_s, "posts_per_s": o.posts_per_s,
        "size": o.size, "active": o.active,
        "room_retention": o.room_retention,
        "agent_retention": o.agent_retention,
        "bytes_per": unit, "alive_predicted": alive,
        "base_used": base, "plateau_used": plateau,
        "predicted_used": round(predicted),
        "last_used": series[-1]["used"],
        "max_used": max(s["used"] for s in series),
        "posted": posted, "errors": errors, "series": series,
    }
    with open(o.out, "w") as f:
        json.dump(report, f)
    print(json.dumps({k: v for k, v in report.items() if k != "series"}))


if __name__ == "__main__":
    main()
