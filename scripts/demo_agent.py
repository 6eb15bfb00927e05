#!/usr/bin/python3
"""A task program for the demo's example agents, run by ioa-agent's exec
adapter: the task arrives on stdin (IoA's markdown), the result goes to
stdout.  It works on each quoted text in the task description (a task may
join several clauses), or on the whole description when nothing is quoted.

Usage: demo_agent.py count|shout|reverse|flaky-count

flaky-count counts like count but fails every other task (its own count
in $IOA_DEMO_STATE, default /tmp/ioa-demo-flaky-<uid>): an unreliable
agent for bench/goal.sh's suite, whose parts the coordinator re-routes.
"""

import os
import re
import sys

mode = sys.argv[1]
task = sys.stdin.read()
desc = task.split("## Task Description", 1)[-1]
# what earlier steps or tries produced is context, not this task's text
desc = re.split(r"\n\n?(?:Results so far:|What you reported so far)", desc)[0]
# one text per quoted string (a task may join several clauses), else all
texts = re.findall(r'"([^"]+)"', desc) or [desc.strip()]

if mode == "flaky-count":
    state = os.environ.get("IOA_DEMO_STATE") or f"/tmp/ioa-demo-flaky-{os.getuid()}"
    try:
        n = int(open(state).read() or 0)
    except (OSError, ValueError):
        n = 0
    with open(state, "w") as f:
        f.write(str(n + 1))
    if n % 2 == 0:
        sys.exit("flaky: this time it did not work")
    mode = "count"

if mode == "count":
    print("; ".join(f'"{t}" has {len(t.split())} words' for t in texts))
elif mode == "shout":
    print(" ".join(t.upper() + "!" for t in texts))
elif mode == "reverse":
    print("; ".join(" ".join(reversed(t.split())) for t in texts))
else:
    sys.exit(f"unknown mode {mode}")
