
/*
 * What a run reports: the server's processes as /proc sees them, a table
 * for people and one JSON object for programs.
 *
 * Server figures come from /proc/PID/status (VmRSS) and /proc/PID/stat
 * (utime + stime, in clock ticks) read at the start and the end of the
 * measured window (for --idle: before the first idle connection and after
 * the hold).  CPU % is ticks over the window's wall time, so two busy nginx
 * workers show up to 200%.  A pid that cannot be read is reported as such
 * rather than as zeros.
 *
 * Latency is reported as percentiles and max, never as a mean: the mean of
 * a long-tailed distribution describes no message anyone saw.  Figures are
 * microseconds in the JSON and scaled for reading in the table.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ioa_bench.h"


static void ib_report_table(FILE *f);
static void ib_report_json(FILE *f);


static int
ib_proc_read(int pid, long *rss_kb, unsigned long long *ticks, char *name,
    size_t name_size)
{
    int                 i;
    char                path[64], buf[4096], *p;
    FILE               *f;
    size_t              n;
    unsigned long long  ut, st;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);

    f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }

    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';

    /* the name is in parentheses and may itself hold spaces and ')' */
    p = strrchr(buf, ')');
    if (p == NULL) {
        return -1;
    }

    /* after ") ": state is field 3; utime and stime are fields 14 and 15 */
    p += 2;

    for (i = 3; i < 14 && p; i++) {
        p = strchr(p, ' ');
        p = p ? p + 1 : NULL;
    }

    if (p == NULL || sscanf(p, "%llu %llu", &ut, &st) != 2) {
        return -1;
    }

    *ticks = ut + st;

    snprintf(path, sizeof(path), "/proc/%d/status", pid);

    f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }

    *rss_kb = 0;

    while (fgets(buf, sizeof(buf), f)) {
        if (strncmp(buf, "Name:", 5) == 0 && name) {
            p = buf + 5;
            p += strspn(p, " \t");
            p[strcspn(p, "\n")] = '\0';
            snprintf(name, name_size, "%s", p);

        } else if (strncmp(buf, "VmRSS:", 6) == 0) {
            *rss_kb = strtol(buf + 6, NULL, 10);
        }
    }

    fclose(f);

    return 0;
}


static double
ib_self_cpu(void)
{
    struct rusage  ru;

    getrusage(RUSAGE_SELF, &ru);

    return (double) ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6
           + (double) ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}


void
ib_proc_sample(int end)
{
    long                rss;
    size_t              i;
    ib_proc_t          *p;
    unsigned long long  ticks;

    for (i = 0; i < ib.nprocs; i++) {
        p = &ib.procs[i];

        if (ib_proc_read(p->pid, &rss, &ticks, end ? NULL : p->name,
                         sizeof(p->name))
            != 0)
        {
            if (p->ok || !end) {
                ib_warn("cannot read /proc/%d: is --server-pid %d running?",
                        p->pid, p->pid);
            }

            p->ok = 0;
            continue;
        }

        if (end) {
            p->rss_end_kb = rss;
            p->ticks_end = ticks;

        } else {
            p->rss_start_kb = rss;
            p->ticks_start = ticks;
            p->ok = 1;
        }
    }

    if (end) {
        ib.self_cpu_end = ib_self_cpu();
        (void) ib_proc_read(getpid(), &ib.self_rss_kb, &ticks, NULL, 0);

    } else {
        ib.self_cpu_start = ib_self_cpu();
    }
}


void
ib_json_str(FILE *f, const char *s)
{
    fputc('"', f);

    for ( /* void */ ; *s; s++) {
        unsigned char  ch = (unsigned char) *s;

        if (ch == '"' || ch == '\\') {
            fprintf(f, "\\%c", ch);

        } else if (ch < 0x20) {
            fprintf(f, "\\u%04x", ch);

        } else {
            fputc(ch, f);
        }
    }

    fputc('"', f);
}


void
ib_fmt_ns(char *buf, size_t size, uint64_t ns)
{
    if (ns < 1000000) {
        snprintf(buf, size, "%.1f us", ns / 1e3);

    } else if (ns < 10 * IB_NS) {
        snprintf(buf, size, "%.2f ms", ns / 1e6);

    } else {
        snprintf(buf, size, "%.2f s", ns / 1e9);
    }
}


double
ib_window_s(void)
{
    double  s;

    s = (double) (ib.measure_end - ib.measure_start) / 1e9;

    return s > 0 ? s : 1e-9;
}


static uint64_t
ib_errors_total(void)
{
    return ib.err_connect + ib.err_handshake + ib.err_closed
           + ib.err_protocol + ib.err_server;
}


static double
ib_cpu_pct(const ib_proc_t *p)
{
    return (double) (p->ticks_end - p->ticks_start)
           / (double) sysconf(_SC_CLK_TCK) / ib_window_s() * 100.0;
}


static const struct {
    const char  *name;
    double       pct;
} ib_pcts[] = {
    { "p50", 50.0 }, { "p90", 90.0 }, { "p99", 99.0 }, { "p99_9", 99.9 },
    { "p99_99", 99.99 }
};

#define IB_NPCTS  (sizeof(ib_pcts) / sizeof(ib_pcts[0]))


static int
ib_load_mode(void)
{
    return ib.rooms > 0;
}


/* "latency     p50 .. max ..  (WHAT, N samples)" */

void
ib_report_latency_table(FILE *f, const char *what)
{
    size_t  i;
    char    a[32];

    fprintf(f, "latency    ");

    for (i = 0; i < IB_NPCTS; i++) {
        ib_fmt_ns(a, sizeof(a), ib_hist_percentile(&ib.hist,
                                                   ib_pcts[i].pct));
        fprintf(f, " %s %s ", i == 3 ? "p99.9" : i == 4 ? "p99.99"
                                                        : ib_pcts[i].name,
                a);
    }

    ib_fmt_ns(a, sizeof(a), ib.hist.max);
    fprintf(f, " max %s  (%s, %llu samples)\n", a, what,
            (unsigned long long) ib.hist.total);
}


void
ib_report_errors_table(FILE *f)
{
    fprintf(f, "errors      %llu  (connect %llu, handshake %llu, closed %llu, "
            "protocol %llu, server %llu)\n",
            (unsigned long long) ib_errors_total(),
            (unsigned long long) ib.err_connect,
            (unsigned long long) ib.err_handshake,
            (unsigned long long) ib.err_closed,
            (unsigned long long) ib.err_protocol,
            (unsigned long long) ib.err_server);

    if (ib.first_error[0]) {
        fprintf(f, "            first: %s\n", ib.first_error);
    }
}


void
ib_report_server_table(FILE *f)
{
    size_t      i;
    long        rss0, rss1;
    double      cpu;
    int         any;
    ib_proc_t  *p;

    any = 0;
    rss0 = rss1 = 0;
    cpu = 0;

    for (i = 0; i < ib.nprocs; i++) {
        p = &ib.procs[i];

        if (!p->ok) {
            fprintf(f, "server      pid %d: not readable\n", p->pid);
            continue;
        }

        fprintf(f, "server      pid %-7d %-14s cpu %6.1f%%  rss %8.1f MiB -> "
                "%8.1f MiB (%+.1f MiB)\n", p->pid, p->name, ib_cpu_pct(p),
                p->rss_start_kb / 1024.0, p->rss_end_kb / 1024.0,
                (p->rss_end_kb - p->rss_start_kb) / 1024.0);

        rss0 += p->rss_start_kb;
        rss1 += p->rss_end_kb;
        cpu += ib_cpu_pct(p);
        any++;
    }

    if (any > 1) {
        fprintf(f, "            total   %-14s cpu %6.1f%%  rss %8.1f MiB -> "
                "%8.1f MiB (%+.1f MiB)\n", "", cpu, rss0 / 1024.0,
                rss1 / 1024.0, (rss1 - rss0) / 1024.0);
    }

    if (any && !ib_load_mode() && ib.idle) {
        fprintf(f, "            %.0f bytes of server RSS per idle "
                "connection\n", (double) (rss1 - rss0) * 1024.0
                                / (double) ib.idle);
    }
}


static void
ib_report_table(FILE *f)
{
    char        a[32], b[32];
    double      w;

    w = ib_window_s();

    fprintf(f, "\nioa-bench %s  target %s  %s\n", IB_VERSION,
            ib.target == IB_TARGET_IOA ? "ioa" : "nchan", ib.url);

    if (ib_load_mode()) {
        fprintf(f, "workload    %ld rooms x %ld members, %ld publisher%s/room, "
                "%zu B messages, ", ib.rooms, ib.members, ib.publishers,
                ib.publishers == 1 ? "" : "s", ib.msg_bytes);

        if (ib.saturate) {
            fprintf(f, "saturate (window %ld)", ib.window);
        } else {
            fprintf(f, "%g msg/s per publisher", ib.rate);

            if (ib.arrivals == IB_ARRIVALS_POISSON) {
                fprintf(f, ", poisson arrivals (seed %llu)",
                        (unsigned long long) ib.seed);
            }
        }

        if (ib.count >= 0) {
            fprintf(f, ", %ld each", ib.count);
        }

        if (ib.target == IB_TARGET_IOA) {
            fprintf(f, ", echo %s", ib.echo ? "on" : "off (acks)");
        }

        fprintf(f, "\n");
    }

    if (ib_load_mode()) {
        fprintf(f, "run         %.2f s measured (warmup %.1f s)", w,
                ib.warmup);
    } else {
        fprintf(f, "run         %.2f s from the first connect to the end of "
                "the hold", w);
    }

    fprintf(f, "%s, %zu connections", ib.interrupted ? ", INTERRUPTED" : "",
            ib.nconns);

    if (ib.idle) {
        fprintf(f, " (%ld idle)", ib.idle);
    }

    fprintf(f, ", %zu open at the end\n", ib.open);

    if (ib_load_mode()) {
        fprintf(f, "throughput  published %10.0f msg/s  (%llu)\n",
                (double) ib.sent_window / w,
                (unsigned long long) ib.sent_window);
        fprintf(f, "            delivered %10.0f msg/s  (%llu, fan-out "
                "%.2f)\n", (double) ib.received_window / w,
                (unsigned long long) ib.received_window,
                ib.sent_window ? (double) ib.received_window
                                 / (double) ib.sent_window : 0.0);

        ib_report_latency_table(f, "send to receive");

        fprintf(f, "integrity   expected %llu, received %llu: lost %llu, "
                "duplicated %llu, reordered %llu  %s\n",
                (unsigned long long) ib.expected,
                (unsigned long long) ib.received_unique,
                (unsigned long long) ib.lost,
                (unsigned long long) ib.duplicated,
                (unsigned long long) ib.reordered,
                ib.lost || ib.duplicated || ib.reordered ? "FAILED" : "ok");

        if (!ib.drained) {
            fprintf(f, "            (the drain ended after %.1f s with "
                    "messages still missing)\n", ib.drain);
        }
    }

    ib_report_errors_table(f);
    ib_report_server_table(f);

    snprintf(b, sizeof(b), "%.1f%%", (ib.self_cpu_end - ib.self_cpu_start)
                                     / w * 100.0);
    fprintf(f, "generator   cpu %s  rss %.1f MiB", b, ib.self_rss_kb / 1024.0);

    if (ib_load_mode() && !ib.saturate) {
        ib_fmt_ns(a, sizeof(a), ib.max_lag_ns);
        fprintf(f, "  max send lag %s  deferred %llu  behind %llu", a,
                (unsigned long long) ib.deferred,
                (unsigned long long) ib.behind);
    }

    fprintf(f, "  setup %.2f s  connect %.2f s\n", ib.t_setup / 1e9,
            ib.t_connect / 1e9);
}


static void
ib_report_json(FILE *f)
{
    double  w;

    w = ib_window_s();

    fprintf(f, "{\"version\":\"%s\",\"params\":{\"target\":\"%s\",\"url\":",
            IB_VERSION, ib.target == IB_TARGET_IOA ? "ioa" : "nchan");
    ib_json_str(f, ib.url);
    fprintf(f, ",\"rooms\":%ld,\"members\":%ld,\"publishers\":%ld,"
            "\"size\":%ld,\"message_bytes\":%zu,\"mode\":\"%s\","
            "\"rate\":%g,\"arrivals\":%s,\"seed\":%llu,\"window\":%ld,"
            "\"duration_s\":%g,\"warmup_s\":%g,"
            "\"drain_s\":%g,\"idle\":%ld,\"echo\":%s,\"type\":",
            ib.rooms, ib.members, ib.publishers, ib.size, ib.msg_bytes,
            ib.saturate ? "saturate" : "rate", ib.saturate ? 0 : ib.rate,
            ib.saturate ? "null" : ib.arrivals == IB_ARRIVALS_POISSON
                                   ? "\"poisson\"" : "\"even\"",
            (unsigned long long) ib.seed,
            ib.saturate ? ib.window : 0, ib.duration, ib.warmup, ib.drain,
            ib.idle, ib.target != IB_TARGET_IOA ? "null"
                                                : ib.echo ? "true" : "false");

    if (ib.type >= 0) {
        fprintf(f, "%ld", ib.type);
    } else {
        fprintf(f, "null");
    }

    fprintf(f, ",\"count\":");

    if (ib.count >= 0) {
        fprintf(f, "%ld", ib.count);
    } else {
        fprintf(f, "null");
    }

    fprintf(f, ",\"prefix\":");
    ib_json_str(f, ib.prefix);
    fprintf(f, "},");

    fprintf(f, "\"interrupted\":%s,\"duration_s\":%.3f,"
            "\"connections\":{\"total\":%zu,\"idle\":%ld,\"opened\":%zu,"
            "\"open_at_end\":%zu,\"source_addresses\":%u},",
            ib.interrupted ? "true" : "false", w, ib.nconns, ib.idle,
            ib.opened, ib.open, ib.nsrc);

    fprintf(f, "\"published\":%llu,\"publish_rate\":%.1f,"
            "\"delivered\":%llu,\"delivery_rate\":%.1f,\"acks\":%llu,",
            (unsigned long long) ib.sent_window, (double) ib.sent_window / w,
            (unsigned long long) ib.received_window,
            (double) ib.received_window / w, (unsigned long long) ib.acks);

    ib_report_latency_json(f);

    fprintf(f, "\"integrity\":{\"published_total\":%llu,\"expected\":%llu,"
            "\"received\":%llu,\"lost\":%llu,\"duplicated\":%llu,"
            "\"reordered\":%llu,\"drained\":%s,\"ok\":%s},",
            (unsigned long long) ib.sent, (unsigned long long) ib.expected,
            (unsigned long long) ib.received_unique,
            (unsigned long long) ib.lost, (unsigned long long) ib.duplicated,
            (unsigned long long) ib.reordered, ib.drained ? "true" : "false",
            ib.lost || ib.duplicated || ib.reordered ? "false" : "true");

    ib_report_errors_json(f);
    ib_report_server_json(f, !ib_load_mode() && ib.idle);

    fprintf(f, ",\"generator\":{\"cpu_pct\":%.1f,\"rss_kb\":%ld,"
            "\"max_send_lag_us\":%.1f,\"deferred\":%llu,\"behind\":%llu,"
            "\"nchan_publish_replies\":%llu,\"setup_s\":%.3f,"
            "\"connect_s\":%.3f}}\n",
            (ib.self_cpu_end - ib.self_cpu_start) / w * 100.0,
            ib.self_rss_kb, ib.max_lag_ns / 1e3,
            (unsigned long long) ib.deferred,
            (unsigned long long) ib.behind,
            (unsigned long long) ib.nchan_replies, ib.t_setup / 1e9,
            ib.t_connect / 1e9);
}


/* "errors":{..}, with the comma after it */

void
ib_report_errors_json(FILE *f)
{
    fprintf(f, "\"errors\":{\"total\":%llu,\"connect\":%llu,\"handshake\":%llu,"
            "\"closed\":%llu,\"protocol\":%llu,\"server\":%llu,\"first\":",
            (unsigned long long) ib_errors_total(),
            (unsigned long long) ib.err_connect,
            (unsigned long long) ib.err_handshake,
            (unsigned long long) ib.err_closed,
            (unsigned long long) ib.err_protocol,
            (unsigned long long) ib.err_server);

    if (ib.first_error[0]) {
        ib_json_str(f, ib.first_error);
    } else {
        fprintf(f, "null");
    }

    fprintf(f, "},");
}


/* "latency_us":{..}, with the comma after it */

void
ib_report_latency_json(FILE *f)
{
    size_t  i;

    fprintf(f, "\"latency_us\":{\"count\":%llu,\"min\":%.1f",
            (unsigned long long) ib.hist.total,
            ib.hist.total ? ib.hist.min / 1e3 : 0.0);

    for (i = 0; i < IB_NPCTS; i++) {
        fprintf(f, ",\"%s\":%.1f", ib_pcts[i].name,
                ib_hist_percentile(&ib.hist, ib_pcts[i].pct) / 1e3);
    }

    fprintf(f, ",\"max\":%.1f},", ib.hist.max / 1e3);
}


/* "server":{..}, without a comma; idle: divide the RSS growth by --idle */

void
ib_report_server_json(FILE *f, int idle)
{
    size_t      i;
    long        rss0, rss1;
    double      cpu;
    int         any;
    ib_proc_t  *p;

    fprintf(f, "\"server\":{\"processes\":[");

    any = 0;
    rss0 = rss1 = 0;
    cpu = 0;

    for (i = 0; i < ib.nprocs; i++) {
        p = &ib.procs[i];

        fprintf(f, "%s{\"pid\":%d,\"readable\":%s", i ? "," : "", p->pid,
                p->ok ? "true" : "false");

        if (p->ok) {
            fprintf(f, ",\"name\":");
            ib_json_str(f, p->name);
            fprintf(f, ",\"rss_start_kb\":%ld,\"rss_end_kb\":%ld,"
                    "\"cpu_pct\":%.1f", p->rss_start_kb, p->rss_end_kb,
                    ib_cpu_pct(p));
            rss0 += p->rss_start_kb;
            rss1 += p->rss_end_kb;
            cpu += ib_cpu_pct(p);
            any++;
        }

        fprintf(f, "}");
    }

    fprintf(f, "]");

    if (any) {
        fprintf(f, ",\"rss_start_kb\":%ld,\"rss_end_kb\":%ld,"
                "\"rss_delta_kb\":%ld,\"cpu_pct\":%.1f,"
                "\"rss_per_conn_bytes\":", rss0, rss1, rss1 - rss0, cpu);

        if (idle) {
            fprintf(f, "%.0f", (double) (rss1 - rss0) * 1024.0
                               / (double) ib.idle);
        } else {
            fprintf(f, "null");
        }
    }

    fprintf(f, "}");
}


void
ib_report(void)
{
    FILE  *f;
    void (*table)(FILE *f), (*json)(FILE *f);

    table = ib.replay ? ib_replay_report_table : ib_report_table;
    json = ib.replay ? ib_replay_report_json : ib_report_json;

    table(ib.json && strcmp(ib.json, "-") == 0 ? stderr : stdout);

    if (ib.json == NULL) {
        return;
    }

    if (strcmp(ib.json, "-") == 0) {
        json(stdout);
        fflush(stdout);
        return;
    }

    f = fopen(ib.json, "w");
    if (f == NULL) {
        ib_die("cannot write %s", ib.json);
    }

    json(f);

    if (fclose(f) != 0) {
        ib_die("cannot write %s", ib.json);
    }
}
