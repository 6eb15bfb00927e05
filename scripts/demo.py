#!/usr/bin/python3
"""The `make run` demo: three agents written against the plain IoA wire
protocol join the hub, discover each other, team up and talk, while an
observer follows the room.  Everything goes through the real endpoints;
nothing here is special to the demo.

Usage: /usr/bin/python3 scripts/demo.py HOST:PORT

With IOA_DEMO_TOKENS naming a JSON file {who: token} (scripts/run.sh writes
one), every request carries the token of whoever makes it: each agent its
own, the observer an "observer" token, the user who launches the goal a
"launch" token.  Without it the hub must be in open mode (ioa_auth off).
"""

import asyncio
import json
import os
import sys
import time
import urllib.error
import urllib.request

import websockets

HUB = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7788"

AGENTS = [
    ("Planner", "Human Assistant",
     "plans projects, splits goals into tasks and writes the final summary"),
    ("Coder", "Thing Assistant",
     "writes and runs python code, unit tests and small scripts"),
    ("Researcher", "Thing Assistant",
     "searches the web and papers, reads documentation and reports facts"),
]


TOKENS = {}
if os.environ.get("IOA_DEMO_TOKENS"):
    with open(os.environ["IOA_DEMO_TOKENS"]) as f:
        TOKENS = json.load(f)


def auth(who):
    """The Authorization header of who's token, if there are tokens."""
    return {"Authorization": f"Bearer {TOKENS[who]}"} if who in TOKENS else {}


def call(path, body=None, who="user"):
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(f"http://{HUB}{path}", data=data,
                                 method="POST", headers=auth(who))
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


def show(who, text):
    print(f"  {who:>15} | {text}")


async def observer(stop):
    async with websockets.connect(f"ws://{HUB}/chatlist_ws",
                                  extra_headers=auth("observer")) as ws:
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.2)
            except asyncio.TimeoutError:
                continue
            ev = json.loads(raw)
            if ev.get("frontend_type") == "teamup":
                show("observer", f"team {ev['team_name']!r} formed: "
                                 f"{', '.join(ev['agent_names'])}")
            else:
                show("observer", f"{ev['sender']} -> {ev.get('next_speaker')}"
                                 f" [id {ev['id']}]")


async def main():
    print(f"ioa demo against {HUB}\n")
    print("1. agents register")
    for name, kind, desc in AGENTS:
        call("/register", {"name": name, "type": kind, "desc": desc},
             who=name)
        show(name, f"registered as {kind}: {desc}")

    print("\n2. agents connect over WebSocket")
    conns = {}
    for name, _, _ in AGENTS:
        conns[name] = await websockets.connect(f"ws://{HUB}/ws/{name}",
                                               extra_headers=auth(name))
        show(name, "connected")

    stop = asyncio.Event()
    obs = asyncio.create_task(observer(stop))
    await asyncio.sleep(0.3)

    print("\n3. the planner discovers who can help (BM25 over descriptions)")
    found = call("/retrieve_assistant", {
        "sender": "Planner", "online_only": True,
        "capabilities": ["write python code", "search papers"]},
        who="Planner")
    for a in found:
        show("Planner", f"found {a['name']} (score {a['score']}, "
                        f"online {a['online']})")

    print("\n4. the planner teams up")
    team = call("/teamup", {"sender": "Planner",
                            "agent_names": [a["name"] for a in found],
                            "team_name": "demo-team"}, who="Planner")
    room = team["comm_id"]
    show("Planner", f"room {room} with {', '.join(team['agent_names'])}")
    await asyncio.sleep(0.2)

    print("\n5. they talk (IoA envelopes; every member gets every message)")
    script = [
        ("Planner", ["Coder", "Researcher"], 6,
         "Goal: a tiny report on BM25. Researcher, find the formula; "
         "Coder, implement it."),
        ("Researcher", "", 7,
         "BM25: idf * tf*(k1+1) / (tf + k1*(1-b+b*dl/avgdl)), k1=1.2, "
         "b=0.75."),
        ("Coder", "", 7, "Implemented bm25(tf, df, dl) and tested it on "
                         "three documents."),
        ("Planner", "", 11, "Conclusion: BM25 explained and implemented."),
    ]
    for sender, nxt, typ, text in script:
        env = {"content": text, "comm_id": room, "next_speaker": nxt,
               "state": 1, "type": typ}
        await conns[sender].send(json.dumps(env))
        for name, ws in conns.items():
            msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
            if name == "Planner":
                show(msg["sender"], msg["content"])

    print("\n6. the transcript, from /fetch_chat_record")
    rec = call("/fetch_chat_record", {"comm_id": room}, who="Planner")[room]
    show("hub", f"{len(rec['chat_record'])} envelopes stored for "
                f"{', '.join(rec['agent_names'])}")

    await asyncio.sleep(0.3)
    stop.set()
    await obs
    for ws in conns.values():
        await ws.close()

    launch_goal()
    print("\ndemo done")


TYPES = {4: "discussion", 5: "sync task", 6: "async task", 7: "task result",
         8: "task progress", 9: "pause", 10: "conclude", 11: "conclusion"}


def wait_online(names, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            agents = call("/query_assistant", {"name": list(names)})
            if all(a["online"] for a in agents):
                return True
        except urllib.error.HTTPError:
            pass                    # not registered yet
        time.sleep(0.2)
    return False


def sse_events(stream):
    """(event, data) for each Server-Sent Event of stream, by the format's
    rules: "event:" names it ("message" when it has no name), "data:" lines
    join with newlines, a blank line ends it, ":" lines are comments.  The
    hub's goal feed sends envelopes and states unnamed, its own frames as
    "ioa" and, after 15 s without any, a "ping" whose data is not JSON."""
    event, data = "", []
    for raw in stream:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)


def follow_goal(events_url):
    """Shows the goal's feed (GET events_url) until the goal ends; returns
    its conclusion, or its error."""
    req = urllib.request.Request(f"http://{HUB}{events_url}",
                                 headers=auth("user"))
    with urllib.request.urlopen(req, timeout=60) as stream:
        for kind, data in sse_events(stream):
            if kind == "ping":
                continue
            try:
                ev = json.loads(data)
            except ValueError as err:
                sys.exit(f"the goal's event stream sent a {kind!r} event "
                         f"that is not JSON ({err}): {data[:300]!r}")
            if kind == "ioa":
                # the hub's own frame: an error, or why it closes the stream
                show("hub", data)
                if ev.get("op") == "close":
                    sys.exit("the hub closed the goal's event stream")
                continue
            if ev.get("event") == "state":
                show("goal", f"state {ev['state']}"
                             + (f" (room {ev['comm_id']})"
                                if ev.get("comm_id") else ""))
                if ev["state"] in ("concluded", "failed", "cancelled"):
                    return ev.get("conclusion") or ev.get("error")
            elif ev.get("event") == "envelope":
                e = ev["envelope"]
                nxt = e.get("next_speaker") or ""
                nxt = ", ".join(nxt) if isinstance(nxt, list) else nxt
                text = (e.get("task_conclusion") or e.get("content") or "")
                text = " ".join(text.split())
                if len(text) > 90:
                    text = text[:87] + "..."
                show(e["sender"], f"[{TYPES.get(e.get('type'), e.get('type'))}"
                                  f"{' -> ' + nxt if nxt else ''}] {text}")
    sys.exit("the goal's event stream ended before the goal did")


def launch_goal():
    """A goal end to end: the workers recruit the example agents (ioa-agent
    processes running scripts/demo_agent.py), assign the tasks, collect the
    results and conclude; we follow the goal's event stream."""
    sentence = "agents that cooperate solve harder problems"
    goal = (f'Count the words in "{sentence}". '
            f'Shout "{sentence}" in upper case. '
            f'Reverse the words of "{sentence}".')
    llm = os.environ.get("IOA_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
    print("\n7. a goal, end to end (POST /launch_goal, "
          + (f"LLM planner at {llm})" if llm else "built-in planner)"))
    if not wait_online(["Counter", "Shouter", "Reverser"]):
        print("  the example agents did not come online; see build/run/logs")
        sys.exit(1)
    g = call("/launch_goal", {"goal": goal})
    show("user", f"goal {g['goal_id']}: {goal}")
    conclusion = follow_goal(g["events_url"])
    print("\nconclusion:")
    for line in (conclusion or "(none)").splitlines():
        print(f"  {line}")


if __name__ == "__main__":
    asyncio.run(main())
