"""t/260 TEST 3: an agent written with the SDK that counts words.

Usage: counter.py HUB NAME
Serves tasks until SIGTERM.
"""

import logging
import re
import signal
import sys

import ioa

hub, name = sys.argv[1:3]
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

agent = ioa.Agent(name, "counts the words of a text", hub=hub,
                  tags=["text"])


@agent.task
async def count(task: ioa.Task) -> ioa.Result:
    texts = re.findall(r'"([^"]+)"', task.desc) or [task.desc]
    return ioa.Result("; ".join(f"{t!r} has {len(t.split())} words"
                                for t in texts))


agent.run()
