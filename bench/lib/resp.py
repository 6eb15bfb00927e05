"""bench/lib/resp.py -- the smallest RESP2 client the Python parts of the
benchmarks need (discovery, goal latency): Debian's python3 has no Redis
client without installing one."""

import socket


class Err(Exception):
    pass


class Redis:
    def __init__(self, port, host="127.0.0.1"):
        self.s = socket.create_connection((host, port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb")

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out += [b"$%d\r\n" % len(b), b, b"\r\n"]
        self.s.sendall(b"".join(out))

    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return Err(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode("utf-8", "surrogateescape")
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise IOError("bad RESP line %r" % line)

    def cmd(self, *args):
        self.send(*args)
        r = self.read()
        if isinstance(r, Err):
            raise r
        return r


def used_memory(r):
    """Redis' used_memory (INFO memory), in bytes"""
    text = r.cmd("INFO", "memory")
    return int(dict(line.split(":", 1) for line in text.split("\r\n")
                    if ":" in line)["used_memory"])
