"""bench/discovery/summary.py -- bench/discovery-load.sh's report: reads
what the run left in its directory (ioa-bench's JSON objects, the Redis
INFO cpu at both ends of a window, probe.py's answers), writes one JSON
object and prints one line per part against issue 13's targets.

    summary.py --run DIR --out FILE [key=value ...]   (the run's settings)

The JSON (null where a part did not run, or where the index is absent):

  params          the settings given on the command line
  registration    seconds (wall, both instances at once), agents_per_s,
                  per instance: answer_rate and p99_ms of POST /register;
                  million: the same for the DLOAD_MILLION registrations
  a               p50_ms, p99_ms, p99_9_ms, max_ms, qps (answers/s in the
                  window), client_cpu_pct (ioa-bench's own), headers (the
                  X-Ioa-Discovery tally), errors
  b               redis_us_per_query (INFO cpu used_cpu_sys + used_cpu_user
                  over the window / answers), nginx_us_per_query (the
                  instance's processes from /proc, over the window / answers),
                  redis_cpu_pct, nginx_cpu_pct
  c               alone, with: per condition the runs (p50_us, p99_us,
                  publish_rate, lost, errors, generator cpu) and
                  p50_us/p99_us as {median, min, max}; ratio_p50, ratio_p99
                  (median with / median alone), pair_ratios_p50/_p99 (run i
                  with / run i alone: the spread); discovery: each run's
                  open-loop figures (answer_rate, p50_ms, p99_ms, late);
                  each rooms run also has redis_cpu_pct and nginx_cpu_pct
  d               qps_a, qps_b, qps_total, ratio (total / a's qps),
                  p99_ms per instance, redis_cpu_pct, same (probe.py:
                  queries, same, same_first_try, seconds_to_agree,
                  probes found through the other instance, probe_max_s)
  e               startup (probe.py: first_answer_s, first_index_s, ended_by,
                  headers_seen, gauges, bytes_per_agent) at params.agents;
                  million: the same at params.million_agents
  targets         per target: value, target, met (null when not measured)
  runs            every ioa-bench JSON of the run by its name (a, d-A, d-B,
                  c-alone-1, c-with-1, c-disc-1, ..., register-A, ...)
"""

import argparse
import json
import os
import statistics


def load(run, name):
    try:
        with open(os.path.join(run, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def text(run, name):
    try:
        with open(os.path.join(run, name)) as f:
            return f.read()
    except OSError:
        return None


def redis_cpu(run, name):
    """used_cpu_sys + used_cpu_user at the window's end minus its start"""
    vals = []
    for end in ("start", "stop"):
        t = text(run, "%s-cpu.%s" % (name, end))
        if t is None:
            return None
        kv = dict(line.split(":", 1) for line in t.splitlines() if ":" in line)
        vals.append(float(kv["used_cpu_sys"]) + float(kv["used_cpu_user"]))
    return vals[1] - vals[0]


def ms(d, key):
    return round(d["latency_us"][key] / 1000.0, 3)


def cpu_seconds(d):
    """the sampled server processes' CPU over the window, in seconds"""
    s = d["server"]
    return s.get("cpu_pct", 0) / 100.0 * d["duration_s"]


def replay_figures(d):
    if d is None:
        return None
    return {"p50_ms": ms(d, "p50"), "p99_ms": ms(d, "p99"),
            "p99_9_ms": ms(d, "p99_9"), "max_ms": ms(d, "max"),
            "qps": d["answer_rate"], "answered": d["answered"],
            "client_cpu_pct": d["generator"]["cpu_pct"],
            "late": d["generator"]["late"] if d["params"]["rate"] else None,
            "headers": d["tally"], "errors": d["errors"]["total"],
            "first_error": d["errors"]["first"],
            "interrupted": d["interrupted"]}


def registration(run, name, agents):
    secs = text(run, name + ".seconds")
    per = {x: load(run, "%s-%s.json" % (name, x)) for x in ("A", "B")}
    if secs is None or None in per.values():
        return None
    secs = float(secs)
    return {"seconds": secs, "agents": agents,
            "agents_per_s": round(agents / secs, 1),
            "instances": {x: {"answer_rate": d["answer_rate"],
                              "p99_ms": ms(d, "p99"),
                              "errors": d["errors"]["total"]}
                          for x, d in per.items()}}


def part_b(run):
    d = load(run, "a.json")
    cpu = redis_cpu(run, "a")
    if d is None or not d["answered"]:
        return None
    n = d["answered"]
    return {"redis_us_per_query": round(cpu * 1e6 / n, 2)
            if cpu is not None else None,
            "redis_cpu_pct": round(cpu / d["duration_s"] * 100, 1)
            if cpu is not None else None,
            "nginx_us_per_query": round(cpu_seconds(d) * 1e6 / n, 2),
            "nginx_cpu_pct": d["server"].get("cpu_pct")}


def proc_cpu(d, name):
    """the CPU % of the sampled server processes called name"""
    ps = [p for p in d["server"]["processes"] if p.get("name") == name]
    return round(sum(p["cpu_pct"] for p in ps), 1) if ps else None


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)} \
        if xs else None


def part_c(run, repeats):
    runs = {"alone": [], "with": []}
    for i in range(1, repeats + 1):
        for cond in runs:
            d = load(run, "c-%s-%d.json" % (cond, i))
            runs[cond].append(None if d is None else {
                "p50_us": d["latency_us"]["p50"],
                "p99_us": d["latency_us"]["p99"],
                "publish_rate": d["publish_rate"],
                "lost": d["integrity"]["lost"],
                "errors": d["errors"]["total"],
                "generator_cpu_pct": d["generator"]["cpu_pct"],
                "max_send_lag_us": d["generator"]["max_send_lag_us"],
                "redis_cpu_pct": proc_cpu(d, "redis-server"),
                "nginx_cpu_pct": proc_cpu(d, "nginx")})
    if not any(runs["alone"]) or not any(runs["with"]):
        return None
    res = {}
    for cond, rs in runs.items():
        ok = [r for r in rs if r]
        res[cond] = {"runs": rs,
                     "p50_us": spread([r["p50_us"] for r in ok]),
                     "p99_us": spread([r["p99_us"] for r in ok])}
    for p in ("p50_us", "p99_us"):
        key = p.split("_")[0]
        res["ratio_" + key] = round(res["with"][p]["median"]
                                    / res["alone"][p]["median"], 2)
        pairs = [w[p] / a[p] for a, w in zip(runs["alone"], runs["with"])
                 if a and w]
        res["pair_ratios_" + key] = [round(x, 2) for x in pairs]
    res["discovery"] = [replay_figures(load(run, "c-disc-%d.json" % i))
                        for i in range(1, repeats + 1)]
    return res


def part_d(run, a):
    da, db = load(run, "d-A.json"), load(run, "d-B.json")
    res = {"same": load(run, "same.json")}
    if da and db:
        cpu = redis_cpu(run, "d")
        total = da["answer_rate"] + db["answer_rate"]
        res.update({"qps_a": da["answer_rate"], "qps_b": db["answer_rate"],
                    "qps_total": round(total, 1),
                    "ratio": round(total / a["qps"], 2)
                    if a and a["qps"] else None,
                    "p99_ms": {"A": ms(da, "p99"), "B": ms(db, "p99")},
                    "client_cpu_pct": {"A": da["generator"]["cpu_pct"],
                                       "B": db["generator"]["cpu_pct"]},
                    "redis_cpu_pct": round(cpu / da["duration_s"] * 100, 1)
                    if cpu is not None else None,
                    "errors": da["errors"]["total"] + db["errors"]["total"]})
    return res


def target(value, goal, met):
    return {"value": value, "target": goal,
            "met": None if value is None else met(value)}


def targets(a, b, c, d):
    v = lambda part, key: part.get(key) if part else None  # noqa: E731
    return {
        "a_p99_ms": target(v(a, "p99_ms"), "<= 2", lambda x: x <= 2),
        "a_qps": target(v(a, "qps"), ">= 5000", lambda x: x >= 5000),
        # "close to zero": 1% of what ranking in Redis costs (~1 ms)
        "b_redis_us_per_query": target(v(b, "redis_us_per_query"),
                                       "~0 (<= 10)", lambda x: x <= 10),
        "c_ratio_p50": target(v(c, "ratio_p50"), "< 1.3", lambda x: x < 1.3),
        "c_ratio_p99": target(v(c, "ratio_p99"), "< 1.3", lambda x: x < 1.3),
        # "roughly 2x"
        "d_ratio": target(v(d, "ratio"), "~2 (>= 1.8)", lambda x: x >= 1.8),
    }


def f(v, fmt="%.2f"):
    return "null" if v is None else fmt % v


def mark(t):
    return {True: "met", False: "NOT met", None: "not measured"}[t["met"]]


def lines(res):
    p, a, b, c, d, e, t = (res[k] for k in ("params", "a", "b", "c", "d", "e",
                                             "targets"))
    out = []
    if a:
        out.append(
            "(a) saturation, %s closed-loop clients on 1 instance (%s "
            "worker(s)), %s agents: p50 %s ms, p99 %s ms (target <= 2: %sx, "
            "%s), %s queries/s (target >= 5000: %sx, %s); client cpu %s%%; "
            "X-Ioa-Discovery %s"
            % (p["connections"], p["nginx_workers"], p["agents"],
               f(a["p50_ms"]), f(a["p99_ms"]), f(a["p99_ms"] / 2.0),
               mark(t["a_p99_ms"]), f(a["qps"], "%.0f"),
               f(a["qps"] / 5000.0), mark(t["a_qps"]),
               f(a["client_cpu_pct"], "%.1f"),
               json.dumps((a["headers"] or {}).get("values") or "absent")))
    if b:
        out.append(
            "(b) CPU per query: Redis %s us (target ~0: %s; Redis at %s%% of "
            "a core), nginx processes %s us (%s%% of a core)"
            % (f(b["redis_us_per_query"], "%.1f"),
               mark(t["b_redis_us_per_query"]), f(b["redis_cpu_pct"], "%.0f"),
               f(b["nginx_us_per_query"], "%.1f"),
               f(b["nginx_cpu_pct"], "%.0f")))
    if c:
        disc = [x for x in c["discovery"] if x]
        out.append(
            "(c) envelopes at %s/s, %d runs each: p50 alone %s ms [%s-%s], "
            "with discovery %s ms [%s-%s] -> %sx (target < 1.3: %s); p99 "
            "alone %s ms [%s-%s], with %s ms [%s-%s] -> %sx (target < 1.3: "
            "%s); discovery beside them %s queries/s of %s, p99 %s ms"
            % (p["posts_per_s"], p["repeats"],
               *(f(c["alone"]["p50_us"][k] / 1e3) for k in
                 ("median", "min", "max")),
               *(f(c["with"]["p50_us"][k] / 1e3) for k in
                 ("median", "min", "max")),
               f(c["ratio_p50"]), mark(t["c_ratio_p50"]),
               *(f(c["alone"]["p99_us"][k] / 1e3) for k in
                 ("median", "min", "max")),
               *(f(c["with"]["p99_us"][k] / 1e3) for k in
                 ("median", "min", "max")),
               f(c["ratio_p99"]), mark(t["c_ratio_p99"]),
               "/".join(f(x["qps"], "%.0f") for x in disc) or "null",
               p["open_rate"],
               "/".join(f(x["p99_ms"]) for x in disc) or "null"))
    if d:
        s = d.get("same") or {}
        out.append(
            "(d) scale-out: 2 instances %s queries/s (A %s + B %s) vs 1 "
            "instance %s -> %sx (target ~2: %s); same top results %s/%s "
            "(first try %s), agents registered through one found through "
            "the other %s/%s (slowest %s s)"
            % (f(d.get("qps_total"), "%.0f"), f(d.get("qps_a"), "%.0f"),
               f(d.get("qps_b"), "%.0f"),
               f(a["qps"] if a else None, "%.0f"), f(d.get("ratio")),
               mark(t["d_ratio"]), s.get("same"), s.get("queries"),
               s.get("same_first_try"), s.get("probes_found"),
               len(s.get("probes") or []), f(s.get("probe_max_s"), "%.3f")))
    for key, n in (("startup", p["agents"]), ("million", p["million_agents"])):
        st = (e or {}).get(key)
        if st:
            g = st["gauges"]
            out.append(
                "(e) index at %s agents: ioa_discovery_index_agents %s, "
                "bytes %s (%s per agent), build %s s (gauge); first "
                "\"X-Ioa-Discovery: index\" answer %s s after nginx started "
                "(first answer %s s; %s)"
                % (n, f(g["ioa_discovery_index_agents"], "%.0f"),
                   f(g["ioa_discovery_index_bytes"], "%.0f"),
                   f(st["bytes_per_agent"], "%.0f"),
                   f(g["ioa_discovery_index_build_seconds"], "%.3f"),
                   f(st["first_index_s"], "%.3f"),
                   f(st["first_answer_s"], "%.3f"), st["ended_by"]))
    return out


def param(v):
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("params", nargs="*", help="key=value")
    o = ap.parse_args()
    p = {k: param(v) for k, v in (kv.split("=", 1) for kv in o.params)}
    run = o.run

    a = replay_figures(load(run, "a.json"))
    b = part_b(run)
    c = part_c(run, p.get("repeats", 0))
    d = part_d(run, a)
    if not any(d.values()):
        d = None
    reg = registration(run, "register", p.get("agents"))
    if reg:
        reg["million"] = registration(run, "register-million",
                                      p.get("million_agents", 0)
                                      - p.get("agents", 0))
    e = {"startup": load(run, "startup.json"),
         "million": load(run, "startup-million.json")}
    if not any(e.values()):
        e = None
    res = {"params": p, "registration": reg, "a": a, "b": b, "c": c, "d": d,
           "e": e}
    # every ioa-bench report of the run as it wrote it (the server's
    # processes one by one, the generator, the parameters)
    res["runs"] = {n[:-5]: load(run, n) for n in sorted(os.listdir(run))
                   if n.endswith(".json") and n != "same.json"
                   and not n.startswith("startup")}
    res["targets"] = targets(a, b, c, d)
    with open(o.out, "w") as fh:
        json.dump(res, fh, indent=1)
        fh.write("\n")
    for line in lines(res):
        print("discovery-load " + line)


if __name__ == "__main__":
    main()
