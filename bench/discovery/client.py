"""bench/discovery/client.py -- the measuring side of bench/discovery.sh.

    client.py --http PORT --redis PORT --scripts DIR --terms BIN --out FILE
              [options]

1. registers the agents of corpus.py: through nginx (POST /register,
   pipelined on keep-alive connections) or, with --register pipe, with
   register.lua straight into Redis (what the endpoint runs; much faster for
   big N);
2. marks a share of them online with presence.lua (as a hub worker does);
3. sends the queries through nginx (POST /retrieve_assistant), one request at
   a time per connection, and times each request on its own: the latency
   percentiles come from the sorted list of all of them, not from an average;
   at the same time Redis records every command in its SLOWLOG (threshold 0),
   which gives the same percentiles for the script's own run time inside
   Redis (less noisy on a shared machine: no HTTP, no scheduling of nginx or
   of this client);
4. optionally loads the index of the previous layout (the HEAD~ scripts given
   with --old-register/--old-retrieve) and runs the first queries through both
   scripts directly (EVALSHA, the same queries), for a before/after ratio;
5. writes the JSON report and prints one line.

register.lua and retrieve.lua take terms, not text: whatever goes straight
into Redis is tokenized first by --terms, build/ioa-terms, which is the hub's
own tokenizer (lib/ioa_tokenize.c) as a filter, so the index and the queries
are the ones nginx would make.  The previous scripts of step 4 still
tokenize in Lua (with the same rules) and get the texts.

Requests are built once before the clock starts.  Plain sockets: nothing
outside Debian's python3 standard library.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lib"))

import corpus  # noqa: E402
from resp import Redis  # noqa: E402
from http1 import Http  # noqa: E402

BASE = "ioa:{reg}:"      # the module's default ioa_redis_prefix + {reg}:


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    k = min(len(sorted_vals) - 1, int(round(p / 100.0 * (len(sorted_vals) - 1))))
    return sorted_vals[k]


def register_http(port, agents, conns, window):
    """POST /register for every agent, `window` requests in flight on each of
    `conns` connections (pipelined), the connections served round-robin."""
    hs = [Http(port) for _ in range(conns)]
    reqs = [Http.request("/register", {"name": n, "type": t, "desc": d,
                                       "tags": tags})
            for n, t, d, tags in agents]
    for i in range(0, len(reqs), window * conns):
        chunk = reqs[i:i + window * conns]
        parts = [chunk[k::conns] for k in range(conns)]
        for h, p in zip(hs, parts):
            h.s.sendall(b"".join(p))
        for h, p in zip(hs, parts):
            for _ in p:
                st, body = h.response()
                if st != 200:
                    raise SystemExit("register: HTTP %d %s" % (st, body[:200]))


def terms_of(binary, texts):
    """The terms of each text (joined by spaces, as the scripts take them),
    from one run of ioa-terms over all of them (NUL-terminated texts)."""
    out = subprocess.run([binary, "-0"], check=True, stdout=subprocess.PIPE,
                         input=b"".join(t.encode() + b"\0" for t in texts))
    lines = out.stdout.decode().split("\n")
    if len(lines) != len(texts) + 1:
        raise SystemExit("%s: %d lines for %d texts"
                         % (binary, len(lines) - 1, len(texts)))
    return lines[:-1]


def doc_terms(binary, agents):
    """register.lua's terms argument for each agent: the terms of the
    description, then those of each tag, as /register joins them."""
    texts = [x for _, _, d, tags in agents for x in [d] + list(tags)]
    it = iter(terms_of(binary, texts))
    return [" ".join(x for x in [next(it) for _ in range(1 + len(tags))] if x)
            for _, _, _, tags in agents]


def register_pipe(r, sha, agents, terms=None, window=512):
    """register.lua for every agent, `window` calls in flight; terms: the
    documents' terms (the current script), None for a script of the
    previous layout, which takes the texts only."""
    now = int(time.time() * 1000)
    for i in range(0, len(agents), window):
        chunk = agents[i:i + window]
        for k, (n, t, d, tags) in enumerate(chunk):
            extra = ["0", terms[i + k]] if terms is not None else []
            r.send("EVALSHA", sha, 3, BASE + "agent:" + n, BASE + "agents",
                   BASE + "stats", BASE, n, t, d, json.dumps(tags), "0",
                   now + i + k, "2024-01-01-00-00-00", *extra)
        for _ in chunk:
            rep = r.read()
            if not isinstance(rep, list):
                raise SystemExit("register.lua: %r" % (rep,))


def queries(n, n_agents, seed, vocab=3000, zipf=1.0):
    """(body, args for the direct EVALSHA, capability texts last) per query:
    mostly one capability, some requests with two or three (IoA asks for
    several at once), a quarter with online_only, the sender a registered
    agent."""
    rnd = random.Random(seed)
    phrases = list(corpus.queries(n * 2, vocab=vocab, s=zipf, seed=seed))
    out = []
    for i in range(n):
        caps = [phrases[i]]
        if rnd.random() < 0.2:
            caps += phrases[n + i:n + i + rnd.choice((1, 2))]
        online_only = rnd.random() < 0.25
        sender = "agent%06d" % rnd.randrange(n_agents)
        out.append(({"sender": sender, "capabilities": caps, "limit": 3,
                     "online_only": online_only},
                    [3, "1" if online_only else "0", sender] + caps))
    return out


class ScriptTimes:
    """The run time inside Redis of each EVALSHA of one script, from the
    SLOWLOG with a threshold of 0.  Commands run by a script are logged
    too, before the script's own entry (scripts do not interleave), so the
    newest entry after a reply is the script that produced it; poll() is
    called after each reply, outside the timed region, and empties the log
    now and then (it would otherwise hold every command of every script)."""

    def __init__(self, r, sha):
        self.r, self.sha, self.ms, self.last = r, sha, [], -1

    def start(self):
        self.r.cmd("CONFIG", "SET", "slowlog-max-len", "100000")
        self.r.cmd("SLOWLOG", "RESET")
        self.r.cmd("CONFIG", "SET", "slowlog-log-slower-than", "0")

    def poll(self):
        for e in self.r.cmd("SLOWLOG", "GET", "1"):
            args = e[3]
            if (e[0] > self.last and len(args) > 1
                    and args[0].upper() == "EVALSHA" and args[1] == self.sha):
                self.ms.append(e[2] / 1000.0)
            self.last = max(self.last, e[0])
        if len(self.ms) % 500 == 499:
            self.r.cmd("SLOWLOG", "RESET")

    def stop(self):
        self.r.cmd("CONFIG", "SET", "slowlog-log-slower-than", "10000")
        self.r.cmd("SLOWLOG", "RESET")
        return sorted(self.ms)


def summary(vals):
    vals = sorted(vals)
    return {"p50": pct(vals, 50), "p90": pct(vals, 90), "p99": pct(vals, 99),
            "p99_9": pct(vals, 99.9), "max": vals[-1] if vals else None,
            "mean": sum(vals) / len(vals) if vals else None}


def r3(d):
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}


def direct(r, sha, qs, now_ms, terms=None):
    """Each query's args through EVALSHA, timed by the client and inside
    Redis; returns both latencies (ms) and the answers.  terms: the texts'
    terms (the current script), None to send the texts (the previous one)."""
    lat, answers, st = [], [], ScriptTimes(r, sha)
    st.start()
    for _, a in qs:
        if terms is not None:
            a = a[:3] + [terms[x] for x in a[3:]]
        args = [2, BASE + "stats", BASE + "online", BASE, now_ms] + a
        t = time.perf_counter()
        answers.append(r.cmd("EVALSHA", sha, *args))
        lat.append((time.perf_counter() - t) * 1000)
        st.poll()
    return lat, st.stop(), answers


def ranking(answer, width):
    """(name, score) of each row of a retrieve.lua answer whose rows have
    `width` values."""
    return [(answer[i], answer[i + 4]) for i in range(0, len(answer), width)]


def evalsha_usec(r):
    for l in r.cmd("INFO", "commandstats").split("\r\n"):
        if l.startswith("cmdstat_evalsha:"):
            return float(l.split("usec_per_call=")[1].split(",")[0])
    return None


def used_mb(r):
    return int([l.split(":")[1] for l in r.cmd("INFO", "memory").split("\r\n")
                if l.startswith("used_memory:")][0]) / 1048576.0


def keys_mb(r, *patterns):
    """MEMORY USAGE summed over the keys matching patterns (SCAN)."""
    total = 0
    for pat in patterns:
        cur = "0"
        while True:
            cur, keys = r.cmd("SCAN", cur, "MATCH", BASE + pat, "COUNT", 1000)
            for k in keys:
                total += r.cmd("MEMORY", "USAGE", k, "SAMPLES", 0) or 0
            if cur == "0":
                break
    return total / 1048576.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", type=int, required=True)
    ap.add_argument("--redis", type=int, required=True)
    ap.add_argument("--scripts", required=True)
    ap.add_argument("--terms", required=True,
                    help="build/ioa-terms: the hub's tokenizer")
    ap.add_argument("--out", required=True)
    ap.add_argument("--agents", type=int, default=100000)
    ap.add_argument("--queries", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--conns", type=int, default=1)
    ap.add_argument("--online", type=float, default=0.2,
                    help="share of the agents marked online")
    ap.add_argument("--register", choices=("http", "pipe"), default="http")
    ap.add_argument("--old-register")
    ap.add_argument("--old-retrieve")
    ap.add_argument("--old-queries", type=int, default=30)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--vocab", type=int, default=3000,
                    help="skill words in the corpus")
    ap.add_argument("--zipf", type=float, default=1.0,
                    help="Zipf exponent of the skill words")
    o = ap.parse_args()

    r = Redis(o.redis)
    r.cmd("CONFIG", "RESETSTAT")
    script = {}
    for name in ("register", "retrieve", "presence"):
        with open(os.path.join(o.scripts, name + ".lua")) as f:
            script[name] = r.cmd("SCRIPT", "LOAD", f.read())

    # 1. registration
    agents = list(corpus.agents(o.agents, vocab=o.vocab, s=o.zipf))
    t = time.perf_counter()
    if o.register == "http":
        register_http(o.http, agents, conns=2, window=64)
    else:
        register_pipe(r, script["register"], agents,
                      doc_terms(o.terms, agents))
    register_s = time.perf_counter() - t
    register_usec = evalsha_usec(r)
    n = int(r.cmd("HGET", BASE + "stats", "n"))
    if n != o.agents:
        raise SystemExit("registered %d agents, expected %d" % (n, o.agents))

    # 2. presence, for an hour (the bench takes far less)
    rnd = random.Random(o.seed)
    online = rnd.sample(range(o.agents), int(o.agents * o.online))
    expiry = int(time.time() * 1000) + 3600 * 1000
    for i in range(0, len(online), 1000):
        r.cmd("EVALSHA", script["presence"], 1, BASE + "online", BASE,
              "bench", expiry, int(time.time() * 1000),
              *["agent%06d" % k for k in online[i:i + 1000]])

    mem_mb = used_mb(r)
    index_mb = keys_mb(r, "idx:*", "tf:*", "oidx:*", "onidx")

    # 3. queries through nginx
    qs = queries(o.queries + o.warmup, o.agents, o.seed, o.vocab, o.zipf)
    reqs = [Http.request("/retrieve_assistant", b) for b, _ in qs]
    hs = [Http(o.http) for _ in range(o.conns)]
    for k, req in enumerate(reqs[:o.warmup]):
        h = hs[k % o.conns]
        h.s.sendall(req)
        h.response()
    st = ScriptTimes(r, script["retrieve"])
    st.start()
    r.cmd("CONFIG", "RESETSTAT")
    lat, bad = [], 0
    measured = reqs[o.warmup:]
    t0 = time.perf_counter()
    if o.conns == 1:
        h = hs[0]
        for req in measured:
            t = time.perf_counter()
            h.s.sendall(req)
            status, _ = h.response()
            lat.append((time.perf_counter() - t) * 1000)
            bad += status != 200
            st.poll()
    else:
        # closed loop on every connection: one request outstanding on each
        import selectors
        sel = selectors.DefaultSelector()
        it, sent = iter(measured), {}
        for h in hs:
            req = next(it, None)
            if req is not None:
                sent[h] = time.perf_counter()
                h.s.sendall(req)
                sel.register(h.s, selectors.EVENT_READ, h)
        while sent:
            for key, _ in sel.select():
                h = key.data
                status, _ = h.response()
                lat.append((time.perf_counter() - sent.pop(h)) * 1000)
                bad += status != 200
                st.poll()
                req = next(it, None)
                if req is None:
                    sel.unregister(h.s)
                else:
                    sent[h] = time.perf_counter()
                    h.s.sendall(req)
    elapsed = time.perf_counter() - t0
    redis_ms = st.stop()
    usec_per_call = evalsha_usec(r)
    if bad:
        raise SystemExit("%d requests failed" % bad)

    report = {
        "agents": o.agents, "queries": len(lat),
        "latency_ms": r3(summary(lat)),
        "rate": round(len(lat) / elapsed, 1),
        "register_s": round(register_s, 2), "register_via": o.register,
        "redis_mem_mb": round(mem_mb, 1),
        "index_mb": round(index_mb, 1),
        "register_usec_per_call": register_usec,
        "redis_script_ms": r3(summary(redis_ms)),
        "redis_evalsha_usec_per_call": usec_per_call,
        "connections": o.conns, "online_share": o.online,
        "vocabulary": o.vocab, "zipf": o.zipf,
    }

    # 4. before/after, straight into Redis with the same arguments
    if o.old_register and o.old_retrieve and o.old_queries > 0:
        with open(o.old_register) as f:
            old_reg = r.cmd("SCRIPT", "LOAD", f.read())
        with open(o.old_retrieve) as f:
            old_ret = r.cmd("SCRIPT", "LOAD", f.read())
        # the old index (postings hashes) next to the new one: for an agent
        # that exists, the old register.lua only adds its postings
        r.cmd("CONFIG", "RESETSTAT")
        register_pipe(r, old_reg, agents)
        old_register_usec = evalsha_usec(r)
        old_index_mb = keys_mb(r, "postings:*")
        sub = qs[o.warmup:o.warmup + o.old_queries]
        caps = sorted({c for _, a in sub for c in a[3:]})
        terms = dict(zip(caps, terms_of(o.terms, caps)))
        now_ms = int(time.time() * 1000)
        new_lat, new_in, new_ans = direct(r, script["retrieve"], sub, now_ms,
                                          terms)
        old_lat, old_in, old_ans = direct(r, old_ret, sub, now_ms)
        # the same ranking: names and scores (the new script's rows also
        # carry the agent's task record, the old one's do not)
        same = sum(ranking(a, 8) == ranking(b, 7)
                   for a, b in zip(new_ans, old_ans))
        report["before_after"] = {
            "queries": len(sub), "same_answers": same,
            "old_script_ms": r3(summary(old_in)),
            "new_script_ms": r3(summary(new_in)),
            "old_client_ms": r3(summary(old_lat)),
            "new_client_ms": r3(summary(new_lat)),
            "ratio_mean": round(sum(old_in) / max(sum(new_in), 1e-9), 1),
            "ratio_p50": round(pct(old_in, 50) / max(pct(new_in, 50), 1e-3), 1),
            "old_index_mb": round(old_index_mb, 1),
            "old_register_usec_per_call": old_register_usec,
            "old_layout_mem_mb": round(mem_mb - index_mb + old_index_mb, 1),
        }

    os.makedirs(os.path.dirname(os.path.abspath(o.out)), exist_ok=True)
    with open(o.out, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")

    l, s = report["latency_ms"], report["redis_script_ms"]
    line = ("discovery: %d agents, %d queries via nginx: p50 %.2f p99 %.2f "
            "p99.9 %.2f max %.2f ms, %.0f/s; in Redis p50 %.2f p99 %.2f ms; "
            "register %.1f s (%s); redis %.0f MB"
            % (o.agents, len(lat), l["p50"], l["p99"], l["p99_9"], l["max"],
               report["rate"], s["p50"], s["p99"], register_s, o.register,
               mem_mb))
    if "before_after" in report:
        ba = report["before_after"]
        line += ("; old script %.1f ms vs new %.2f ms mean in Redis (x%.0f, "
                 "%d/%d same answers)"
                 % (ba["old_script_ms"]["mean"], ba["new_script_ms"]["mean"],
                    ba["ratio_mean"], ba["same_answers"], ba["queries"]))
    print(line)


if __name__ == "__main__":
    main()
