#!/usr/bin/python3
"""bench/goal/scripted_llm.py -- a scripted model for the goal suite: an
OpenAI-compatible chat completions endpoint whose answers are written in
bench/goal/suite.json, so the suite can score the worker's LLM path (every
decision one structured call, checked before it is used) with answers known
in advance instead of a real model's noise.

    scripted_llm.py --suite suite.json --port PORT [--delay-ms N]
    scripted_llm.py --port PORT --delay-ms N      (no suite: every answer {})

serves POST /v1/chat/completions and GET /stats (the calls per kind).
--delay-ms makes every answer wait that long (a model that thinks; each
request has a thread of its own, so the waits overlap as a server's do).
Without a suite every answer is {}, which the worker checks and replaces
with the built-in planner's decision: each decision still waits on the
model (bench/concurrent.sh).  The
worker asks four kinds of question (workers/worker/llm_planner.c), told
apart by their system prompt; the goal is the user prompt's "Goal:" line:

  team        team_up with the agents of the goal's script ("llm.tasks"),
              none when the script has no task (nobody can do the goal)
  plan        the script's tasks ([agent, task_desc]), its mode (parallel
              unless "sequence"), and "unassigned" ([part, why]): the parts
              the model says nobody can do
  review      a fixed policy, the same for every goal: a part that failed,
              timed out or was done only in part goes to the first agent
              the worker lists as able to take it (the schema's enum);
              nothing left to try: conclude
  conclusion  the answer built from the results the prompt lists, and what
              is missing; the worker puts its own account after it

Only the Python standard library.
"""

import argparse
import http.server
import json
import re
import socket
import sys
import threading
import time

PART = re.compile(r"^(\d+)\. (.*)\n   (.*)$", re.M)
RESULT = re.compile(r"^- ([^,]+), task \"(.*)\" \((\w+)\): (.*)$", re.M)


class Script:
    def __init__(self, path):
        self.goals = {}
        for g in (json.load(open(path))["goals"] if path else []):
            self.goals[g["goal"]] = g.get("llm", {})
        self.calls = {}
        self.lock = threading.Lock()

    def count(self, kind):
        with self.lock:
            self.calls[kind] = self.calls.get(kind, 0) + 1

    def script_of(self, user):
        m = re.search(r"^Goal: (.*)$", user, re.M)
        return self.goals.get(m.group(1) if m else "", {})

    def answer(self, req):
        msgs = req.get("messages") or [{}, {}]
        system = msgs[0].get("content", "")
        user = msgs[-1].get("content", "")
        script = self.script_of(user)

        if "Form a team" in system:
            self.count("team")
            names = sorted({t[0] for t in script.get("tasks", [])})
            return {"tool": "team_up", "queries": [], "team_members": names}

        if "Split the goal into tasks" in system:
            self.count("plan")
            return {
                "discussion": "Each of you takes the part that fits you.",
                "mode": script.get("mode", "parallel"),
                "tasks": [{"agent": a, "task_desc": d}
                          for a, d in script.get("tasks", [])],
                "unassigned": [{"part": p, "why": w}
                               for p, w in script.get("unassigned", [])],
            }

        if "A round of tasks has ended" in system:
            self.count("review")
            return self.review(req, user)

        if "write the conclusion" in system:
            self.count("conclusion")
            return self.conclusion(user)

        self.count("other")
        return {}

    def review(self, req, user):
        schema = (((req.get("response_format") or {}).get("json_schema")
                   or {}).get("schema") or {})
        items = (schema.get("properties", {}).get("tasks", {})
                 .get("items", {}).get("properties", {}))
        agents = items.get("agent", {}).get("enum", [])
        stand = user.split("Where the parts stand:", 1)[-1]
        stand = stand.split("\n\nAgents who can take tasks:", 1)[0]
        tasks = []
        for num, text, line in PART.findall(stand):
            if not agents:
                break
            if re.match(r"Not done: \S.* (failed|timed out)", line) \
                    or line.startswith("Partly done"):
                tasks.append({"part": int(num), "agent": agents[0],
                              "task_desc": text})
        if tasks:
            return {"decision": "another_round", "tasks": tasks,
                    "reason": f"part {tasks[0]['part']} is not done; "
                              f"{agents[0]} can take it"}
        return {"decision": "conclude", "tasks": [],
                "reason": "nothing more can be done"}

    def conclusion(self, user):
        done, missing, got = [], [], set()
        results = RESULT.findall(user)
        for agent, task, status, result in results:
            if status == "completed":
                done.append(result)
                got.add(task)
        for agent, task, status, result in results:
            if status != "completed" and task not in got:
                missing.append(f"{task} ({agent}: {status})")
        text = "The team's answer: " + ("; ".join(done) if done else "none")
        if missing:
            text += ". Not done: " + "; ".join(missing)
        return {"conclusion": text + "."}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay-ms", type=int, default=0)
    o = ap.parse_args()
    script = Script(o.suite)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            # the headers and the body are two writes: without this the
            # body waits for the client's delayed ACK (40 ms a call)
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def reply(self, status, doc):
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/stats":
                with script.lock:
                    self.reply(200, dict(script.calls))
            else:
                self.reply(404, {"error": {"message": "not found"}})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            try:
                req = json.loads(self.rfile.read(n))
            except ValueError:
                self.reply(400, {"error": {"message": "not JSON"}})
                return
            if o.delay_ms:
                time.sleep(o.delay_ms / 1000.0)
            content = json.dumps(script.answer(req) if o.suite else {})
            self.reply(200, {
                "id": "chatcmpl-scripted", "object": "chat.completion",
                "model": "scripted",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant",
                                         "content": content}}],
                "usage": {"prompt_tokens": len(json.dumps(req)) // 4,
                          "completion_tokens": len(content) // 4,
                          "total_tokens": (len(json.dumps(req))
                                           + len(content)) // 4},
            })

        def log_message(self, fmt, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", o.port), Handler)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
