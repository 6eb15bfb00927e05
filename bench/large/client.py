"""bench/large/client.py -- the measuring side of bench/large.sh: many agents
each sending one large envelope at the same moment, and what that costs the
nginx worker in memory.

    client.py --port P --worker-pid PID --redis PORT --connections N
              --size BYTES --mode accepted|oversized --out FILE

1. registers N agents (POST /register) and pairs them into N/2 rooms
   (POST /teamup), as IoA's agents team up;
2. opens N WebSockets (/ws/<name>), one per agent, and waits until the
   worker's memory is steady: that is the baseline;
3. every connection then writes one envelope of --size bytes of JSON, all
   of them at the same time: the frames are interleaved in 256 KiB slices
   over non-blocking sockets, so the hub holds every one of them part-read;
4. accepted: each agent must get two envelopes back (its own echo and its
   partner's), both whole; oversized: each must get one error frame with
   code too_big, then its connection must still carry a small envelope to
   its partner and back (the connection stays usable);
5. meanwhile a thread reads the worker's VmRSS every 10 ms; VmHWM (reset
   through /proc/PID/clear_refs before the send) gives the true peak; the
   RSS is read again once the worker has settled after the last reply;
6. steps 3 to 5 again (--rounds, 2) on the same connections: the second
   round shows whether what the worker kept after the first is reused (the
   allocator's retention) or added to (a leak);
7. accepted: the envelopes stored in the room logs (XLEN), which every
   member must have received (2 per envelope).

Frames are masked as RFC 6455 requires.  The payload's bulk is the same for
every connection (only the comm_id prefix differs, always 32 characters),
so it is masked once and sent from one buffer; received payloads are read
past, keeping only their first bytes to classify them, so the client's own
memory does not grow with N x size.  Plain sockets and the standard
library only.
"""

import argparse
import base64
import json
import os
import re
import selectors
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lib"))

from http1 import Http  # noqa: E402
from resp import Redis, used_memory  # noqa: E402

SLICE = 256 * 1024          # bytes written per turn of a connection
KEEP = 256                  # bytes of each received message kept
MASK = b"\x5a\xa5\x3c\xc3"


def mask(data, offset):
    """data XOR the masking key, the key's phase given by offset"""
    key = (MASK * ((len(data) + offset) // 4 + 2))[offset:offset + len(data)]
    n = int.from_bytes(data, "big") ^ int.from_bytes(key, "big")
    return n.to_bytes(len(data), "big")


def frame_header(n):
    if n < 126:
        return bytes([0x81, 0x80 | n]) + MASK
    if n < 1 << 16:
        return bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big") + MASK
    return bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big") + MASK


def text_frame(payload):
    return frame_header(len(payload)) + mask(payload, 0)


class Conn:
    """One agent's WebSocket: what is left to write, and a streaming reader
    of the server's frames that keeps only each message's first bytes."""

    def __init__(self, port, name):
        self.name = name
        self.s = socket.create_connection(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        path = "/ws/" + name
        self.s.sendall(("GET %s HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket"
                        "\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n"
                        % (path, key)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = self.s.recv(4096)
            if not d:
                raise IOError("%s: closed during the handshake" % name)
            buf += d
        head, self.rbuf = buf.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise IOError("%s: handshake %r" % (name, head[:200]))
        self.s.setblocking(False)
        self.out = []               # memoryviews still to write
        self.need = None            # bytes of the current payload left
        self.cur = b""              # its first KEEP bytes
        self.messages = []          # (opcode, first bytes, length)
        self.closed = False
        self.watching_write = False

    def queue(self, *parts):
        self.out.extend(memoryview(p) for p in parts)

    def write_some(self):
        while self.out:
            try:
                n = self.s.send(self.out[0][:SLICE])
            except BlockingIOError:
                return
            if n < len(self.out[0]):
                self.out[0] = self.out[0][n:]
                return                       # next turn: be fair to others
            self.out.pop(0)

    def read_some(self):
        try:
            d = self.s.recv(1 << 20)
        except BlockingIOError:
            return
        if not d:
            self.closed = True
            return
        self.rbuf += d
        self._parse()

    def _parse(self):
        while True:
            if self.need is None:
                b = self.rbuf
                if len(b) < 2:
                    return
                self.op = b[0] & 0x0f
                n, h = b[1] & 0x7f, 2
                if n == 126:
                    if len(b) < 4:
                        return
                    n, h = int.from_bytes(b[2:4], "big"), 4
                elif n == 127:
                    if len(b) < 10:
                        return
                    n, h = int.from_bytes(b[2:10], "big"), 10
                self.rbuf = b[h:]
                self.need, self.total, self.cur = n, n, b""
            take = min(self.need, len(self.rbuf))
            if len(self.cur) < KEEP:
                self.cur += self.rbuf[:min(take, KEEP - len(self.cur))]
            self.rbuf = self.rbuf[take:]
            self.need -= take
            if self.need:
                return
            if self.op == 0x9:                          # ping: pong back
                self.queue(bytes([0x8a, 0x80 | len(self.cur)]) + MASK
                           + mask(self.cur, 0))
            elif self.op in (0x1, 0x8):
                self.messages.append((self.op, self.cur, self.total))
            self.need = None


class Sampler(threading.Thread):
    """VmRSS of the worker every 10 ms, and its maximum"""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, False

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, status(self.pid)["VmRSS"])
            time.sleep(0.01)


def status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def cpu_seconds(pid):
    """user + system CPU time of a process so far"""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid, secs=2.0, tol=256 * 1024, limit=60):
    """waits until the worker's RSS moved less than tol for secs"""
    t0, last, since = time.time(), None, time.time()
    while time.time() - t0 < limit:
        rss = status(pid)["VmRSS"]
        if last is None or abs(rss - last) > tol:
            last, since = rss, time.time()
        elif time.time() - since >= secs:
            return rss
        time.sleep(0.2)
    return status(pid)["VmRSS"]


def setup(o, prefix):
    names = ["%s_%05d" % (prefix, i) for i in range(o.connections)]
    rooms = {}
    for i in range(0, len(names), 400):          # under keepalive_requests
        h = Http(o.port)
        chunk = names[i:i + 400]
        h.s.sendall(b"".join(
            Http.request("/register", {"name": n, "type": "Thing Assistant",
                                       "desc": "large-envelope agent"})
            for n in chunk))
        for n in chunk:
            st, body = h.response()
            if st != 200:
                raise SystemExit("register %s: HTTP %d %s" % (n, st, body[:200]))
        pairs = [(chunk[k], chunk[k + 1]) for k in range(0, len(chunk) - 1, 2)]
        h.s.sendall(b"".join(
            Http.request("/teamup", {"sender": a, "agent_names": [a, b]})
            for a, b in pairs))
        for a, b in pairs:
            st, body = h.response()
            if st != 200:
                raise SystemExit("teamup %s: HTTP %d %s" % (a, st, body[:200]))
            cid = json.loads(body)["comm_id"]
            if len(cid) != 32:
                raise SystemExit("teamup: a comm_id of %d characters" % len(cid))
            rooms[a] = rooms[b] = cid
        h.s.close()
    return names, rooms


def pump(sel, conns, done, deadline):
    """writes and reads until done() or the deadline; a connection is
    watched for writing only while it has something to write"""
    while not done() and time.time() < deadline:
        for c in conns:
            if bool(c.out) != c.watching_write:
                c.watching_write = bool(c.out)
                sel.modify(c.s, selectors.EVENT_READ
                           | (selectors.EVENT_WRITE if c.out else 0), c)
        for key, ev in sel.select(0.05):
            c = key.data
            if ev & selectors.EVENT_WRITE:
                c.write_some()
            if ev & selectors.EVENT_READ:
                c.read_some()


def burst(o, sel, conns, want, frame):
    """every connection writes frame(c) at once; returns what happened"""
    with open("/proc/%d/clear_refs" % o.worker_pid, "w") as f:
        f.write("5")                                      # VmHWM := VmRSS
    sampler = Sampler(o.worker_pid)
    sampler.start()
    t0 = time.time()
    cpu0, mine0 = cpu_seconds(o.worker_pid), time.process_time()
    for c in conns:
        c.queue(*frame(c))
    # every byte written and every answer read (or the connection gone)
    pump(sel, conns, lambda: all(c.closed or (not c.out
                                              and len(c.messages) >= want)
                                 for c in conns), t0 + o.timeout)
    elapsed = time.time() - t0
    cpu = cpu_seconds(o.worker_pid) - cpu0
    mine = time.process_time() - mine0
    sampler.stop = True
    sampler.join()
    peak = max(status(o.worker_pid)["VmHWM"], sampler.peak)

    whole = other = 0
    codes = {}
    for c in conns:
        for op, first, total in c.messages:
            if op == 0x1 and first.startswith(b'{"op":"error"'):
                m = re.search(rb'"code":"([a-z_]+)"', first)
                code = m.group(1).decode() if m else "?"
                codes[code] = codes.get(code, 0) + 1
            elif op == 0x1 and total >= o.size and first.startswith(b'{"id":'):
                whole += 1
            else:
                other += 1
    return {"seconds": round(elapsed, 3),
            "worker_cpu_seconds": round(cpu, 2),
            "client_cpu_seconds": round(mine, 2),
            "all_sent": all(not c.out for c in conns),
            "closed_by_server": sum(c.closed for c in conns),
            "whole_envelopes_received": whole, "error_codes": codes,
            "unexpected": other, "rss_peak": peak,
            "rss_after": settle(o.worker_pid)}


def still_usable(sel, conns, rooms):
    """a small envelope from every connection, to its partner and back:
    how many connections carried it both ways"""
    for c in conns:
        c.messages = []
        c.queue(text_frame(json.dumps(
            {"comm_id": rooms[c.name], "content": "still here"}).encode()))
    pump(sel, conns, lambda: all(len(c.messages) >= 2 or c.closed
                                 for c in conns), time.time() + 60)
    return sum(1 for c in conns
               if not c.closed and len(c.messages) >= 2
               and all(b'"content":"still here"' in m[1]
                       for m in c.messages[:2]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--worker-pid", type=int, required=True)
    ap.add_argument("--redis", type=int, required=True)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--mode", choices=("accepted", "oversized"), required=True)
    ap.add_argument("--prefix", default="lg")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", required=True)
    o = ap.parse_args()

    names, rooms = setup(o, o.prefix)
    conns = [Conn(o.port, n) for n in names]
    sel = selectors.DefaultSelector()
    for c in conns:
        sel.register(c.s, selectors.EVENT_READ, c)
    redis = Redis(o.redis)

    def used():
        return used_memory(redis)

    pump(sel, conns, lambda: False, time.time() + 1)      # pings, if any
    rss_before = settle(o.worker_pid)
    redis_before = used()

    # one envelope of exactly --size bytes per connection: the bulk is shared
    head = '{"comm_id":"%s","content":"'
    tail = b'"}'
    bulk_len = o.size - len(head % ("x" * 32)) - len(tail)
    if bulk_len < 1:
        raise SystemExit("--size too small")
    prefix_len = len(head % ("x" * 32))
    bulk = mask(b"y" * bulk_len + tail, prefix_len % 4)
    hdr = frame_header(o.size)

    want = 2 if o.mode == "accepted" else 1
    rounds = []
    for _ in range(o.rounds):
        for c in conns:
            c.messages = []
        r = burst(o, sel, conns, want, lambda c: (
            hdr, mask((head % rooms[c.name]).encode(), 0), bulk))
        r["redis_used_after"] = used()
        if o.mode == "oversized":
            r["usable_after"] = still_usable(sel, conns, rooms)
        rounds.append(r)

    stored = sum(redis.cmd("XLEN", "ioa:{room:%s}:log" % cid)
                 for cid in set(rooms.values()))
    report = {
        "mode": o.mode, "connections": len(conns), "size": o.size,
        "rss_before": rss_before, "redis_used_before": redis_before,
        "stored": stored, "rounds": rounds,
    }
    with open(o.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report))
    for c in conns:
        c.s.close()


if __name__ == "__main__":
    main()
