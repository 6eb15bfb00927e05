"""bench/lib/ioa_envelopes.py -- IoA envelopes as agents write them, for
measuring compression (bench/deflate.py) and for t/300-ws-deflate.t.

What a compressor sees decides what it saves, so the text is not made up
from a short word list (that compresses far better than anything a model
writes): prose comes from the paragraphs of the licence texts every Debian
has (/usr/share/common-licenses) and the docstrings of Python's standard
library, code from the standard library's functions.  An envelope carries
IoA's AgentMessage fields in declaration order (see the IoA protocol
notes): a sender, the room's comm_id, next_speaker, the enums as integers,
the goal and team on the first messages of a room, a task id, description
and abstract on assignments and results, the result text on results.

    env = Envelopes(seed=1, comm_id="9f...", members=["Alice", "Bob"])
    text = env.make("Alice", 2048)     # JSON text of about 2048 bytes

The same seed gives the same envelopes, so two runs compare like with like.
"""

import ast
import glob
import json
import os
import random
import sys

LICENSES = "/usr/share/common-licenses"

# CommunicationType values an agent sends in a conversation
DISCUSSION, SYNC_TASK, ASYNC_TASK, RESULT, PROGRESS = 4, 5, 6, 7, 8

OPENINGS = [
    "I have looked into this and here is what I found.",
    "Thanks, I will take this part of the task.",
    "Here is the result of the subtask you assigned to me.",
    "Before we go on, a few points about the plan.",
    "Progress update on the task:",
    "I reviewed the draft; my comments follow.",
    "The analysis is done. Summary first, details after.",
]


def _paragraphs():
    paras = []
    for path in sorted(glob.glob(os.path.join(LICENSES, "*"))):
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for p in text.split("\n\n"):
            p = " ".join(p.split())
            if len(p) >= 120:
                paras.append(p)
    return paras


def _stdlib_files():
    d = os.path.dirname(os.__file__)
    return sorted(glob.glob(os.path.join(d, "*.py")))[:80]


def _docstrings_and_code():
    docs, code = [], []
    for path in _stdlib_files():
        try:
            with open(path, encoding="utf-8") as f:
                src = f.read()
            tree = ast.parse(src)
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = src.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(node)
            if doc and len(doc) >= 120:
                docs.append(" ".join(doc.split()))
            if isinstance(node, ast.FunctionDef) and node.end_lineno:
                body = lines[node.lineno - 1:node.end_lineno]
                if 6 <= len(body) <= 40:
                    code.append("\n".join(body))
    return docs, code


class Envelopes:
    _cache = None

    def __init__(self, seed, comm_id, members, goal=None):
        if Envelopes._cache is None:
            docs, code = _docstrings_and_code()
            Envelopes._cache = (_paragraphs() + docs, code)
        self.prose, self.code = Envelopes._cache
        if not self.prose or not self.code:
            sys.exit("ioa_envelopes: no text found under %s and %s"
                     % (LICENSES, os.path.dirname(os.__file__)))
        self.rnd = random.Random(seed)
        self.comm_id = comm_id
        self.members = list(members)
        self.goal = goal or ("Write a short technical report on the "
                             "licensing terms of our dependencies, with a "
                             "script that checks each package.")
        self.n = 0

    def _hex(self):
        return "%032x" % self.rnd.getrandbits(128)

    def _text(self, size):
        r = self.rnd
        out = [r.choice(OPENINGS)]
        while sum(len(s) + 2 for s in out) < size:
            if r.random() < 0.3:
                out.append("```python\n" + r.choice(self.code) + "\n```")
            else:
                out.append(r.choice(self.prose))
        return "\n\n".join(out)

    def make(self, sender, size):
        """JSON text of an envelope from sender, about size bytes (at least
        the fixed fields: a few hundred bytes)."""
        r = self.rnd
        self.n += 1
        others = [m for m in self.members if m != sender] or [sender]
        kind = r.choice([DISCUSSION, SYNC_TASK, ASYNC_TASK, RESULT, PROGRESS])
        first = self.n <= 2
        env = {
            "content": "",
            "sender": sender,
            "comm_id": self.comm_id,
            "next_speaker": [r.choice(others)],
            "state": 1,
            "type": kind,
            "proposal_id": "",
            "goal": self.goal if first else None,
            "team_members": ([{"name": m, "type": "Human Assistant",
                               "desc": "%s, an assistant of the team" % m}
                              for m in self.members] if first else None),
            "team_up_depth": 1 if first else None,
            "task_id": self._hex() if kind != DISCUSSION else "",
            "task_desc": "",
            "task_conclusion": "",
            "task_abstract": "",
            "triggers": [],
            "updated_plan": "",
            "is_collaborative_planning_enabled": False,
            "max_turns": 20,
        }
        if kind in (SYNC_TASK, ASYNC_TASK):
            env["task_desc"] = self._text(200)[:400]
            env["task_abstract"] = r.choice(self.prose)[:60]
        base = len(json.dumps(env, ensure_ascii=False, separators=(",", ":")))
        room = max(size - base, 40)
        if kind == RESULT:
            env["task_abstract"] = r.choice(self.prose)[:60]
            base = len(json.dumps(env, ensure_ascii=False, separators=(",", ":")))
            room = max(size - base, 80)
            env["content"] = self._text(room // 4)[:room // 4]
            env["task_conclusion"] = self._text(room)[:room - room // 4]
        else:
            env["content"] = self._text(room)[:room]
        # escapes (newlines, quotes) made it longer: trim the long field
        field = "task_conclusion" if kind == RESULT else "content"
        text = json.dumps(env, ensure_ascii=False, separators=(",", ":"))
        while len(text) > size and len(env[field]) > 40:
            env[field] = env[field][:len(env[field]) - (len(text) - size)]
            text = json.dumps(env, ensure_ascii=False, separators=(",", ":"))
        return text
