"""bench/discovery/bodies.py -- the request bodies of bench/discovery-load.sh,
one JSON object a line, for ioa-bench --replay (which POSTs them as they
are, so nothing is built while the clock runs).

    bodies.py register --agents N [--from K] [--split 2] OUT_PREFIX
        POST /register bodies of agents K..N-1 of corpus.py (the same
        agents bench/discovery.sh registers), dealt round-robin into
        OUT_PREFIX.0 .. OUT_PREFIX.<split-1> (one file per hub, so that
        agents arrive through every instance)
    bodies.py queries --agents N --queries Q OUT
        POST /retrieve_assistant bodies: one capability each, 1 to 3 skill
        words of the same Zipf law (a glue word in half of them, which the
        tokenizer drops), the sender a registered agent (left out of its
        own answer), limit 3 (IoA's top-k), online_only false

Same seeds, same files: a run before a change and one after it send the
same requests.
"""

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corpus  # noqa: E402


def register(o):
    outs = [open("%s.%d" % (o.out, k), "w") for k in range(o.split)]
    for i, (n, t, d, tags) in enumerate(corpus.agents(o.agents, vocab=o.vocab,
                                                      s=o.zipf)):
        if i >= o.start:
            outs[i % o.split].write(json.dumps(
                {"name": n, "type": t, "desc": d, "tags": tags},
                separators=(",", ":")) + "\n")
    for f in outs:
        f.close()


def queries(o):
    rnd = random.Random(o.seed)
    with open(o.out, "w") as f:
        for q in corpus.queries(o.queries, vocab=o.vocab, s=o.zipf,
                                seed=o.seed, lengths=(1, 2, 3)):
            f.write(json.dumps({"sender": "agent%06d" % rnd.randrange(o.agents),
                                "capabilities": [q], "limit": 3,
                                "online_only": False},
                               separators=(",", ":")) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("register", "queries"))
    ap.add_argument("out")
    ap.add_argument("--agents", type=int, required=True)
    ap.add_argument("--from", dest="start", type=int, default=0)
    ap.add_argument("--split", type=int, default=1)
    ap.add_argument("--queries", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--vocab", type=int, default=3000)
    ap.add_argument("--zipf", type=float, default=1.0)
    o = ap.parse_args()
    if o.what == "register":
        register(o)
    else:
        queries(o)


if __name__ == "__main__":
    main()
