"""t/260 TEST 1: two SDK agents with tokens register, team up and talk.

Usage: room_traffic.py HUB TOKEN_ANN TOKEN_BEN BAD_TOKEN
Prints one JSON object: what each agent received, and the errors seen.
"""

import asyncio
import json
import sys

import ioa

hub, tok_ann, tok_ben, bad = sys.argv[1:5]


async def until(conn, n):
    got = []
    while len(got) < n:
        env = await asyncio.wait_for(conn.recv(), 10)
        got.append(env)
    return got


async def main():
    out = {}
    ann, ben = ioa.Client(hub, tok_ann), ioa.Client(hub, tok_ben)
    out["register"] = [ann.register("Ann", "writes notes")["status"],
                       ben.register("Ben", "reads notes")["status"]]
    cid = ann.teamup("Ann", ["Ben"], "pair")
    out["comm_id"] = cid
    ca = ioa.Connection(hub, "Ann", tok_ann)
    cb = ioa.Connection(hub, "Ben", tok_ben)
    await ca.connect()
    await cb.connect()
    await ca.send(ioa.Envelope(comm_id=cid, content="hello Ben",
                               extra={"mood": "cheerful"}))
    first = await until(cb, 1)
    posted = ben.post("Ben", {"comm_id": cid, "content": "hello Ann",
                              "type": int(ioa.MessageType.INFORM_TASK_PROGRESS)})
    out["posted_id"] = posted
    got_a = await until(ca, 2)
    got_b = first + await until(cb, 1)
    out["ann_got"] = [e.to_dict() for e in got_a]
    out["ben_got"] = [e.to_dict() for e in got_b]
    out["types"] = [type(e.type).__name__ for e in got_b]
    # another agent's name with Ben's token: forbidden, over HTTP and WS
    errs = {}
    try:
        ben.post("Ann", {"comm_id": cid, "content": "as Ann"})
    except ioa.AuthError as e:
        errs["post_as_other"] = [e.status, e.code, e.field]
    try:
        await ioa.Connection(hub, "Ann", tok_ben).connect()
    except ioa.AuthError as e:
        errs["ws_as_other"] = [e.status, e.code]
    try:
        await ioa.Connection(hub, "Ben", bad).connect()
    except ioa.AuthError as e:
        errs["ws_bad_token"] = [e.status, e.code, e.message]
    try:
        ioa.Client(hub, bad).register("Ben", "x")
    except ioa.AuthError as e:
        errs["http_bad_token"] = [e.status, e.code, str(e)]
    try:
        ann.query("Nobody")
    except ioa.HubError as e:
        errs["unknown_agent"] = [e.status, e.code, e.field,
                                 int(isinstance(e, ioa.AuthError))]
    out["errors"] = errs
    out["duplicates"] = ca.duplicates + cb.duplicates
    await ca.close()
    await cb.close()
    print(json.dumps(out))


asyncio.run(main())
