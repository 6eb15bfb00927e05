#!/usr/bin/python3
"""fuzz/http_request_seeds.py -- writes the seeds of the http_request harness
(fuzz/corpus/http_request/) from one table of endpoints and one of
malformations, the same two lists t/295-malformed-requests.t sends:

  /usr/bin/python3 fuzz/http_request_seeds.py

Each seed is the bytes clients write, with the harness's markers
(@@next@@: another connection, @@pause@@: wait for the hub, @@close@@,
@@reset@@) and names (@@room@@, @@goal@@, @@sid@@, @@jsid@@, @@alice@@,
@@bob@@, @@mal@@; see fuzz/http_request.c).  @@room@@ and @@goal@@ stand
for 32-byte ids, so a Content-Length counts them as 32 bytes.

Seeds are: every endpoint well-formed, alone, pipelined and on the token
server; every endpoint with each of a few malformations, alone and with a
request pipelined after it; every malformation on the endpoints that read
a body; then the exchanges that
need more than one connection or more than one write (a feed that hears a
post, a WebSocket, a body in pieces, a client gone mid-request).
"""

import hashlib
import json
import os
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "http_request")

ROOM = "@@room@@"
GOAL = "@@goal@@"
ID_LEN = 32       # what @@room@@ and @@goal@@ become


def clen(body):
    """Content-Length of body once the harness has put the ids in"""
    n = len(body)
    for name in (ROOM, GOAL):
        n += body.count(name.encode()) * (ID_LEN - len(name))
    return n


def req(method, path, body=None, headers=(), host="open", auth=None,
        close=False, ctype="application/json"):
    h = [f"{method} {path} HTTP/1.1", f"Host: {host}",
         "Accept: application/json, text/event-stream"]
    if auth:
        h.append(f"Authorization: Bearer {auth}")
    if close:
        h.append("Connection: close")
    if body is not None and ctype and not any(
            x.lower().startswith("content-type:") for x in headers):
        h.append(f"Content-Type: {ctype}")
    h += list(headers)
    if isinstance(body, str):
        body = body.encode("latin-1")
    if body is not None and not any(
            x.lower().startswith("transfer-encoding:") for x in headers):
        h.append(f"Content-Length: {clen(body)}")
    return ("\r\n".join(h) + "\r\n\r\n").encode("latin-1") + (body or b"")


def rpc(method, params, rid=1):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                       "params": params}, separators=(",", ":"))


def ws_frame(payload, opcode=1, fin=True, mask=b"\x1f\x2e\x3d\x4c",
             deflate=False):
    """a client frame: masked, as RFC 6455 wants from clients; with
    deflate, the payload compressed as RFC 7692 says (RSV1)"""
    if isinstance(payload, str):
        payload = payload.encode()
    if deflate:
        z = zlib.compressobj(wbits=-12)
        payload = (z.compress(payload) + z.flush(zlib.Z_SYNC_FLUSH))[:-4]
    b0 = (0x80 if fin else 0) | (0x40 if deflate else 0) | opcode
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", b0, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", b0, 0x80 | 127, n)
    masked = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
    return head + mask + masked


def ws_upgrade(path, host="open", auth=None, extra=()):
    h = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket",
         "Connection: Upgrade", "Sec-WebSocket-Version: 13",
         "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
    if auth:
        h.append(f"Authorization: Bearer {auth}")
    h += list(extra)
    return ("\r\n".join(h) + "\r\n\r\n").encode()


env_hi = json.dumps({"comm_id": ROOM, "content": "hi from the seed",
                     "type": 0, "state": 1})
env_bob = json.dumps({"comm_id": ROOM, "sender": "Bob",
                      "content": "Bob here", "next_speaker": ["Alice"],
                      "type": 4, "state": 1})

# [name, method, path, a well-formed body or None, stream]
ENDPOINTS = [
    ["register", "POST", "/register",
     '{"name":"Dave","type":"Thing Assistant","desc":"reads papers",'
     '"tags":["papers","search"],"speaks_protocol":true}', 0],
    ["retrieve", "POST", "/retrieve_assistant",
     '{"sender":"Alice","capabilities":["search the web","plan trips"],'
     '"limit":2,"online_only":false}', 0],
    ["query", "POST", "/query_assistant", '{"name":["Bob","Nobody"]}', 0],
    ["teamup", "POST", "/teamup",
     '{"sender":"Alice","agent_names":["Bob","Carol"],"team_name":"t",'
     '"retention_s":60}', 0],
    ["list", "POST", "/list_all_agents?offset=0&limit=2", None, 0],
    ["fetch", "POST", "/fetch_chat_record",
     '{"comm_id":"' + ROOM + '","limit":10}', 0],
    ["health", "POST", "/health_check", None, 0],
    ["launch", "POST", "/launch_goal",
     '{"goal":"write a haiku","team_member_names":["Bob"],'
     '"team_up_depth":1,"max_turns":4}', 0],
    ["launch-wait", "POST", "/launch_goal?wait=1",
     '{"goal":"wait for me","team_member_names":["Bob"]}', 0],
    ["goals", "GET", "/goals?limit=5", None, 0],
    ["goal", "GET", "/goals/" + GOAL, None, 0],
    ["goal-events", "GET", "/goals/" + GOAL + "/events", None, 1],
    ["goal-cancel", "POST", "/goals/" + GOAL + "/cancel", None, 0],
    ["goal-message", "POST", "/goals/" + GOAL + "/messages",
     '{"content":"make it shorter","sender":"user"}', 0],
    ["room-events", "GET", "/rooms/" + ROOM + "/events", None, 1],
    ["room-verify", "GET", "/rooms/" + ROOM + "/verify", None, 0],
    ["room-erase", "POST", "/rooms/" + ROOM + "/erase",
     '{"sender":"Alice"}', 0],
    ["room-delete", "DELETE", "/rooms/" + ROOM, None, 0],
    ["post", "POST", "/agents/Alice/messages", env_hi, 0],
    ["inbox", "GET", "/agents/Bob/inbox", None, 1],
    ["agent-delete", "DELETE", "/agents/Carol", None, 0],
    ["chatlist", "GET", "/chatlist", None, 1],
    ["audit", "GET", "/audit?count=5", None, 0],
    ["ws", "GET", "/ws/Alice", None, 1],
    ["chatlist-ws", "GET", "/chatlist_ws", None, 1],
    ["mcp-init", "POST", "/mcp",
     rpc("initialize", {"protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "seed", "version": "1"}}), 0],
    ["mcp-get", "GET", "/mcp", None, 0],
    ["mcp-delete", "DELETE", "/mcp", None, 0],
    ["a2a-send", "POST", "/a2a",
     rpc("SendMessage", {"message": {"role": "ROLE_USER", "messageId": "m1",
                                     "parts": [{"text": "write a haiku"}]}}),
     0],
    ["a2a-card", "GET", "/a2a", None, 0],
    ["card", "GET", "/.well-known/agent-card.json", None, 0],
    ["metrics", "GET", "/metrics", None, 0],
]

DEEP = "[" * 5000 + "]" * 5000

# [name, extra headers, body (None: the endpoint's own), raw after headers]
MALFORMED = [
    ["no-body", [], b"", None],
    ["half-json", [], '{"name":', None],
    ["array", [], "[]", None],
    ["null", [], "null", None],
    ["string", [], '"x"', None],
    ["deep", [], DEEP, None],
    ["huge-number", [], '{"limit":' + "9" * 400 + "}", None],
    ["bad-utf8", [], b'{"name":"\xff\xfe\xc0\x80"}', None],
    ["nul", [], b'{"name":"a\x00b"}', None],
    ["wrong-types", [],
     '{"name":[1],"goal":{},"comm_id":7,"content":false,"sender":[],'
     '"capabilities":"x","agent_names":{},"limit":"3","after":[]}', None],
    ["chunked", ["Transfer-Encoding: chunked"], None,
     b'5\r\n{"a":\r\n2\r\n1}\r\n0\r\n\r\n'],
    ["text-plain", ["Content-Type: text/plain"], '{"name":"x"}', None],
    ["mcp-version", ["MCP-Protocol-Version: 2025-03-26"],
     rpc("ping", {}), None],
    ["mcp-version-garbage", ["MCP-Protocol-Version: \x01\x7f" + "v" * 300],
     rpc("ping", {}), None],
    ["mcp-forged-session", ["Mcp-Session-Id: " + "z" * 64],
     rpc("tools/list", {}), None],
    ["a2a-version", ["A2A-Version: 9.9"],
     rpc("SendMessage", {"message": {}}), None],
    ["rpc-wrong-params", [],
     rpc("tasks/get", {"id": [], "historyLength": "x"}), None],
    ["rpc-batch", [], "[" + rpc("ping", {}) + "]", None],
    ["a2a-stream-bad", [], rpc("message/stream", {"message": {"parts": 7}}),
     None],
    ["a2a-resubscribe", ["Last-Event-ID: ~~~"],
     rpc("tasks/resubscribe", {"id": "nosuch"}), None],
    ["last-event-id-garbage", ["Last-Event-ID: ~" + "%" * 300], None, None],
    ["last-event-id-rooms",
     ["Last-Event-ID: " + ",".join(f"r{i}:1-{i}" for i in range(40))],
     None, None],
    ["last-event-id-cursor", ["Last-Event-ID: ~deadbeef.1+2"], None, None],
    ["basic-auth", ["Authorization: Basic Zm9vOmJhcg=="], "{}", None],
    ["broken-bearer", ["Authorization: Bearer a.b.c"], "{}", None],
    ["ws-half", ["Upgrade: websocket", "Connection: Upgrade",
                 "Sec-WebSocket-Version: 7"], None, None],
    ["ws-bad-key", ["Upgrade: websocket", "Connection: Upgrade",
                    "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: !!"],
     None, None],
    ["preflight", ["Origin: http://evil.example",
                   "Access-Control-Request-Method: POST"], None, None],
    ["prefer-twice", ["Prefer: wait", "Prefer: respond-async"],
     '{"goal":""}', None],
]

# the endpoints every malformation goes to (the rest get a few of them)
BODY_READERS = ["register", "retrieve", "teamup", "fetch", "launch",
                "goal-message", "room-erase", "post", "mcp-init",
                "a2a-send", "room-events", "inbox", "ws"]
FEW = ["no-body", "half-json", "wrong-types", "chunked", "broken-bearer",
       "preflight"]

HEALTH = req("GET", "/health_check")

seeds = {}


def seed(name, data):
    if isinstance(data, str):
        data = data.encode("latin-1")
    assert name not in seeds, name
    seeds[name] = data


def with_case(e, case, host="open", auth=None, close=False):
    name, method, path, good, _ = e
    cname, hdrs, body, raw = case
    if body is None and raw is None:
        body = good
    if raw is not None:
        return req(method, path, None, hdrs, host, auth, close) + raw
    return req(method, path, body, hdrs, host, auth, close)


def main():
    by_name = {e[0]: e for e in ENDPOINTS}

    for e in ENDPOINTS:
        name, method, path, good, stream = e
        seed(f"ok-{name}", req(method, path, good))
        seed(f"jwt-{name}", req(method, path, good, host="jwt",
                                auth="@@alice@@"))
        if not stream:
            seed(f"ok-{name}-pipelined", req(method, path, good) + HEALTH)

    # every malformation alone on the endpoints that read a body (the deep
    # nesting on three of them: it is 10 KB), a few on the others; the
    # few also pipelined ahead of a request
    for e in ENDPOINTS:
        for c in MALFORMED:
            if c[0] in FEW and not e[4]:
                seed(f"{e[0]}-{c[0]}-pipelined", with_case(e, c) + HEALTH)
            if c[0] == "deep" and e[0] not in ("register", "mcp-init",
                                               "post"):
                continue
            if c[0] in FEW or e[0] in BODY_READERS:
                seed(f"{e[0]}-{c[0]}", with_case(e, c))

    # the token server: no scope, the wrong agent, a forged one
    for n in ["register", "post", "fetch", "launch", "room-events", "inbox",
              "mcp-init", "a2a-send", "metrics", "agent-delete"]:
        e = by_name[n]
        seed(f"jwt-mal-{n}", req(e[1], e[2], e[3], host="jwt", auth="@@mal@@"))
        seed(f"jwt-bob-{n}", req(e[1], e[2], e[3], host="jwt", auth="@@bob@@"))
    seed("jwt-no-token", req("POST", "/register", by_name["register"][3],
                             host="jwt"))
    seed("jwt-big-body", req("POST", "/register",
                             '{"name":"Dave","desc":"' + "x" * 20000 + '"}',
                             host="jwt", auth="@@alice@@"))
    seed("jwt-body-in-file", req("POST", "/agents/Alice/messages",
                                 json.dumps({"comm_id": ROOM,
                                             "content": "y" * 3000}),
                                 host="jwt", auth="@@alice@@"))
    seed("jwt-long-header", req("GET", "/goals", None,
                                ["X-Pad: " + "p" * 3000], host="jwt",
                                auth="@@alice@@"))
    seed("jwt-access-token", ws_upgrade("/ws/Alice?access_token=@@alice@@",
                                        host="jwt")
         + ws_frame(env_hi) + ws_frame(b"\x03\xe8", opcode=8))

    # MCP with a session
    for host, sid, auth in (("open", "@@sid@@", None),
                            ("jwt", "@@jsid@@", "@@alice@@")):
        hs = [f"Mcp-Session-Id: {sid}", "MCP-Protocol-Version: 2025-06-18"]
        calls = [
            ("tools-list", rpc("tools/list", {})),
            ("resources-list", rpc("resources/list", {})),
            ("find-agents", rpc("tools/call", {
                "name": "find_agents",
                "arguments": {"capabilities": ["search the web"]}})),
            ("launch-goal", rpc("tools/call", {
                "name": "launch_goal",
                "arguments": {"goal": "plan a trip",
                              "team_member_names": ["Carol"]}})),
            ("goal-status", rpc("tools/call", {
                "name": "goal_status", "arguments": {"goal_id": GOAL}})),
            ("post-to-goal", rpc("tools/call", {
                "name": "post_to_goal",
                "arguments": {"goal_id": GOAL, "content": "hurry"}})),
            ("cancel-goal", rpc("tools/call", {
                "name": "cancel_goal", "arguments": {"goal_id": GOAL}})),
            ("read-transcript", rpc("resources/read", {
                "uri": "ioa://goals/" + GOAL + "/transcript"})),
            ("notification", json.dumps({
                "jsonrpc": "2.0", "method": "notifications/initialized"})),
            ("unknown-tool", rpc("tools/call", {"name": "nosuch",
                                                "arguments": {}})),
            ("ping", rpc("ping", {})),
        ]
        for cname, body in calls:
            seed(f"mcp-{host}-{cname}",
                 req("POST", "/mcp", body, hs, host=host, auth=auth))
        seed(f"mcp-{host}-pipelined",
             b"".join(req("POST", "/mcp", b, hs, host=host, auth=auth)
                      for _, b in calls[:4]))

    # A2A, 1.0 and 0.3
    msg = {"role": "ROLE_USER", "messageId": "m2",
           "parts": [{"text": "summarise the news"}]}
    msg03 = {"role": "user", "messageId": "m3", "kind": "message",
             "parts": [{"kind": "text", "text": "summarise the news"}]}
    for cname, body, hs in [
            ("stream", rpc("SendStreamingMessage", {"message": msg}), []),
            ("send-now", rpc("SendMessage", {
                "message": msg, "configuration": {
                    "returnImmediately": True, "historyLength": 1}}), []),
            ("send-03-now", rpc("message/send", {
                "message": msg03, "configuration": {"blocking": False}}),
             ["A2A-Version: 0.3"]),
            ("send-03", rpc("message/send", {"message": msg03}),
             ["A2A-Version: 0.3"]),
            ("stream-03", rpc("message/stream", {"message": msg03}), []),
            ("get", rpc("GetTask", {"id": GOAL, "historyLength": 2}), []),
            ("get-03", rpc("tasks/get", {"id": GOAL}), []),
            ("cancel", rpc("CancelTask", {"id": GOAL}), []),
            ("subscribe", rpc("SubscribeToTask", {"id": GOAL}), []),
            ("resubscribe", rpc("tasks/resubscribe", {"id": GOAL}),
             ["Last-Event-ID: 0-1"]),
            ("unknown", rpc("nosuch/method", {}), [])]:
        seed(f"a2a-{cname}", req("POST", "/a2a", body, hs))
        seed(f"a2a-jwt-{cname}", req("POST", "/a2a", body, hs, host="jwt",
                                     auth="@@alice@@"))

    # WebSockets: an envelope, a ping, fragments, deflate, a bad frame
    post_bob = req("POST", "/agents/Bob/messages", env_bob)
    up = ws_upgrade("/ws/Alice")
    seed("ws-envelope", up + ws_frame(env_hi) + ws_frame(b"", opcode=9)
         + ws_frame(b"\x03\xe8bye", opcode=8))
    seed("ws-fragments", up + ws_frame(env_hi[:10], fin=False)
         + ws_frame(b"ping", opcode=9)
         + ws_frame(env_hi[10:], opcode=0))
    seed("ws-resume-op", up + ws_frame(json.dumps(
        {"op": "resume", "rooms": {ROOM: "0-0"}})))
    seed("ws-token-op", ws_upgrade("/ws/Alice", host="jwt", auth="@@alice@@")
         + ws_frame(json.dumps({"op": "token", "token": "@@bob@@"})))
    deflate = ["Sec-WebSocket-Extensions: permessage-deflate; "
               "client_max_window_bits"]
    seed("ws-deflate", ws_upgrade("/ws/Alice", extra=deflate)
         + ws_frame(env_hi))
    seed("ws-deflate-compressed", ws_upgrade("/ws/Alice", extra=deflate)
         + ws_frame(env_hi, deflate=True)
         + ws_frame(json.dumps({"op": "resume", "since": "0-0"}),
                    deflate=True))
    seed("ws-deflate-pair", ws_upgrade("/ws/Alice", extra=deflate)
         + b"@@next@@" + post_bob)
    seed("ws-options", ws_upgrade("/ws/Alice?echo=0&since=0-0&resume="
                                  + ROOM + ":0-0&wait_resume=1")
         + ws_frame(env_hi))
    seed("ws-bad-frame", up + b"\x81\xff" + b"\x7f" * 8 + b"\x00" * 4)
    seed("ws-unmasked", up + b"\x81\x05hello")
    seed("ws-in-pieces", up + ws_frame(env_hi)[:7] + b"@@pause@@"
         + ws_frame(env_hi)[7:])
    seed("ws-pipelined-after-upgrade", up + ws_frame(env_hi) + HEALTH)

    # two connections: a feed or a socket that hears what the other posts
    seed("pair-room-events", req("GET", "/rooms/" + ROOM + "/events")
         + b"@@next@@" + post_bob)
    seed("pair-inbox", req("GET", "/agents/Alice/inbox",
                           headers=["Last-Event-ID: " + ROOM + ":0-0"])
         + b"@@next@@" + post_bob)
    seed("pair-chatlist", req("GET", "/chatlist") + b"@@next@@"
         + req("POST", "/teamup", by_name["teamup"][3]))
    seed("pair-ws", ws_upgrade("/ws/Alice") + b"@@next@@" + post_bob
         + b"@@next@@" + ws_upgrade("/ws/Bob") + ws_frame(env_bob))
    seed("pair-chatlist-ws", ws_upgrade("/chatlist_ws") + b"@@next@@"
         + post_bob)
    seed("pair-goal-events", req("GET", "/goals/" + GOAL + "/events")
         + b"@@next@@" + req("POST", "/goals/" + GOAL + "/cancel"))
    seed("pair-delete-room", ws_upgrade("/ws/Bob") + b"@@next@@"
         + req("GET", "/rooms/" + ROOM + "/events") + b"@@next@@"
         + req("DELETE", "/rooms/" + ROOM))
    seed("pair-delete-agent", ws_upgrade("/ws/Bob") + b"@@next@@"
         + req("GET", "/agents/Bob/inbox") + b"@@next@@"
         + req("DELETE", "/agents/Bob"))
    seed("pair-a2a-stream", req("POST", "/a2a", rpc(
        "SendStreamingMessage", {"message": msg})) + b"@@next@@"
         + req("GET", "/goals"))

    # a body in pieces, a client gone mid-request
    reg = req("POST", "/register", by_name["register"][3])
    seed("pause-body", reg[:-20] + b"@@pause@@" + reg[-20:])
    seed("pause-headers", reg[:30] + b"@@pause@@" + reg[30:])
    for e in ["register", "fetch", "launch-wait", "room-events", "inbox",
              "mcp-init", "a2a-send", "room-erase", "goal-events"]:
        e = by_name[e]
        r = req(e[1], e[2], e[3])
        seed(f"close-{e[0]}", r + b"@@close@@" + HEALTH)
        seed(f"reset-{e[0]}", r + b"@@reset@@" + HEALTH)
        seed(f"close-early-{e[0]}", r[:len(r) * 2 // 3] + b"@@close@@")
    seed("pause-then-refuse", req("POST", "/mcp", None,
                                  ["MCP-Protocol-Version: 2025-03-26",
                                   "Content-Length: 40"], ctype=None)
         + b"@@pause@@" + b'{"jsonrpc":"2.0","id":1,"method":"ping"}' + HEALTH)

    # CORS for the one origin the open server allows
    for n in ["register", "fetch", "room-events", "mcp-init"]:
        e = by_name[n]
        seed(f"cors-preflight-{n}", req("OPTIONS", e[2], None, [
            "Origin: http://example.com",
            "Access-Control-Request-Method: " + e[1],
            "Access-Control-Request-Headers: authorization, content-type"]))
        seed(f"cors-{n}", req(e[1], e[2], e[3],
                              ["Origin: http://example.com"]))

    # HTTP itself
    seed("http10", b"GET /health_check HTTP/1.0\r\n\r\n")
    seed("http09", b"GET /health_check\r\n")
    seed("expect-100", req("POST", "/register", by_name["register"][3],
                           ["Expect: 100-continue"]))
    seed("head", req("HEAD", "/goals"))
    seed("options", req("OPTIONS", "/register"))
    seed("unknown-endpoint", req("GET", "/nosuch/thing"))
    seed("encoded-path", req("GET", "/rooms/%2e%2e%2f" + ROOM + "/events"))
    seed("two-content-lengths", b"POST /register HTTP/1.1\r\nHost: open\r\n"
         b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}")

    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes "
          f"in {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
