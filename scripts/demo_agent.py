#!/usr/bin/python3
"""A task program for the demo's example agents, run by ioa-agent's exec
adapter: the task arrives on stdin (IoA's markdown), the result goes to
stdout.  It works on the quoted text in the task description.

Usage: demo_agent.py count|shout|reverse
"""

import re
import sys

mode = sys.argv[1]
task = sys.stdin.read()
desc = task.split("## Task Description", 1)[-1]
m = re.search(r'"([^"]+)"', desc)
text = m.group(1) if m else desc.strip()

if mode == "count":
    print(f'"{text}" has {len(text.split())} words')
elif mode == "shout":
    print(text.upper() + "!")
elif mode == "reverse":
    print(" ".join(reversed(text.split())))
else:
    sys.exit(f"unknown mode {mode}")
