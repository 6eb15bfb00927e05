#!/usr/bin/python3
"""bench/deflate.py -- what permessage-deflate saves and costs on the hub
(issue 16, point 3); bench/deflate.sh starts the hub and runs it.

    /usr/bin/python3 bench/deflate.py --port P --worker PID \
        [--repeats 3] [--rooms 20] [--members 4] [--count 100] [--json F]

Rooms: ROOMS rooms of MEMBERS agents; in each, one publisher (echo=0, so it
gets an ack per envelope) posts COUNT envelopes of IoA text, 1-4 KB each
(bench/lib/ioa_envelopes.py), at most 8 unacknowledged, and the others read
every one.  Each run has agents and rooms of its own.  Two modes, run
interleaved REPEATS times (plain, deflate, plain, deflate, ...):

  plain    the clients offer no extension: the hub's frames as they are
           without permessage-deflate (what "ioa_ws_deflate off" sends)
  deflate  the clients offer what python3-websockets offers by default
           ("permessage-deflate; client_max_window_bits"; the hub answers
           a 4 KiB client window) and compress what they send with context
           takeover

Measured over the posting phase only (connections are made before):
bytes on the wire from the hub's own counters (/metrics:
ioa_received_bytes_total and ioa_sent_bytes_total of the WebSocket
transport: frames as sent, headers and masks included) and the nginx
worker's CPU from /proc/PID/schedstat (time on a CPU, in ns; utime+stime
of /proc/PID/stat tick at 10 ms).  Every delivery is checked: each reader
gets COUNT envelopes, in the order posted, with the content sent.

Then, once per mode, memory: 200 rooms of 2 agents connect, the worker's
VmRSS is read, each agent posts one envelope and reads its partner's, and
VmRSS is read again: the difference per connection is what an agent that
has posted costs (for deflate: the inflate stream kept for its context).

Last, offline, the choices of ngx_ioa_ws_deflate.c on the same envelopes
with Python's zlib (the same C library): zlib levels (each message alone,
as the hub compresses), the client's window with context takeover, and
short messages.

Prints the tables as Markdown; --json writes every figure.
"""

import argparse
import asyncio
import hashlib
import json
import os
import random
import statistics
import sys
import time
import urllib.request
import zlib

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))
from ioa_envelopes import Envelopes  # noqa: E402

WINDOW = 8
TIMEOUT = 60


def http(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=data, method=method)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def metrics(port):
    text = http(port, "GET", "/metrics").decode()
    v = {}
    for line in text.splitlines():
        for k in ("sent", "received"):
            key = 'ioa_%s_bytes_total{transport="websocket"} ' % k
            if line.startswith(key):
                v[k] = int(line[len(key):])
    return v


def cpu_ns(pid):
    with open("/proc/%d/schedstat" % pid) as f:
        return int(f.read().split()[0])


def vm_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def make_rooms(port, tag, rooms, members):
    """[(comm_id, [names])]: agents registered, rooms teamed up"""
    out = []
    for r in range(rooms):
        names = ["%s-r%d-m%d" % (tag, r, k) for k in range(members)]
        for n in names:
            http(port, "POST", "/register",
                 {"name": n, "type": "Human Assistant",
                  "desc": "%s, a benchmark agent" % n})
        doc = json.loads(http(port, "POST", "/teamup",
                              {"sender": names[0], "agent_names": names[1:],
                               "team_name": "bench " + tag}))
        out.append((doc["comm_id"], names))
    return out


async def connect(port, name, mode, query=""):
    return await websockets.connect(
        "ws://127.0.0.1:%d/ws/%s%s" % (port, name, query),
        compression="deflate" if mode == "deflate" else None,
        max_size=None, ping_interval=None)


async def publish(ws, texts):
    """sends texts with at most WINDOW unacknowledged"""
    acked = 0
    sent = 0
    while acked < len(texts):
        while sent < len(texts) and sent - acked < WINDOW:
            await ws.send(texts[sent])
            sent += 1
        m = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        if m.get("op") != "ack":
            raise SystemExit("publisher got %r" % m)
        acked += 1


async def read(ws, want):
    got = []
    while len(got) < len(want):
        m = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        got.append(sha(m.get("content", "")))
    if got != want:
        raise SystemExit("a reader got other envelopes than were posted")


async def room_run(port, pid, mode, tag, rooms, members, count, seed):
    layout = make_rooms(port, tag, rooms, members)
    rnd = random.Random(seed)
    plans = []
    payload = 0
    for cid, names in layout:
        env = Envelopes(seed=rnd.getrandbits(32), comm_id=cid, members=names)
        texts = [env.make(names[0], rnd.randint(1024, 4096))
                 for _ in range(count)]
        payload += sum(len(t.encode()) for t in texts)
        plans.append((names, texts, [sha(json.loads(t)["content"])
                                     for t in texts]))
    conns = []
    jobs = []
    for names, texts, shas in plans:
        readers = [await connect(port, n, mode) for n in names[1:]]
        pub = await connect(port, names[0], mode, "?echo=0")
        conns += readers + [pub]
        jobs.append((pub, texts, readers, shas))
    await asyncio.sleep(0.5)             # every room loaded and subscribed

    m0, c0, t0 = metrics(port), cpu_ns(pid), time.monotonic()
    tasks = []
    for pub, texts, readers, shas in jobs:
        tasks.append(publish(pub, texts))
        tasks += [read(r, shas) for r in readers]
    await asyncio.gather(*tasks)
    m1, c1, t1 = metrics(port), cpu_ns(pid), time.monotonic()

    for ws in conns:
        await ws.close()
    envelopes = rooms * count
    deliveries = envelopes * (members - 1)
    return {
        "mode": mode, "envelopes": envelopes, "deliveries": deliveries,
        "payload_bytes": payload,
        "received_bytes": m1["received"] - m0["received"],
        "sent_bytes": m1["sent"] - m0["sent"],
        "cpu_ns": c1 - c0, "seconds": t1 - t0,
    }


async def memory_run(port, pid, mode, tag, pairs, seed):
    layout = make_rooms(port, tag, pairs, 2)
    conns = []
    for cid, names in layout:
        for n in names:
            conns.append((await connect(port, n, mode), cid, n))
    await asyncio.sleep(1)
    before = vm_rss_kb(pid)
    rnd = random.Random(seed)
    for ws, cid, n in conns:
        env = Envelopes(seed=rnd.getrandbits(32), comm_id=cid, members=[n])
        # a progress report: the floor never refuses one (both members
        # post at once)
        doc = json.loads(env.make(n, rnd.randint(1024, 4096)))
        doc["type"] = 8
        await ws.send(json.dumps(doc, ensure_ascii=False,
                                 separators=(",", ":")))
    for ws, cid, n in conns:
        for _ in range(2):               # its own echo and its partner's
            await asyncio.wait_for(ws.recv(), TIMEOUT)
    await asyncio.sleep(1)
    after = vm_rss_kb(pid)
    for ws, cid, n in conns:
        await ws.close()
    return {"mode": mode, "connections": len(conns), "rss_before_kb": before,
            "rss_after_kb": after,
            "kb_per_connection": (after - before) / len(conns)}


def offline(count, seed):
    """zlib on the same kind of envelopes: levels, client windows, short
    messages"""
    rnd = random.Random(seed)
    env = Envelopes(seed=seed, comm_id="%032x" % seed,
                    members=["Alice", "Bob", "Carol"])
    msgs = [env.make(rnd.choice(["Alice", "Bob", "Carol"]),
                     rnd.randint(1024, 4096)).encode() for _ in range(count)]
    raw = sum(len(m) for m in msgs)

    def alone(level, wbits):
        c = zlib.compressobj(level, zlib.DEFLATED, -wbits, 8)
        out = 0
        for m in msgs:
            out += len(c.compress(m) + c.flush(zlib.Z_SYNC_FLUSH)) - 4
            c = zlib.compressobj(level, zlib.DEFLATED, -wbits, 8)
        return out

    levels = []
    for level in (1, 6, 9):
        alone(level, 15)                 # warm
        times = []
        for _ in range(3):
            t = time.process_time()
            size = alone(level, 15)
            times.append((time.process_time() - t) / len(msgs) * 1e6)
        levels.append({"level": level, "percent": 100.0 * size / raw,
                       "us_per_message": statistics.median(times)})

    windows = []
    for wbits in (15, 13, 12, 11, 10, 9):
        c = zlib.compressobj(6, zlib.DEFLATED, -wbits, 5)
        size = 0
        for m in msgs:
            size += len(c.compress(m) + c.flush(zlib.Z_SYNC_FLUSH)) - 4
        windows.append({"bits": wbits, "window_kb": (1 << wbits) / 1024,
                        "percent": 100.0 * size / raw})
    windows.append({"bits": "none (no context takeover)",
                    "window_kb": 0, "percent": 100.0 * alone(6, 15) / raw})

    short = []
    for size in (64, 96, 128, 192, 256, 512):
        tot = comp = 0
        for m in msgs[:200]:
            p = m[:size]
            c = zlib.compressobj(1, zlib.DEFLATED, -15, 8)
            comp += len(c.compress(p) + c.flush(zlib.Z_SYNC_FLUSH)) - 4
            tot += len(p)
        short.append({"bytes": size, "percent": 100.0 * comp / tot})
    return {"messages": len(msgs), "mean_bytes": raw / len(msgs),
            "levels": levels, "client_windows": windows, "short": short}


def spread(xs, fmt):
    xs = sorted(xs)
    return "%s [%s-%s]" % (fmt % statistics.median(xs), fmt % xs[0],
                           fmt % xs[-1])


def report(runs, memory, zoff, args):
    w = print
    by = {m: [r for r in runs if r["mode"] == m] for m in ("plain", "deflate")}
    w("Rooms: %d x %d members, one publisher a room, %d envelopes each "
      "(1-4 KB of IoA text), at most %d unacknowledged; %d runs of each "
      "mode, interleaved.  Medians [min-max]." % (
          args.rooms, args.members, args.count, WINDOW, args.repeats))
    w("")
    w("| mode | bytes read / envelope | bytes written / delivery "
      "| nginx CPU us / envelope | nginx CPU us / delivery |")
    w("|---|---|---|---|---|")
    for mode, rs in by.items():
        w("| %s | %s | %s | %s | %s |" % (
            mode,
            spread([r["received_bytes"] / r["envelopes"] for r in rs], "%.0f"),
            spread([r["sent_bytes"] / r["deliveries"] for r in rs], "%.0f"),
            spread([r["cpu_ns"] / 1e3 / r["envelopes"] for r in rs], "%.1f"),
            spread([r["cpu_ns"] / 1e3 / r["deliveries"] for r in rs], "%.1f")))
    p, d = by["plain"], by["deflate"]
    med = statistics.median
    rin = med(r["received_bytes"] for r in d) / med(r["received_bytes"]
                                                    for r in p)
    rout = med(r["sent_bytes"] for r in d) / med(r["sent_bytes"] for r in p)
    cpu = med(r["cpu_ns"] for r in d) / med(r["cpu_ns"] for r in p)
    w("")
    w("deflate against plain: %.1f%% fewer bytes read, %.1f%% fewer bytes "
      "written, %.2fx the nginx CPU.  Mean envelope: %.0f bytes of JSON." % (
          100 * (1 - rin), 100 * (1 - rout), cpu,
          med(r["payload_bytes"] / r["envelopes"] for r in p)))
    w("")
    w("Memory: %d agents in rooms of 2, each posts one envelope; the "
      "worker's VmRSS after, less before:" % memory[0]["connections"])
    w("")
    w("| mode | kB per connection |")
    w("|---|---|")
    for m in memory:
        w("| %s | %.1f |" % (m["mode"], m["kb_per_connection"]))
    w("")
    w("zlib on %d such envelopes (Python's zlib, the same C library; "
      "mean %.0f bytes):" % (zoff["messages"], zoff["mean_bytes"]))
    w("")
    w("| level, each message alone, 32 KiB window | bytes left | "
      "us per message |")
    w("|---|---|---|")
    for x in zoff["levels"]:
        w("| %d | %.1f%% | %.1f |" % (x["level"], x["percent"],
                                     x["us_per_message"]))
    w("")
    w("| client window, context takeover | bytes left |")
    w("|---|---|")
    for x in zoff["client_windows"]:
        w("| %s | %.1f%% |" % (x["bits"], x["percent"]))
    w("")
    w("| short message (level 1) | bytes left |")
    w("|---|---|")
    for x in zoff["short"]:
        w("| %d bytes | %.1f%% |" % (x["bytes"], x["percent"]))


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--worker", type=int, required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rooms", type=int, default=20)
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--json")
    args = ap.parse_args()

    runs = []
    for k in range(args.repeats):
        for mode in ("plain", "deflate"):
            r = await room_run(args.port, args.worker, mode,
                               "%s%d" % (mode, k), args.rooms, args.members,
                               args.count, seed=k)
            print("deflate.py: %s run %d: %d envelopes in %.1f s" % (
                mode, k + 1, r["envelopes"], r["seconds"]), file=sys.stderr)
            runs.append(r)
    memory = []
    for mode in ("plain", "deflate"):
        memory.append(await memory_run(args.port, args.worker, mode,
                                       "mem-" + mode, args.pairs, seed=7))
    zoff = offline(400, 2)
    report(runs, memory, zoff, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "memory": memory, "zlib": zoff,
                       "args": vars(args)}, f, indent=1)


asyncio.run(main())
