#!/usr/bin/python3
"""t/lib/ws-deflate-room.py PORT COMM_ID COUNT -- t/300-ws-deflate.t's room
exchange through a WebSocket client that is not ours: Debian's
python3-websockets, which offers permessage-deflate by default
("permessage-deflate; client_max_window_bits") and compresses what it
sends with context takeover.

Bob and Dave connect, then Alice (echo=0: she gets an ack per envelope)
posts COUNT envelopes of IoA text, 1-4 KB each (bench/lib/ioa_envelopes.py),
and waits for every ack; Bob and Dave read COUNT envelopes each.  Prints one
JSON object:

    {"ext": {"Alice": <Sec-WebSocket-Extensions of her 101>, ...},
     "sent": [[sha256 of content, bytes], ...],    Alice's, in order
     "acks": [id, ...],
     "got": {"Bob": [[id, sha256 of content, sender], ...], "Dave": ...}}

Run with /usr/bin/python3 (the interpreter that sees Debian's packages).
"""

import asyncio
import hashlib
import json
import os
import random
import sys

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "bench", "lib"))
from ioa_envelopes import Envelopes  # noqa: E402

TIMEOUT = 15


def sha(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def recv_json(ws):
    return json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))


async def main():
    port, cid, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    base = "ws://127.0.0.1:%s/ws/" % port
    conns = {}
    for name, query in (("Bob", ""), ("Dave", ""), ("Alice", "?echo=0")):
        conns[name] = await websockets.connect(base + name + query,
                                               max_size=None)

    env = Envelopes(seed=300, comm_id=cid, members=["Alice", "Bob", "Dave"])
    rnd = random.Random(300)
    sent = []
    for _ in range(count):
        text = env.make("Alice", rnd.randint(1024, 4096))
        sent.append([sha(json.loads(text)["content"]),
                     len(text.encode("utf-8"))])
        await conns["Alice"].send(text)

    acks = []
    while len(acks) < count:
        m = await recv_json(conns["Alice"])
        if m.get("op") == "ack":
            acks.append(m["id"])
        else:
            sys.exit("Alice got %r" % m)

    got = {}
    for name in ("Bob", "Dave"):
        got[name] = []
        while len(got[name]) < count:
            m = await recv_json(conns[name])
            got[name].append([m.get("id"), sha(m.get("content", "")),
                              m.get("sender")])

    ext = {name: ws.response_headers.get("Sec-WebSocket-Extensions")
           for name, ws in conns.items()}
    for ws in conns.values():
        await ws.close()

    print(json.dumps({"ext": ext, "sent": sent, "acks": acks, "got": got}))


asyncio.run(main())
