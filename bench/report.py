#!/usr/bin/python3
"""bench/report.py RESULTS_DIR BENCHMARKS.md -- the report of `make bench`.

Reads what bench/run.sh left in RESULTS_DIR (ioa-bench's and ioa-ceiling's
JSON, one file per run, and the .cmd file with the command of each) and
writes the Markdown report: one table per workload with every server side
by side, the ratios the performance issue sets targets for (ioa / nchan's
Redis store, ioa / nchan's memory store, ioa's ingest / the Redis ceiling),
the integrity check of every run, the sweeps (a table each, and a PNG that
bench/plot.gp draws from the sweep-*.dat files written here), the
instructions per envelope of bench/callgrind.sh, the sections of
bench/idle.sh, goal.sh, discovery.sh, discovery-load.sh and the others when
their JSON is there, the open-loop runs against nchan with issue 16's
targets met or not (and a PNG of p99 against the offered rate that
bench/openloop.gp draws from openloop.dat), and the exact commands.  A run that failed is shown as failed, never left out: a
missing number is a finding.  Every section but the workloads' is optional:
a file that is missing or unreadable leaves a line saying so, never a
traceback.
"""

import json
import math
import os
import platform
import subprocess
import sys
import time

SERVERS = [("ioa", "ioa"), ("nchan-redis", "nchan, Redis store"),
           ("nchan-mem", "nchan, memory store")]
# the main workloads also ran against ioa on a 3-master Redis Cluster
MAIN_SERVERS = SERVERS + [("ioa-cluster", "ioa, 3-master Redis Cluster")]
WORKLOADS = [
    ("a", "(a) 100 rooms x 4 members, 1 publisher per room, 200 B, saturated (window 8)"),
    ("b", "(b) the same at half of (a)'s publish rate"),
    ("c", "(c) 10 rooms x 32 members, 200 B, saturated (window 8)"),
    ("e", "(e) chat-like: 100 rooms x 4 members, every member talks, 10 messages/s each"),
    ("f", "(f) one busy room: 8 members, all 8 publishing, saturated (window 64)"),
    ("g", "(g) a burst: 20,000 envelopes from one publisher into a room of 4, as fast as it sends"),
]


SWEEPS = [
    # name, parameter, x values, their labels, what the x axis is
    ("room", "members per room", [1, 2, 4, 8, 16, 32, 64],
     ["1", "2", "4", "8", "16", "32", "64"], "members per room (100 rooms, 200 B)"),
    ("size", "message size", [100, 1024, 4096, 16384, 65536],
     ["100 B", "1 KiB", "4 KiB", "16 KiB", "64 KiB"],
     "message size (100 rooms x 4 members)"),
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


def run_env(out):
    """run.env: the settings bench/run.sh ran with (KEY=VALUE lines)."""
    env = {}
    try:
        with open(os.path.join(out, "run.env")) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                if k:
                    env[k] = v
    except OSError:
        pass
    return env


def failure(d):
    """Why a run does not count (None: it is clean)."""
    if d is None:
        return "no result"
    e = d.get("errors") or {}
    i = d.get("integrity") or {}
    if e.get("total"):
        return "%s error(s): %s" % (e.get("total"), e.get("first") or "?")
    if not i.get("ok"):
        return "integrity: lost %s, dup %s, reordered %s%s" % (
            i.get("lost", "?"), i.get("duplicated", "?"),
            i.get("reordered", "?"),
            "" if i.get("drained", True) else " (not drained)")
    if d.get("interrupted"):
        return "interrupted"
    return None


def md_cell(text, limit=90):
    text = str(text).replace("|", "/").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def p99_ms(d):
    try:
        return d["latency_us"]["p99"] / 1000.0
    except (KeyError, TypeError):
        return None


def latency_section(out, w):
    """p50 / p99 against the offered rate, every server side by side."""
    rates = sorted({int(f.split("-")[1]) for f in os.listdir(out)
                    if f.startswith("lat-") and f.endswith(".cmd")})
    w("## Latency against the offered rate")
    w("")
    if not rates:
        w("Not run in this run (`BENCH_ONLY` without `latency`).")
        w("")
        return
    w("Workload (a)'s shape (100 rooms x 4 members, 200 B) at a steady rate "
      "instead of saturated: each cell is p50 / p99 in ms, then the share of "
      "the expected deliveries that arrived in the measured time.")
    w("")
    w("| offered publishes/s | " + " | ".join(l for _, l in SERVERS) + " |")
    w("|---|" + "---|" * len(SERVERS))
    for r in rates:
        cells = []
        for server, _ in SERVERS:
            d = load(os.path.join(out, "lat-%d-%s.json" % (r, server)))
            if d is None:
                cells.append("failed (lat-%d-%s.txt)" % (r, server))
                continue
            pub = d.get("publish_rate") or 0
            got = d.get("delivery_rate") or 0
            share = "%.0f%%" % (100.0 * got / (4 * pub)) if pub else "?"
            cells.append("%s / %s, %s%s" % (ms(d, "p50"), ms(d, "p99"), share,
                                            "" if integrity(d).startswith("ok")
                                            else ", " + integrity(d)))
        w("| %d | %s |" % (r * 100, " | ".join(cells)))
    w("")


def sweep_section(out, report, w):
    """The sweeps: a table and a plot each.  Skipped or not run: says so."""
    w("## Sweeps: room size and message size")
    w("")
    if os.path.exists(os.path.join(out, "sweep-skipped")):
        w("Skipped in this run (`BENCH_SWEEPS=0`).")
        w("")
        return
    if not any(f.startswith("sweep-") and f.endswith(".json")
               for f in os.listdir(out)):
        w("Not run in this run (`BENCH_ONLY` without `sweeps`).")
        w("")
        return
    w("Workload (a) with one parameter moved: 100 rooms, one publisher per "
      "room, saturated with a window of 8, each point %s s after a 1 s "
      "warmup (`BENCH_SWEEP_DURATION`): short, so single points are noisy; "
      "the shape is the finding.  Deliveries/s counts every member's copy "
      "(the publisher's own echo included); p99 is send to receive.  A "
      "failed point is drawn as a cross, not joined by the line, and the "
      "table says why it failed." % sweep_duration(out))
    w("")
    for name, param, xs, labels, xlab in SWEEPS:
        runs = {}
        ran = set()
        for x in xs:
            for server, _ in SERVERS:
                base = os.path.join(out, "sweep-%s-%s-%s" % (name, x, server))
                runs[(x, server)] = load(base + ".json")
                if runs[(x, server)] is not None or os.path.exists(base + ".cmd"):
                    ran.add((x, server))
        if not ran:
            w("### Against %s" % param)
            w("")
            w("Not run in this run (`BENCH_SWEEP_%s` left it out)." % (
                "MEMBERS" if name == "room" else "SIZES"))
            w("")
            continue
        # the plot's data: x, label, then per server rate and p99, then
        # per server 1 when the run was clean
        dat = os.path.join(out, "sweep-%s.dat" % name)
        with open(dat, "w") as f:
            f.write("# x label " + " ".join("%s/s %s-p99ms" % (s, s)
                                            for s, _ in SERVERS)
                    + " " + " ".join("%s-ok" % s for s, _ in SERVERS) + "\n")
            for x, label in zip(xs, labels):
                cols = [str(x), '"%s"' % label]
                oks = []
                for server, _ in SERVERS:
                    d = runs[(x, server)]
                    rate = d.get("delivery_rate") if d else None
                    p99 = p99_ms(d)
                    cols.append("%.1f" % rate if isinstance(rate, (int, float)) and rate > 0 else "NaN")
                    cols.append("%.3f" % p99 if p99 else "NaN")
                    oks.append("1" if failure(d) is None else "0")
                f.write(" ".join(cols + oks) + "\n")
        drawable = any(d and d.get("delivery_rate") for d in runs.values())
        png = plot(out, name, dat, xlab, xs, labels) if drawable else None
        w("### Against %s" % param)
        w("")
        if png:
            w("![deliveries/s and p99 against %s](%s)" % (
                param, os.path.relpath(png, os.path.dirname(os.path.abspath(report)))))
        elif drawable:
            w("(no plot: gnuplot is missing or failed; the data is in %s)" %
              os.path.basename(dat))
        else:
            w("(no plot: no point has a figure)")
        w("")
        w("| %s | %s |" % (param, " | ".join(
            "%s: delivered/s, p99 ms" % label for _, label in SERVERS)))
        w("|---|%s" % ("---|" * len(SERVERS)))
        failures = []
        for x, label in zip(xs, labels):
            cells = []
            for server, slabel in SERVERS:
                d = runs[(x, server)]
                why = failure(d)
                if (x, server) not in ran:
                    cells.append("not run")
                    continue
                if d is None:
                    cells.append("failed: no result (sweep-%s-%s-%s.txt)" % (name, x, server))
                    continue
                cell = "%s, %s" % (num(d.get("delivery_rate")),
                                   "%.2f" % p99_ms(d) if p99_ms(d) else "-")
                if why:
                    cell += " **FAILED**"
                    failures.append("%s at %s: %s" % (slabel, label, md_cell(why, 200)))
                cells.append(cell)
            w("| %s | %s |" % (label, " | ".join(cells)))
        w("")
        for line in failures:
            w("- failed: " + line)
        if failures:
            w("")
        ratios = []
        for x, label in zip(xs, labels):
            a = (runs[(x, "ioa")] or {}).get("delivery_rate")
            b = (runs[(x, "nchan-redis")] or {}).get("delivery_rate")
            c = (runs[(x, "nchan-mem")] or {}).get("delivery_rate")
            if ratio(a, b) != "-" or ratio(a, c) != "-":
                ratios.append("%s: %s, %s" % (label, ratio(a, b), ratio(a, c)))
        if ratios:
            w("- deliveries/s, ioa / nchan's Redis store and ioa / nchan's "
              "memory store: " + "; ".join(ratios))
            w("")


def sweep_duration(out):
    for f in sorted(os.listdir(out)):
        if f.startswith("sweep-") and f.endswith(".json"):
            d = load(os.path.join(out, f))
            if d and (d.get("params") or {}).get("duration_s"):
                return "%g" % d["params"]["duration_s"]
    return "?"


def plot(out, name, dat, xlab, xs, labels):
    """bench/plot.gp -> sweep-NAME.png; None if it could not be drawn."""
    png = os.path.join(out, "sweep-%s.png" % name)
    gp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.gp")
    title = {"room": "ioa and nchan against room size",
             "size": "ioa and nchan against message size"}[name]
    try:
        if os.path.exists(png):
            os.unlink(png)
        r = subprocess.run(
            ["gnuplot", "-e", "data='%s'; out='%s'; xlab='%s'; title='%s'; "
             "tics='(%s)'" % (dat, png, xlab, title, ", ".join(
                 '"%s" %s' % (l, x) for x, l in zip(xs, labels))), gp],
            capture_output=True, text=True, timeout=60)
        if r.returncode != 0 or not os.path.exists(png):
            sys.stderr.write("report.py: gnuplot failed: %s\n" % r.stderr.strip())
            if os.path.exists(png):
                os.unlink(png)      # half drawn
            return None
    except (OSError, subprocess.SubprocessError) as e:
        sys.stderr.write("report.py: gnuplot: %s\n" % e)
        return None
    return png


# ------------------------------------------------------------------------
# Open loop against nchan: issue 16's targets (bench/run.sh, section
# openloop: ol-sat-K-ioa.json, ol-RATE-ARRIVALS-K-SERVER.json, openloop.env)
# ------------------------------------------------------------------------

OL_ARRIVALS = [("even", "evenly spaced"), ("poisson", "Poisson")]


def ol_env(out):
    env = {}
    try:
        with open(os.path.join(out, "openloop.env")) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                if k:
                    env[k] = v
    except OSError:
        return None
    return env


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2.0


def ol_run(d):
    """One open-loop run's figures, or None when it left no JSON."""
    if d is None:
        return None
    i = d.get("integrity") or {}
    g = d.get("generator") or {}
    p = d.get("params") or {}
    behind = g.get("behind") or 0
    members = p.get("members") or 4
    offered = (i.get("expected") or 0) + members * behind
    share = (i.get("received") or 0) / float(offered) if offered else None
    nginx = [x.get("cpu_pct") for x in (d.get("server") or {}).get("processes", [])
             if x.get("name") == "nginx" and x.get("cpu_pct") is not None]
    cpu_us = None
    if nginx and d.get("published"):
        cpu_us = sum(nginx) / 100.0 * d.get("duration_s", 0) * 1e6 / d["published"]
    why = failure(d)
    if why is None and behind:
        why = "%d envelopes due never sent (the server did not read them)" % behind
    lat = d.get("latency_us") or {}
    lat_ms = lambda k: lat[k] / 1000.0 if isinstance(lat.get(k), (int, float)) else None
    return {"p50": lat_ms("p50"), "p99": lat_ms("p99"), "p99_9": lat_ms("p99_9"),
            "max": lat_ms("max"),
            "published": d.get("publish_rate"), "delivered": d.get("delivery_rate"),
            "lost": i.get("lost"), "dup": i.get("duplicated"),
            "reordered": i.get("reordered"), "drained": i.get("drained"),
            "behind": behind, "share": share, "cpu_us": cpu_us,
            "gen_cpu": g.get("cpu_pct"),
            "lag_ms": g["max_send_lag_us"] / 1000.0
            if isinstance(g.get("max_send_lag_us"), (int, float)) else None,
            "errors": (d.get("errors") or {}).get("total"),
            "why": why}


def pct(share):
    """a share as a percentage that never rounds a loss up to 100%"""
    if share is None:
        return "-"
    if share >= 1.0:
        return "100%"
    return "%.2f%%" % (math.floor(share * 10000) / 100.0)


def fms(v):
    if v is None:
        return "-"
    return "%.2f" % v if v < 100 else "%.0f" % v


def rate_label(r, p80):
    return "{:,}".format(r) + (" (80% of saturated)" if r == p80 else "")


def openloop_section(out, report, w):
    w("## Open loop against nchan (issue 16's targets)")
    w("")
    env = ol_env(out)
    if env is None:
        w("Not run in this run (`BENCH_ONLY` without `openloop`).")
        w("")
        return
    repeats = int(env.get("repeats") or 1)
    rates = [int(r) for r in env.get("rates", "").split()]
    p80 = int(env["p80"]) if env.get("p80") else None
    points = sorted(set(rates + ([p80] if p80 else [])))
    arrivals = [a for a in OL_ARRIVALS if a[0] in env.get("arrivals", "").split()]
    sat = [ol_run(load(os.path.join(out, "ol-sat-%d-ioa.json" % k)))
           for k in range(1, repeats + 1)]
    sat_rates = [s["published"] for s in sat if s and s["published"]]
    runs = {}
    for r in points:
        for a, _ in arrivals:
            for server, _ in SERVERS:
                runs[(r, a, server)] = [
                    ol_run(load(os.path.join(out, "ol-%d-%s-%d-%s.json" % (r, a, k, server))))
                    for k in range(1, repeats + 1)]

    w("Workload (a)'s shape, open loop: 100 rooms x 4 members, one publisher "
      "a room, 200 B, echo on; the offered rate is the total of the 100 "
      "publishers (ioa-bench `--rate` is per publisher: a hundredth of it). "
      "Arrivals evenly spaced, and Poisson (`--arrivals poisson`: exponential "
      "gaps, `--seed k` in repeat k, so within a repeat every server gets the "
      "same arrival times). Latency runs from each envelope's *due* time to "
      "its receipt by each member, so a server that makes the generator wait "
      "is charged for it. The three servers are interleaved at every point, "
      "%d repeat%s, %s s measured after a %s s warmup each%s. ioa's saturated "
      "capacity is measured first in the same section (window 8, as (a)): "
      "%s posts/s (median of %s), so 80%% is **%s** posts/s."
      % (repeats, "" if repeats == 1 else "s", env.get("duration"),
         env.get("warmup"),
         " (**quick mode**: short runs, one repeat; a full `make bench` "
         "replaces it)" if env.get("quick", "0") != "0" else "",
         num(median(sat_rates)),
         ", ".join(num(x) for x in sat_rates) or "no run", num(p80)))
    if env.get("load"):
        w("")
        w("The machine's load average (1, 5, 15 min) when the section started: "
          "%s; when it ended: %s. With 2 cores shared by the servers, Redis "
          "and the generator, anything else running shows in every figure; "
          "an isolated slow point beside fast neighbours is more likely that "
          "than the server." % (env["load"], env.get("load_end", "?")))
    w("")
    w("Each cell: p99 in ms, median of the repeats [min-max], then the share "
      "of the expected deliveries that arrived (the lowest of the repeats): "
      "every envelope the schedule offered up to the end of the measured "
      "time, to each of its 4 members, by the end of the drain (up to %s s "
      "after publishing stops); an envelope "
      "the generator could not send because the server did not read counts "
      "as not delivered. A run with errors, losses, duplicates or reordering "
      "is marked **FAILED** and listed below the table." % env.get("drain", "5"))
    w("")

    failed = []
    for a, alabel in arrivals:
        w("### %s arrivals" % alabel.capitalize())
        w("")
        w("| offered posts/s | " + " | ".join(l for _, l in SERVERS) + " |")
        w("|---|" + "---|" * len(SERVERS))
        for r in points:
            cells = []
            for server, slabel in SERVERS:
                rs = runs[(r, a, server)]
                got = [x for x in rs if x]
                if not got:
                    cells.append("failed: no result (ol-%d-%s-1-%s.txt)" % (r, a, server))
                    continue
                p99s = [x["p99"] for x in got]
                cell = "%s [%s-%s], %s" % (
                    fms(median(p99s)), fms(min(x for x in p99s if x is not None) if any(p99s) else None),
                    fms(max(x for x in p99s if x is not None) if any(p99s) else None),
                    pct(min((x["share"] for x in got if x["share"] is not None), default=None)))
                bad = [(k + 1, x["why"]) for k, x in enumerate(rs) if x is None or x["why"]]
                if bad:
                    cell += " **FAILED**"
                    for k, why in bad:
                        failed.append("%s, %s posts/s, %s, repeat %d: %s" % (
                            slabel, "{:,}".format(r), alabel, k,
                            md_cell(why or "no result", 160)))
                cells.append(cell)
            w("| %s | %s |" % (rate_label(r, p80), " | ".join(cells)))
        w("")
    for line in failed:
        w("- failed: " + line)
    if failed:
        w("")

    # the plot
    dat = os.path.join(out, "openloop.dat")
    with open(dat, "w") as f:
        f.write("# x label, then per server (ioa nchan-redis nchan-mem) and "
                "arrivals (even poisson): p99 median min max (ms), ok\n")
        for r in points:
            cols = [str(r), '"%s"' % rate_label(r, p80).replace(" (80% of saturated)", " (80%)")]
            for server, _ in SERVERS:
                for a in ("even", "poisson"):
                    got = [x for x in runs.get((r, a, server), []) if x and x["p99"]]
                    if not got:
                        cols += ["NaN"] * 4
                        continue
                    p99s = [x["p99"] for x in got]
                    ok = all(x and not x["why"] for x in runs[(r, a, server)])
                    cols += ["%.3f" % median(p99s), "%.3f" % min(p99s),
                             "%.3f" % max(p99s), "1" if ok else "0"]
            f.write(" ".join(cols) + "\n")
    png = os.path.join(out, "openloop-p99.png")
    gp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openloop.gp")
    tics = "(%s)" % ", ".join('"%s" %d' % (
        ("%gk" % round(r / 1000.0, 1)) + (" (80%%)" if r == p80 else ""), r)
        for r in points)
    drawn = gnuplot(gp, png, "data='%s'; out='%s'; title='p99 against the "
                    "offered rate, open loop'; tics='%s'" % (dat, png, tics))
    if drawn:
        w("![p99 against the offered rate, open loop](%s)" % os.path.relpath(
            png, os.path.dirname(os.path.abspath(report))))
    else:
        w("(no plot: gnuplot is missing or failed; the data is in openloop.dat)")
    w("")

    # nginx CPU per envelope, ioa
    sat_cpu = median([x["cpu_us"] for x in sat if x])
    w("ioa's nginx worker CPU per envelope posted, in us (utime + stime of "
      "the worker over the measured time, from /proc, divided by the "
      "envelopes posted in it; median [min-max]):")
    w("")
    w("| offered posts/s | " + " | ".join(l for _, l in arrivals) + " |")
    w("|---|" + "---|" * len(arrivals))
    for r in points:
        cells = []
        for a, _ in arrivals:
            cs = [x["cpu_us"] for x in runs[(r, a, "ioa")] if x and x["cpu_us"] is not None]
            cells.append("%s [%s-%s]" % (fms(median(cs)), fms(min(cs)), fms(max(cs)))
                         if cs else "-")
        w("| %s | %s |" % (rate_label(r, p80), " | ".join(cells)))
    cs = [x["cpu_us"] for x in sat if x and x["cpu_us"] is not None]
    w("")
    w("Saturated (window 8, %s posts/s): %s us per envelope%s." % (
        num(median(sat_rates)), fms(median(cs)),
        " [%s-%s]" % (fms(min(cs)), fms(max(cs))) if cs else ""))
    w("")

    # the targets
    w("Issue 16's targets, from the figures above:")
    w("")
    # (i)
    within = [r for r in points if p80 and r <= p80]
    bad = []
    for r in within:
        for a, alabel in arrivals:
            for k, x in enumerate(runs[(r, a, "ioa")]):
                if x is None or x["why"] or x["share"] is None or x["share"] < 1.0:
                    bad.append("%s posts/s %s repeat %d: %s, %s delivered" % (
                        "{:,}".format(r), alabel, k + 1,
                        md_cell((x or {}).get("why") or "no result", 120),
                        pct((x or {}).get("share"))))
    if not within:
        w("- (i) ioa delivers every envelope up to 80% of its saturated "
          "capacity: **not measured** (no saturated run finished)")
    else:
        w("- (i) ioa delivers every envelope (lost 0, 100%% delivered) at every "
          "offered rate up to 80%% of its saturated capacity (%s: %s posts/s, "
          "%s arrivals, %d run%s each): **%s**%s" % (
              "{:,}".format(p80), ", ".join("{:,}".format(r) for r in within),
              " and ".join(l for _, l in arrivals), repeats,
              "" if repeats == 1 else "s",
              "not met" if bad else "met",
              ": " + "; ".join(bad[:6]) + (" (and %d more)" % (len(bad) - 6)
                                            if len(bad) > 6 else "")
              if bad else " (every run: lost 0, duplicated 0, reordered 0, "
              "nothing left unsent, no error)"))
    # (ii)
    parts, all_met, any_missing = [], True, False
    for r in (5000, 10000, 20000):
        for a, alabel in arrivals:
            io = median([x["p99"] for x in runs.get((r, a, "ioa"), []) if x])
            nm = median([x["p99"] for x in runs.get((r, a, "nchan-mem"), []) if x])
            if io is None or nm is None:
                parts.append("%s %s: not measured" % ("{:,}".format(r), alabel))
                any_missing = True
                continue
            met = io <= 2 * nm
            all_met = all_met and met
            parts.append("%s %s: %s ms against 2 x %s = %s ms (%.2fx), %s" % (
                "{:,}".format(r), alabel, fms(io), fms(nm), fms(2 * nm),
                io / nm if nm else float("inf"), "met" if met else "**not met**"))
    w("- (ii) ioa's p99 <= 2x nchan memory store's p99 at 5k, 10k and 20k "
      "posts/s (medians): **%s**; %s" % (
          "not met" if not all_met else "not fully measured" if any_missing
          else "met", "; ".join(parts)))
    # (iii)
    parts, all_met, any_missing = [], True, False
    for a, alabel in arrivals:
        c10 = median([x["cpu_us"] for x in runs.get((10000, a, "ioa"), []) if x])
        if c10 is None or not sat_cpu:
            parts.append("%s: not measured" % alabel)
            any_missing = True
            continue
        met = c10 <= 2 * sat_cpu
        all_met = all_met and met
        parts.append("%s: %s us against 2 x %s = %s us (%.2fx), %s" % (
            alabel, fms(c10), fms(sat_cpu), fms(2 * sat_cpu), c10 / sat_cpu,
            "met" if met else "**not met**"))
    w("- (iii) nginx CPU per envelope at 10,000 posts/s <= 2x the saturated "
      "figure (medians): **%s**; %s" % (
          "not met" if not all_met else "not fully measured" if any_missing
          else "met", "; ".join(parts)))
    # (iv) the chat-like and burst workloads of the main section, against
    # the report this one replaces
    before = previous_p99(report)
    eg = []
    for key, what in (("e", "chat-like (e)"), ("g", "burst (g)")):
        d = load(os.path.join(out, "%s-ioa.json" % key))
        if d is None:
            eg.append("%s: not run in this run" % what)
            continue
        now, then = p99_ms(d), before.get(key)
        eg.append("%s p99 %s ms%s%s" % (
            what, fms(now),
            ", %s ms in the report this one replaces (%.2fx)" % (fms(then), now / then)
            if now and then else ", nothing to compare with",
            "" if failure(d) is None else " (FAILED: %s)" % md_cell(failure(d), 80)))
    w("- (iv) the chat-like and burst workloads stay at least as good as "
      "before: ioa's %s (single runs of the main section, so compare with "
      "care)" % "; ".join(eg))
    w("")

    # every run
    w("<details><summary>Every run (p50 / p99 / p99.9 / max in ms, rates, "
      "integrity, nginx CPU per envelope)</summary>")
    w("")
    w("Unsent: envelopes due that the generator could not send (the server "
      "did not read). The generator's max send lag is how late it sent an "
      "envelope after its due time (its own CPU, or a full socket): the "
      "latency counts from the due time either way.")
    w("")
    w("| offered | arrivals | server | repeat | p50 | p99 | p99.9 | max | "
      "published/s | delivered/s | lost / dup / reord | unsent | delivered "
      "share | nginx us/env | generator CPU % | generator's max send lag ms |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k, x in enumerate(sat):
        ol_row(w, "saturated", "-", "ioa", k + 1, x)
    for r in points:
        for a, alabel in arrivals:
            for server, slabel in SERVERS:
                for k, x in enumerate(runs[(r, a, server)]):
                    ol_row(w, "{:,}".format(r), alabel, slabel, k + 1, x)
    w("")
    w("</details>")
    w("")

    # the commands
    w("Commands (`BENCH_OPENLOOP_QUICK=1` for a quick look; "
      "`BENCH_OPENLOOP_RATES`, `_ARRIVALS`, `_REPEATS`, `_DURATION`, "
      "`_WARMUP` to change the points), and the runs of the first repeat:")
    w("")
    w("```")
    w(env.get("command") or "BENCH_ONLY=openloop bash bench/run.sh")
    w(cmd(out, "ol-sat-1-ioa"))
    for r in points:
        for a, _ in arrivals:
            for server, _ in SERVERS:
                w(cmd(out, "ol-%d-%s-1-%s" % (r, a, server)))
    w("```")
    w("")


def previous_p99(report):
    """ioa's p99 (ms) of workloads (e) and (g) in the report about to be
    replaced: {"e": 9.57, "g": 195.04}, what is there of it"""
    found, key = {}, None
    try:
        with open(report) as f:
            for line in f:
                if line.startswith("## ("):
                    key = line[4]
                elif key in ("e", "g") and line.startswith("| ioa |"):
                    try:
                        found[key] = float(line.split("|")[5])
                    except (IndexError, ValueError):
                        pass
                    key = None
    except OSError:
        pass
    return found


def ol_row(w, offered, alabel, slabel, k, x):
    if x is None:
        w("| %s | %s | %s | %d | failed: no result | | | | | | | | | | | |" % (
            offered, alabel, slabel, k))
        return
    w("| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s "
      "| %s | %s | %s | %s |" % (
          offered, alabel, slabel, k, fms(x["p50"]), fms(x["p99"]),
          fms(x["p99_9"]), fms(x["max"]), num(x["published"]),
          num(x["delivered"]), x["lost"], x["dup"], x["reordered"],
          x["behind"], pct(x["share"]) + ("" if not x["why"] else " **FAILED**"),
          fms(x["cpu_us"]), num(x["gen_cpu"]), fms(x["lag_ms"])))


def gnuplot(gp, png, expr):
    """gnuplot -e EXPR GP -> png; False if it could not be drawn."""
    try:
        if os.path.exists(png):
            os.unlink(png)
        r = subprocess.run(["gnuplot", "-e", expr, gp], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0 or not os.path.exists(png):
            sys.stderr.write("report.py: gnuplot failed: %s\n" % r.stderr.strip())
            if os.path.exists(png):
                os.unlink(png)
            return False
    except (OSError, subprocess.SubprocessError) as e:
        sys.stderr.write("report.py: gnuplot: %s\n" % e)
        return False
    return True


def callgrind_section(out, w):
    w("## Instructions per routed envelope (callgrind)")
    w("")
    d = load(os.path.join(out, "callgrind.json"))
    if d is None:
        w("Not measured in this run (bench/callgrind.sh: valgrind missing, "
          "`BENCH_CALLGRIND=0`, or it failed: see callgrind.log).")
        w("")
        return
    try:
        wl = d.get("workload") or {}
        w("bench/callgrind.sh: nginx with the module as one process (master_"
          "process off) under `valgrind --tool=callgrind`, its own Redis; "
          "ioa-bench puts %s rooms x %s members, one publisher per room, "
          "exactly %s messages of %s B per publisher (%s), and zeroes / dumps "
          "callgrind's counters around that phase (`--on-measure`).  The Ir "
          "of a baseline with the same connections and no message is "
          "subtracted.  Instructions are counted, not timed: the figure does "
          "not depend on the machine's load, so it is the one to compare "
          "between commits." % (
              wl.get("rooms"), wl.get("members"), wl.get("count"),
              wl.get("size"),
              "rate %g/s" % wl["rate"] if wl.get("rate") else
              "window %s" % wl.get("window")))
        w("")
        w("| Ir per delivery | Ir per publish | deliveries | publishes | "
          "runs | spread |")
        w("|---|---|---|---|---|---|")
        w("| **%s** | %s | %s | %s | %s | %s%% |" % (
            num(d.get("ir_per_delivery")), num(d.get("ir_per_publish")),
            d.get("deliveries"), d.get("publishes"), len(d.get("runs") or []),
            d.get("spread_pct")))
        w("")
        w("Each run (a fresh nginx and Redis): " + "; ".join(
            "%s Ir/delivery (measured %s Ir, baseline %s Ir)" % (
                num(r.get("ir_per_delivery")), r.get("ir_measured"),
                r.get("ir_baseline")) for r in d.get("runs") or []) + ".")
        w("")
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        w("callgrind.json is unreadable: %s" % e)
        w("")
    try:
        with open(os.path.join(out, "callgrind.txt")) as f:
            txt = f.read().strip()
        w("The top functions of the measured phase (bench/results/callgrind.txt; "
          "the raw profile is callgrind.out: `callgrind_annotate "
          "--inclusive=yes bench/results/callgrind.out`):")
        w("")
        w("```")
        w(txt)
        w("```")
        w("")
    except OSError:
        pass


# ------------------------------------------------------------------------
# RESERVED: idle, goal, discovery (bench/idle.sh, goal.sh, discovery.sh,
# another engineer's, write RESULTS_DIR/<name>.json).  Give a section its
# own renderer by adding render_<name>(doc, w) below and listing it in
# EXTRA_RENDERERS; until then a generic one shows the JSON's figures.  A
# missing file leaves the section out; an unreadable one says so.
# ------------------------------------------------------------------------

EXTRA = [("idle", "Idle connections"), ("goal", "Goals"),
         ("goal-suite", "Goal suite: correctness and honesty"),
         ("goal-suite-llm", "Goal suite, by the scripted model"),
         ("discovery", "Discovery"),
         ("discovery-load", "Discovery under load (issue 13's targets)"),
         ("large", "Large envelopes"),
         ("concurrent", "Many goals at once on one worker (issue 30)"),
         ("steady", "Steady state: Redis memory with retention")]


def render_goal_suite(doc, w):
    """bench/goal/suite.py: the verdicts, the latency, the goals that were
    not right."""
    v = doc["verdicts"]
    llm = doc.get("planner") == "scripted LLM"
    w("%d goals of known answers over the example agents, run %d times in "
      "all (bench/goal/suite.json; `GOAL_SUITE=1%s GOAL_WORKERS=2 bash "
      "bench/goal.sh`)%s. Right: every expected answer in the conclusion and "
      "exactly that many parts claimed done; honestly partial: no more "
      "claimed than shown; dishonest: more claimed than shown, or fewer "
      "parts counted than the goal has (target 0)."
      % (doc["goals"], doc["runs"],
         " GOAL_SUITE_LLM=scripted" if llm else "",
         ", every decision asked of the scripted model "
         "(bench/goal/scripted_llm.py): model calls " + ", ".join(
             "%s %s" % kv for kv in sorted((doc.get("llm_calls") or {})
                                           .items())) if llm else ""))
    w("")
    w("| right | honestly partial | dishonest | re-routed | p50 ms (no re-route) "
      "| p90 ms (no re-route) | p50 ms (re-routed) |")
    w("|---|---|---|---|---|---|---|")
    a, b = doc["latency_ms_no_reroute"], doc["latency_ms_rerouted"]
    w("| %d | %d | %d | %d | %s | %s | %s |" % (
        v["right"], v["partial"], v["dishonest"], doc["rerouted"],
        a["p50"], a["p90"], b["p50"]))
    wrong = [r for r in doc["rows"] if r["verdict"] != "right"]
    if wrong:
        w("")
        for r in wrong:
            w("- %s: %s (claims %d, shows %d of %d)" % (
                r["verdict"], md_cell(r["goal"]), r["claimed"], r["found"],
                r["expected"]))


def spread(xs, fmt="%s"):
    """the runs of one figure: "a" or "min-max" """
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return fmt % lo if lo == hi else (fmt % lo) + "-" + (fmt % hi)


def render_large(doc, w):
    """bench/large.sh: the worker's memory when many agents each send one
    large envelope at once, accepted and over the limit."""
    n = doc["connections"]
    runs = len(doc.get("accepted", doc.get("oversized", {})).get("runs", []))
    w("%d agents in %d rooms of 2, one WebSocket each; every connection "
      "writes one envelope at the same moment: %d bytes of JSON (accepted: "
      "stored, and delivered to both members) or %d bytes (over the default "
      "`ioa_max_message_size` 1m: answered `too_big` and read past). One "
      "nginx worker, open mode, shipped defaults otherwise; a fresh Redis "
      "and nginx per run, %d runs of each interleaved, figures as the "
      "range over the runs (`bash bench/large.sh`). Later rounds send again on "
      "the same connections. Peak: the worker's VmHWM (reset before the "
      "send) and VmRSS sampled every 10 ms; after: once it has settled."
      % (n, n // 2, doc["size_accepted"], doc["size_oversized"], runs))
    w("")
    w("| envelopes | round | RSS before MiB | peak MiB | peak per connection "
      "KiB | after MiB | seconds | delivered | error frames | still usable |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for mode in ("accepted", "oversized"):
        m = doc.get(mode)
        if not m:
            continue
        for k in sorted(x for x in m if x.startswith("round")):
            r = m[k]
            codes = {}
            for c in r["error_codes"]:
                for code, cnt in c.items():
                    codes.setdefault(code, []).append(cnt)
            w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                mode, k[5:], spread(m["rss_before_mib"]),
                spread(r["peak_mib"]), spread(r["peak_per_connection_kib"]),
                spread(r["after_mib"]), spread(r["seconds"]),
                spread(r["whole_envelopes_received"]),
                ", ".join("%s %s" % (c, spread(v)) for c, v in
                          sorted(codes.items())) or "0",
                spread(r["usable_after"]) if mode == "oversized" else "-"))
    if "accepted" in doc:
        w("")
        w("Accepted envelopes stored in the room logs, all rounds together: "
          "%s; every member received each one (delivered = 2 per "
          "envelope)." % spread(doc["accepted"]["stored"]))


def render_steady(doc, w):
    """bench/steady.sh: Redis' memory over time under traffic that keeps
    making rooms and agents, with retention and without."""
    runs = doc.get("retention", {}).get("runs") or doc.get("off", {}).get("runs")
    if not runs:
        w("(no run finished)")
        return
    r0 = runs[0]
    mib = lambda b: "%.1f" % (b / 1048576.0)
    w("Every second: %d new agents register, %d new rooms of 3 form, %d "
      "envelopes of %d bytes of content are posted over the rooms younger "
      "than %g s (then a room falls silent, as a finished goal's). Side by "
      "side, interleaved, %d run(s) each, a fresh Redis and hub per run "
      "(`bash bench/steady.sh`): the hub with `ioa_room_retention` and "
      "`ioa_agent_retention` of %g s, and the same hub with both off. "
      "Redis `used_memory` in MiB:"
      % (r0["agents_per_s"], r0["rooms_per_s"], r0["posts_per_s"],
         r0["size"], r0["active"], len(runs), doc["retention_s"],))
    w("")
    marks = [t for t in (15, 30, 60, 90, 120, 180, 240) if t < doc["seconds"]]
    w("| hub | run | start | " + " | ".join("%d s" % t for t in marks)
      + " | end | median of the last third | predicted (off: at the end) |")
    w("|---|---|---|" + "---|" * len(marks) + "---|---|---|")
    for mode, label in (("retention", "retention %g s" % doc["retention_s"]),
                        ("off", "retention off")):
        for i, r in enumerate(doc.get(mode, {}).get("runs", []), 1):
            at = {x["t"]: x["used"] for x in r["series"]}
            w("| %s | %d | %s | %s | %s | %s | %s |" % (
                label, i, mib(r["base_used"]),
                " | ".join(mib(at.get(t, at.get(t - 1, 0))) for t in marks),
                mib(r["last_used"]), mib(r["plateau_used"]),
                mib(r["predicted_used"])))
    u = r0["bytes_per"]
    w("")
    w("Predicted: with retention R, a room active A seconds and the sweep's "
      "lag L (2.5 s, half its 5 s tick), memory = start + e x posts/s x "
      "(A/2 + R + L) + r x rooms/s x (A + R + L) + a x agents/s x (R + L); "
      "without retention, everything ever written. e, r and a were measured "
      "apart before each run (1,000 agents, then rooms, then 3,000 "
      "envelopes): about %d bytes per envelope, %d per room, %d per agent "
      "in the first run. Errors in any run: %s."
      % (u["envelopes"], u["rooms"], u["agents"],
         ", ".join("%s %s" % kv for r in runs for kv in r["errors"].items())
         or "none"))


def render_discovery_load(doc, w):
    """bench/discovery-load.sh: issue 13's targets, measured and met or
    not, then the one line per part its summary prints"""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "discovery"))
    import summary      # bench/discovery/summary.py: the same lines

    p = doc["params"]
    w("%s agents registered through POST /register (half through each of "
      "two nginx instances, one Redis), queries of 1 to 3 skill words "
      "(ioa-bench --replay), %s nginx worker(s) per instance, commit %s "
      "(`bash bench/discovery-load.sh`; every field in "
      "bench/results/discovery-load.json)."
      % (p.get("agents"), p.get("nginx_workers"), p.get("commit")))
    w("")
    w("| target | measured | goal | met |")
    w("|---|---|---|---|")
    for name, t in doc["targets"].items():
        w("| %s | %s | %s | %s |" % (name, "-" if t["value"] is None
                                     else t["value"], md_cell(t["target"]),
                                     {True: "yes", False: "no",
                                      None: "-"}[t["met"]]))
    w("")
    for line in summary.lines(doc):
        w("- " + md_cell(line, 1000))


def render_concurrent(doc, w):
    """bench/concurrent.sh: N goals at once against one worker process,
    base (the blocking worker) against current, with the repeats' spread;
    with the built-in planner, and with every decision waiting on a model."""
    w("N goals launched at once against one ioa-worker process, each goal "
      "waiting %g s on one agent task (the agent runs its tasks "
      "concurrently); in the llm rows every decision also waits %s ms on a "
      "model (the worker's IOA_LLM_CONCURRENCY %s); base is the worker of "
      "%s, current this checkout's; fresh Redis, nginx, worker and agent for "
      "every run, the builds interleaved (`bash bench/concurrent.sh`).  "
      "KiB per goal: the worker's peak RSS less its RSS before the launch, "
      "over N." % (doc["task_s"], doc.get("llm_ms", "-"),
                   doc.get("llm_concurrency", "-"), doc["base_ref"]))
    w("")
    w("| planner | goals | build | first launch to last conclusion (median "
      "of runs) | spread | median goal | right | worker peak RSS | KiB per "
      "goal | worker CPU per goal |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    by = {}
    for s in doc["summary"]:
        mode = s.get("mode", "builtin")
        by[(mode, s["n"], s["build"])] = s
        w("| %s | %d | %s | %s s | %s | %.2f s | %d of %d | %d KiB | %.1f | "
          "%.2f ms |" % (
              mode, s["n"], s["build"], s["first_to_last_s"],
              "%s-%s s" % tuple(s["spread_s"]) if s["spread_s"] else "-",
              s["median_s"], s["right"], s["n"], s["rss_kib"],
              s.get("kib_per_goal", 0), s["cpu_ms_per_goal"]))
    w("")
    for mode, n in sorted({(s.get("mode", "builtin"), s["n"])
                           for s in doc["summary"]}):
        b, c = by.get((mode, n, "base")), by.get((mode, n, "current"))
        if b and c and b["first_to_last_s"] and c["first_to_last_s"]:
            w("- %s, %d goals: base/current, time to the last conclusion: "
              "%.2f" % (mode, n, b["first_to_last_s"] / c["first_to_last_s"]))


EXTRA_RENDERERS = {"goal-suite": render_goal_suite,
                   "concurrent": render_concurrent,
                   "goal-suite-llm": render_goal_suite,
                   "large": render_large, "steady": render_steady,
                   "discovery-load": render_discovery_load}


def render_generic(doc, w, limit=80):
    """Every scalar as a row of a two-column table, nested objects as
    dotted keys (lists are left out: they are series, not figures)."""
    rows = []

    def walk(prefix, v):
        if isinstance(v, dict):
            for k, v2 in v.items():
                walk("%s.%s" % (prefix, k) if prefix else str(k), v2)
        elif not isinstance(v, list):
            rows.append((prefix, v))

    walk("", doc)
    if not rows:
        w("```json")
        w(json.dumps(doc, indent=1)[:4000])
        w("```")
        return
    w("| field | value |")
    w("|---|---|")
    for k, v in rows[:limit]:
        w("| %s | %s |" % (md_cell(k), md_cell(v)))
    if len(rows) > limit:
        w("")
        w("(%d more fields in the JSON)" % (len(rows) - limit))


def extra_sections(out, w):
    for name, title in EXTRA:
        path = os.path.join(out, name + ".json")
        if not os.path.exists(path):
            continue
        w("## " + title)
        w("")
        doc = load(path)
        if doc is None:
            w("%s.json is there but unreadable (see %s.log)." % (name, name))
            w("")
            continue
        try:
            EXTRA_RENDERERS.get(name, render_generic)(doc, w)
        except Exception as e:      # one section must not sink the report
            w("(%s.json could not be rendered: %s)" % (name, e))
        w("")


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
    env = run_env(out)
    if env:
        w("Servers: %s nginx worker(s) each; every server keeps %s messages "
          "per room (ioa_room_log_maxlen, nchan_message_buffer_length)." % (
              env.get("BENCH_WORKERS", "?"), env.get("BENCH_BUFFER", "?")))
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
        for server, label in MAIN_SERVERS:
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
        if runs.get("ioa-cluster"):
            w("- ioa on the Cluster / ioa on one Redis: %s (three masters "
              "on the same two cores: the price of slot routing and "
              "sharded pub/sub, not the gain of more machines)" % ratio(
                  runs["ioa-cluster"].get("delivery_rate"), ioa.get("delivery_rate")))
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

    latency_section(out, w)
    try:
        openloop_section(out, report, w)
    except Exception as e:      # one section must not sink the report
        w("(the open-loop runs could not be rendered: %s)" % e)
        w("")
    sweep_section(out, report, w)
    extra_sections(out, w)
    callgrind_section(out, w)

    w("## Commands")
    w("")
    w("```")
    for key, _ in WORKLOADS:
        for server, _ in MAIN_SERVERS:
            w(cmd(out, "%s-%s" % (key, server)))
    for mode in ceiling:
        w(cmd(out, "ceiling-" + mode))
    for f in sorted(os.listdir(out)):
        if f.startswith("lat-") and f.endswith(".cmd"):
            w(cmd(out, f[:-4]))
    seen = set()
    for name, _, xs, _, _ in SWEEPS:
        for x in xs:
            for server, _ in SERVERS:
                c = cmd(out, "sweep-%s-%s-%s" % (name, x, server))
                if c != "(not run)" and c not in seen:
                    seen.add(c)
                    w(c)
    wl = (load(os.path.join(out, "callgrind.json")) or {}).get("workload")
    if wl:
        w("CALLGRIND_ROOMS=%s CALLGRIND_MEMBERS=%s CALLGRIND_COUNT=%s "
          "CALLGRIND_SIZE=%s CALLGRIND_MODE=%s bash bench/callgrind.sh" % (
              wl.get("rooms"), wl.get("members"), wl.get("count"),
              wl.get("size"), wl.get("mode")))
    w("```")
    w("")
    w("The servers' configurations are in bench/run.sh; ioa-bench's options "
      "and output fields in bench/README.md.")

    with open(report, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
