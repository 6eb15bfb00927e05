#!/usr/bin/python3
"""bench/report.py RESULTS_DIR BENCHMARKS.md -- the report of `make bench`.

Reads what bench/run.sh left in RESULTS_DIR (ioa-bench's and ioa-ceiling's
JSON, one file per run, and the .cmd file with the command of each) and
writes the Markdown report: one table per workload with every server side
by side, the ratios the performance issue sets targets for (ioa / nchan's
Redis store, ioa / nchan's memory store, ioa's ingest / the Redis ceiling),
the integrity check of every run, and the exact commands.  A run that
failed is shown as failed, never left out: a missing number is a finding.
"""

import json
import os
import platform
import subprocess
import sys
import time

SERVERS = [("ioa", "ioa"), ("nchan-redis", "nchan, Redis store"),
           ("nchan-mem", "nchan, memory store")]
WORKLOADS = [
    ("a", "(a) 100 rooms x 4 members, 1 publisher per room, 200 B, saturated (window 8)"),
    ("b", "(b) the same at half of (a)'s publish rate"),
    ("c", "(c) 10 rooms x 32 members, 200 B, saturated (window 8)"),
]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def cmd(out, name):
    try:
        with open(os.path.join(out, name + ".cmd")) as f:
            return f.read().strip()
    except OSError:
        return "(not run)"


def ms(d, key):
    try:
        return "%.2f" % (d["latency_us"][key] / 1000.0)
    except (KeyError, TypeError):
        return "-"


def num(v, fmt="%.0f"):
    return fmt % v if isinstance(v, (int, float)) else "-"


def ratio(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0:
        return "%.2fx" % (a / b)
    return "-"


def integrity(d):
    i = d.get("integrity") or {}
    state = "ok" if i.get("ok") else "FAILED"
    return "%s (lost %s, dup %s, reordered %s)" % (
        state, i.get("lost", "?"), i.get("duplicated", "?"), i.get("reordered", "?"))


def main():
    out, report = sys.argv[1], sys.argv[2]
    lines = []
    w = lines.append

    w("# Benchmarks")
    w("")
    w("Written by `make bench` (bench/run.sh, bench/report.py) on %s." %
      time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    cpu = "?"
    try:
        cpu = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    w("Machine: %s, %s cores; the servers, Redis and the load generator share "
      "them, so every figure is contended, and only the ratios within this run "
      "compare." % (platform.platform(), cpu))
    w("")

    ceiling = {}
    for mode in ("bare-1", "bare-32", "post-1", "post-32"):
        ceiling[mode] = load(os.path.join(out, "ceiling-%s.json" % mode))

    for key, title in WORKLOADS:
        w("## " + title)
        w("")
        w("| server | published/s | delivered/s | p50 ms | p99 ms | p99.9 ms | "
          "max ms | errors | integrity | server CPU % |")
        w("|---|---|---|---|---|---|---|---|---|---|")
        runs = {}
        for server, label in SERVERS:
            d = load(os.path.join(out, "%s-%s.json" % (key, server)))
            runs[server] = d
            if d is None:
                w("| %s | failed: see %s-%s.txt | | | | | | | | |" % (label, key, server))
                continue
            errors = (d.get("errors") or {}).get("total", "?")
            w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                label, num(d.get("publish_rate")), num(d.get("delivery_rate")),
                ms(d, "p50"), ms(d, "p99"), ms(d, "p99_9"), ms(d, "max"),
                errors, integrity(d),
                num((d.get("server") or {}).get("cpu_pct"), "%.0f")))
        w("")
        ioa = runs.get("ioa") or {}
        w("- deliveries/s, ioa / nchan's Redis store: **%s**; ioa / nchan's "
          "memory store: %s" % (
              ratio(ioa.get("delivery_rate"), (runs.get("nchan-redis") or {}).get("delivery_rate")),
              ratio(ioa.get("delivery_rate"), (runs.get("nchan-mem") or {}).get("delivery_rate"))))
        if key == "a":
            c1 = (ceiling.get("bare-1") or {}).get("calls_per_s")
            c32 = (ceiling.get("bare-32") or {}).get("calls_per_s")
            w("- ioa's ingest (publishes/s) / the Redis ceiling measured in "
              "this run: **%s** of the unpipelined ceiling, %s of the "
              "pipelined one" % (ratio(ioa.get("publish_rate"), c1),
                                  ratio(ioa.get("publish_rate"), c32)))
        w("")

    w("## The Redis ceiling")
    w("")
    w("One EVALSHA per envelope, as ioa's post path: `bare` is XADD (MAXLEN ~ "
      "1000) + PUBLISH only, `post` is the hub's post.lua (membership check "
      "included); 200-byte envelopes, 100 rooms, 4 client processes, one "
      "subscriber counting what is published.")
    w("")
    w("| script | pipeline | calls/s | received by the subscriber | Redis CPU % |")
    w("|---|---|---|---|---|")
    for mode, d in ceiling.items():
        script, depth = mode.split("-")
        if d is None:
            w("| %s | %s | failed: see ceiling-%s.txt | | |" % (script, depth, mode))
            continue
        w("| %s | %s | %s | %s | %s |" % (script, depth, num(d.get("calls_per_s")),
                                           d.get("received"), num(d.get("redis_cpu_pct"))))
    w("")
    b, p = (ceiling.get("bare-32") or {}), (ceiling.get("post-32") or {})
    w("- post.lua / bare, pipelined: %s (the price of the ACL check in Redis)" %
      ratio(p.get("calls_per_s"), b.get("calls_per_s")))
    w("")

    w("## Commands")
    w("")
    w("```")
    for key, _ in WORKLOADS:
        for server, _ in SERVERS:
            w(cmd(out, "%s-%s" % (key, server)))
    for mode in ceiling:
        w(cmd(out, "ceiling-" + mode))
    w("```")
    w("")
    w("The servers' configurations are in bench/run.sh; ioa-bench's options "
      "and output fields in bench/README.md.")

    with open(report, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
