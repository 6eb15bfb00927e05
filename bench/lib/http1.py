"""bench/lib/http1.py -- the benchmarks' HTTP/1.1 client: one keep-alive
connection, requests built ahead of time (so a timed loop only sends them),
answers read by Content-Length (nginx always sends one for the hub's JSON).
Plain sockets: nothing outside Debian's python3 standard library."""

import json
import socket


class Http:
    """One keep-alive HTTP/1.1 connection; responses are read by
    Content-Length (nginx always sends one for the JSON answers)."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.headers = {}

    @staticmethod
    def request(path, body):
        b = json.dumps(body).encode()
        return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: bench\r\n"
                b"Content-Type: application/json\r\nContent-Length: "
                + str(len(b)).encode() + b"\r\n\r\n" + b)

    def response(self):
        """(status, body); the answer's headers stay in self.headers
        (names in lower case)"""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        self.headers = {}
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            self.headers[k.strip().lower().decode()] = v.strip().decode()
        n = int(self.headers.get("content-length", 0))
        while len(self.buf) < n:
            self._fill()
        body, self.buf = self.buf[:n], self.buf[n:]
        return status, body

    def _fill(self):
        d = self.s.recv(1 << 16)
        if not d:
            raise IOError("connection closed by the server")
        self.buf += d
