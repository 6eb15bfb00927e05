"""t/260 TEST 2: an SDK connection that follows its rooms across outages.

Usage: follow.py HUB NAME ROOMS
Prints "connected", then one line per envelope received ("<comm_id> <id>
<content>"), until ROOMS envelopes whose content is "the end" came (one
per room: the hub keeps each room's order, not an order across rooms);
then one JSON line with the connection's counters.
"""

import asyncio
import json
import logging
import sys

import ioa

hub, name, rooms = sys.argv[1], sys.argv[2], int(sys.argv[3])
logging.basicConfig(level=logging.INFO, stream=sys.stderr)


async def main(rooms=rooms):
    conn = ioa.Connection(hub, name, backoff_max=1.0)
    await conn.connect()
    print("connected", flush=True)
    async for env in conn:
        print(env.comm_id, env.id, env.content, flush=True)
        if env.content == "the end":
            rooms -= 1
            if rooms == 0:
                break
    print(json.dumps({"connects": conn.connects,
                      "duplicates": conn.duplicates}), flush=True)
    await conn.close()


asyncio.run(main())
