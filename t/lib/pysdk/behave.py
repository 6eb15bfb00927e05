"""t/260 TESTS 5-8: an SDK agent whose task handler behaves as told.

Usage: behave.py HUB NAME MODE [TASK_TIMEOUT]
MODE: "count" (counts the quoted words of the task, as counter.py),
"turn" (count, and answers DISCUSSION turns with @agent.turn), "slow"
(an async handler that sleeps 30 s), "raise" (a handler that raises
ValueError), "turnfail" (count, and a turn handler that raises).  Prints one JSON line per task or turn the handler got:
{"kind","task_id","sync","assigner","comm_id","desc"}.  Serves until
SIGTERM.
"""

import asyncio
import json
import logging
import re
import signal
import sys

import ioa

hub, name, mode = sys.argv[1:4]
timeout = float(sys.argv[4]) if len(sys.argv) > 4 else None
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

agent = ioa.Agent(name, "counts the words of a text", hub=hub,
                  tags=["text"], task_timeout=timeout)


def note(kind, task):
    print(json.dumps({"kind": kind, "task_id": task.task_id,
                      "sync": task.sync, "assigner": task.assigner,
                      "comm_id": task.comm_id, "desc": task.desc}),
          flush=True)


@agent.task
async def work(task: ioa.Task):
    note("task", task)
    if mode == "slow":
        await asyncio.sleep(30)
        return "too late"
    if mode == "raise":
        raise ValueError("no words in this text")
    texts = re.findall(r'"([^"]+)"', task.desc) or [task.desc]
    return "; ".join(f"{t!r} has {len(t.split())} words" for t in texts)


if mode in ("turn", "turnfail"):
    @agent.turn
    def turn(task: ioa.Task) -> str:
        note("turn", task)
        if mode == "turnfail":
            raise RuntimeError("cannot discuss now")
        return f"{name} takes the turn: the plan suits me"


agent.run()
