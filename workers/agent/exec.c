
/*
 * The exec adapter: each task runs the configured program once.
 *
 *   argv       exactly as given after --exec: no shell, no interpolation,
 *              the task text never becomes an argument
 *   stdin      the task (IoA's markdown), then EOF
 *   stdout     the result (up to --max-result bytes are kept; the rest is
 *              read and counted so the program never blocks on a full pipe)
 *   stderr     logged line by line, and its tail reported when the program
 *              fails
 *   exit 0     completed; any other exit or a signal: failed
 *   --timeout  SIGTERM, then SIGKILL IOA_EXEC_KILL_DELAY ms later: timed_out
 *
 * A task is a small state machine driven by the loop:
 *
 *   spawned --(stdin written, stdout+stderr at EOF, child reaped)--> done
 *      |  deadline: SIGTERM to the group ... kill timer: SIGKILL
 *      |  reaped but a pipe still open (a grandchild holds it): wait
 *      |  IOA_EXEC_LINGER ms, then close it and finish
 *
 * posix_spawnp() rather than fork()+exec(): it is glibc's vfork-style
 * spawn, cheap with libcurl's memory mapped, it reports a program that
 * cannot be run as an error code right here instead of an exit status 127
 * from a child, and there is no child code of ours that would have to be
 * async-signal-safe.  The child gets its own process group, so a timeout
 * or a shutdown stops whatever the program started too (a shell script's
 * children), and signal dispositions and mask reset to defaults (we ignore
 * SIGPIPE and catch others; a child must not inherit that).  Descriptors
 * from 3 up are closed in the child: libcurl's sockets are not all
 * close-on-exec, and a child holding the inbox socket would keep a dead
 * agent's stream open.
 *
 * Children are reaped on SIGCHLD (through the loop's self-pipe) with
 * waitpid() on each of our pids, never waitpid(-1), so nothing else's
 * child is taken.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ioa_agent.h"


#define IOA_EXEC_KILL_DELAY 2000 /* ms from SIGTERM to SIGKILL */
#define IOA_EXEC_LINGER     1000 /* ms to drain pipes after exit */
#define IOA_EXEC_TAIL       2048 /* bytes of stderr in a failure */
#define IOA_EXEC_LOG_LINES  100  /* stderr lines logged per task */
#define IOA_EXEC_LOG_LINE   500  /* bytes logged per stderr line */


extern char **environ;


typedef struct ioa_exec_s ioa_exec_t;

struct ioa_exec_s {
    ioa_exec_t *next;
    ioa_task_t *task;
    pid_t       pid;
    int         status;
    ioa_fd_t    in;
    ioa_fd_t    out;
    ioa_fd_t    err;
    size_t      in_off;
    ioa_buf_t   out_buf;
    size_t      out_total;
    ioa_buf_t   err_tail;
    ioa_buf_t   err_line;
    unsigned    err_logged;
    ioa_timer_t deadline;
    ioa_timer_t kill;
    ioa_timer_t linger;
    unsigned    exited:1;
    unsigned    timed_out:1;
    unsigned    cancelled:1;
    unsigned    lingered:1;
};


static void ioa_exec_start(ioa_task_t *t);
static void ioa_exec_cancel(ioa_task_t *t);
static void ioa_exec_stdin(ioa_fd_t *f, short revents);
static void ioa_exec_stdout(ioa_fd_t *f, short revents);
static void ioa_exec_stderr(ioa_fd_t *f, short revents);
static void ioa_exec_close(ioa_fd_t *f);
static void ioa_exec_stderr_lines(ioa_exec_t *e, int flush);
static void ioa_exec_check(ioa_exec_t *e);
static void ioa_exec_done(ioa_exec_t *e);
static void ioa_exec_stop(ioa_exec_t *e, const char *why);
static void ioa_exec_deadline_handler(ioa_timer_t *t);
static void ioa_exec_kill_handler(ioa_timer_t *t);
static void ioa_exec_linger_handler(ioa_timer_t *t);


const ioa_adapter_t ioa_exec_adapter = { "exec", ioa_exec_start,
                                         ioa_exec_cancel };


static ioa_exec_t *ioa_execs;


static void
ioa_exec_start(ioa_task_t *t)
{
    int                        i, rc, in[2], out[2], err[2];
    char *const               *argv;
    sigset_t                   sigs;
    ioa_buf_t                  msg = { 0 };
    ioa_exec_t                *e;
    posix_spawnattr_t          attr;
    posix_spawn_file_actions_t fa;

    argv = ioa_conf.exec_argv;

    in[0] = in[1] = out[0] = out[1] = err[0] = err[1] = -1;

    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0
        || pipe2(err, O_CLOEXEC) != 0)
    {
        rc = errno;
        goto failed;
    }

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
    posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);

    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP
                                        | POSIX_SPAWN_SETSIGDEF
                                        | POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setpgroup(&attr, 0);

    sigemptyset(&sigs);
    sigaddset(&sigs, SIGPIPE);
    sigaddset(&sigs, SIGCHLD);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    posix_spawnattr_setsigdefault(&attr, &sigs);

    sigemptyset(&sigs);
    posix_spawnattr_setsigmask(&attr, &sigs);

    e = ioa_calloc(sizeof(ioa_exec_t));

    rc = posix_spawnp(&e->pid, argv[0], &fa, &attr, argv, environ);

    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);

    close(in[0]);
    close(out[1]);
    close(err[1]);
    in[0] = out[1] = err[1] = -1;

    if (rc != 0) {
        free(e);
        goto failed;
    }

    e->task = t;
    t->adapter_data = e;

    fcntl(in[1], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);

    e->in.fd = in[1];
    e->in.events = POLLOUT;
    e->in.handler = ioa_exec_stdin;
    e->in.data = e;

    e->out.fd = out[0];
    e->out.events = POLLIN;
    e->out.handler = ioa_exec_stdout;
    e->out.data = e;

    e->err.fd = err[0];
    e->err.events = POLLIN;
    e->err.handler = ioa_exec_stderr;
    e->err.data = e;

    ioa_fd_add(&e->in);
    ioa_fd_add(&e->out);
    ioa_fd_add(&e->err);

    e->deadline.handler = ioa_exec_deadline_handler;
    e->deadline.data = e;
    e->kill.handler = ioa_exec_kill_handler;
    e->kill.data = e;
    e->linger.handler = ioa_exec_linger_handler;
    e->linger.data = e;

    if (ioa_conf.timeout) {
        ioa_timer_add(&e->deadline, (uint64_t) ioa_conf.timeout * 1000);
    }

    e->next = ioa_execs;
    ioa_execs = e;

    ioa_log_info("task %s: started \"%s\" (pid %ld)", ioa_task_key(t),
                 argv[0], (long) e->pid);

    return;

failed:

    for (i = 0; i < 2; i++) {
        if (in[i] != -1) {
            close(in[i]);
        }

        if (out[i] != -1) {
            close(out[i]);
        }

        if (err[i] != -1) {
            close(err[i]);
        }
    }

    ioa_buf_addf(&msg, "cannot run \"%s\": %s", argv[0], strerror(rc));
    ioa_task_finish(t, IOA_TASK_FAILED, msg.data, msg.len, msg.len);
    ioa_buf_free(&msg);
}


static void
ioa_exec_close(ioa_fd_t *f)
{
    if (f->fd == -1) {
        return;
    }

    ioa_fd_del(f);
    close(f->fd);
    f->fd = -1;
}


static void
ioa_exec_stdin(ioa_fd_t *f, short revents)
{
    ssize_t     n;
    ioa_exec_t *e;
    ioa_task_t *t;

    (void) revents;

    e = f->data;
    t = e->task;

    while (e->in_off < t->input.len) {
        n = write(f->fd, t->input.data + e->in_off, t->input.len - e->in_off);

        if (n > 0) {
            e->in_off += (size_t) n;
            continue;
        }

        if (n < 0 && errno == EINTR) {
            continue;
        }

        if (n < 0 && errno == EAGAIN) {
            return;
        }

        /* EPIPE: the program does not read its input; that is its
         * business, not a failure */
        ioa_log_debug("task %s: stdin closed early: %s", t->task_id,
                      strerror(errno));
        break;
    }

    ioa_exec_close(f);
    ioa_exec_check(e);
}


static void
ioa_exec_stdout(ioa_fd_t *f, short revents)
{
    char        buf[16384];
    size_t      keep;
    ssize_t     n;
    ioa_exec_t *e;

    (void) revents;

    e = f->data;

    for (;;) {
        n = read(f->fd, buf, sizeof(buf));

        if (n > 0) {
            e->out_total += (size_t) n;

            /* a few bytes over the budget: the cut is made by
             * ioa_task_finish() on a character boundary */
            if (e->out_buf.len < ioa_conf.max_result + 4) {
                keep = ioa_conf.max_result + 4 - e->out_buf.len;
                ioa_buf_add(&e->out_buf, buf,
                            (size_t) n < keep ? (size_t) n : keep);
            }

            continue;
        }

        if (n < 0 && errno == EINTR) {
            continue;
        }

        if (n < 0 && errno == EAGAIN) {
            return;
        }

        break; /* EOF or an error */
    }

    ioa_exec_close(f);
    ioa_exec_check(e);
}


static void
ioa_exec_stderr(ioa_fd_t *f, short revents)
{
    char        buf[4096];
    ssize_t     n;
    ioa_exec_t *e;

    (void) revents;

    e = f->data;

    for (;;) {
        n = read(f->fd, buf, sizeof(buf));

        if (n > 0) {
            ioa_buf_add(&e->err_tail, buf, (size_t) n);

            if (e->err_tail.len > 2 * IOA_EXEC_TAIL) {
                memmove(e->err_tail.data,
                        e->err_tail.data + e->err_tail.len - IOA_EXEC_TAIL,
                        IOA_EXEC_TAIL);
                e->err_tail.len = IOA_EXEC_TAIL;
            }

            if (e->err_logged <= IOA_EXEC_LOG_LINES) {
                ioa_buf_add(&e->err_line, buf, (size_t) n);
                ioa_exec_stderr_lines(e, 0);
            }

            continue;
        }

        if (n < 0 && errno == EINTR) {
            continue;
        }

        if (n < 0 && errno == EAGAIN) {
            return;
        }

        break;
    }

    ioa_exec_stderr_lines(e, 1);
    ioa_exec_close(f);
    ioa_exec_check(e);
}


/* logs the complete lines in err_line (all of it when flushing) */

static void
ioa_exec_stderr_lines(ioa_exec_t *e, int flush)
{
    char       *p, *nl, *end;
    size_t      len;
    ioa_task_t *t;

    if (e->err_line.len == 0) {
        return;
    }

    t = e->task;
    p = e->err_line.data;
    end = p + e->err_line.len;

    while (p < end) {
        nl = memchr(p, '\n', end - p);

        if (nl == NULL && !flush) {
            break;
        }

        len = nl ? (size_t) (nl - p) : (size_t) (end - p);

        if (e->err_logged < IOA_EXEC_LOG_LINES) {
            ioa_log_info(
                "task %s stderr: %.*s", ioa_task_key(t),
                (int) (len > IOA_EXEC_LOG_LINE ? IOA_EXEC_LOG_LINE : len), p);

        } else if (e->err_logged == IOA_EXEC_LOG_LINES) {
            ioa_log_info("task %s: further stderr is not logged",
                         ioa_task_key(t));
        }

        e->err_logged++;
        p = nl ? nl + 1 : end;
    }

    len = (size_t) (end - p);

    /* a line that never ends must not grow without bound */
    if (len > IOA_EXEC_LOG_LINE * 4) {
        len = 0;
    }

    memmove(e->err_line.data, p, len);
    e->err_line.len = len;

    if (e->err_logged > IOA_EXEC_LOG_LINES) {
        ioa_buf_free(&e->err_line);
    }
}


void
ioa_exec_sigchld(void)
{
    int         status;
    pid_t       r;
    ioa_exec_t *e, *next;

    for (e = ioa_execs; e; e = next) {
        next = e->next;

        if (e->exited) {
            continue;
        }

        do {
            r = waitpid(e->pid, &status, WNOHANG);
        } while (r < 0 && errno == EINTR);

        if (r != e->pid) {
            continue;
        }

        e->exited = 1;
        e->status = status;

        if (e->timed_out || e->cancelled) {
            /* whatever the program left behind goes with it */
            kill(-e->pid, SIGKILL);
        }

        ioa_timer_del(&e->deadline);
        ioa_timer_del(&e->kill);

        ioa_log_debug("task %s: pid %ld exited (status 0x%x)", e->task->task_id,
                      (long) e->pid, status);

        ioa_exec_check(e);
    }
}


static void
ioa_exec_check(ioa_exec_t *e)
{
    if (!e->exited) {
        return;
    }

    if (e->in.fd != -1 || e->out.fd != -1 || e->err.fd != -1) {
        if (e->timed_out || e->cancelled || e->lingered) {
            ioa_exec_close(&e->in);
            ioa_exec_close(&e->out);
            ioa_exec_close(&e->err);

        } else {
            if (!e->linger.active) {
                ioa_timer_add(&e->linger, IOA_EXEC_LINGER);
            }

            return;
        }
    }

    ioa_exec_done(e);
}


static void
ioa_exec_linger_handler(ioa_timer_t *t)
{
    ioa_exec_t *e = t->data;

    /* the program exited but something it started still holds a pipe */
    e->lingered = 1;

    if (e->out.fd != -1) {
        ioa_exec_stdout(&e->out, 0); /* what is already there */
    }

    if (e->err.fd != -1) {
        ioa_exec_stderr(&e->err, 0);
    }

    ioa_exec_check(e);
}


static void
ioa_exec_done(ioa_exec_t *e)
{
    size_t            len, total, start;
    ioa_buf_t         msg = { 0 };
    const char       *text;
    ioa_exec_t      **pp;
    ioa_task_t       *t;
    ioa_task_status_e status;

    t = e->task;

    for (pp = &ioa_execs; *pp; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }

    ioa_timer_del(&e->deadline);
    ioa_timer_del(&e->kill);
    ioa_timer_del(&e->linger);

    /* the stderr tail from a line start, without trailing blanks */
    start = 0;

    if (e->err_tail.len > IOA_EXEC_TAIL) {
        start = e->err_tail.len - IOA_EXEC_TAIL;
    }

    if (start) {
        while (start < e->err_tail.len && e->err_tail.data[start - 1] != '\n') {
            start++;
        }
    }

    len = e->err_tail.len;

    while (len > start && strchr(" \t\r\n", e->err_tail.data[len - 1])) {
        len--;
    }

    if (e->cancelled) {
        status = IOA_TASK_FAILED;
        ioa_buf_adds(&msg, e->task->cancel_why);

    } else if (e->timed_out) {
        status = IOA_TASK_TIMED_OUT;
        ioa_buf_addf(&msg, "no result within %u s; the program was stopped",
                     ioa_conf.timeout);

    } else if (WIFEXITED(e->status) && WEXITSTATUS(e->status) == 0) {
        status = IOA_TASK_COMPLETED;

    } else if (WIFEXITED(e->status)
               && WEXITSTATUS(e->status) == ioa_conf.partial_exit)
    {
        /* --partial-exit: the program did part of the task; its output is
         * the result so far, and the coordinator may hand it back */
        status = IOA_TASK_PARTIAL;

    } else if (WIFEXITED(e->status)) {
        status = IOA_TASK_FAILED;
        ioa_buf_addf(&msg, "exit status %d", WEXITSTATUS(e->status));

    } else {
        status = IOA_TASK_FAILED;
        ioa_buf_addf(&msg, "killed by signal %d (%s)", WTERMSIG(e->status),
                     strsignal(WTERMSIG(e->status)));
    }

    if (status == IOA_TASK_COMPLETED || status == IOA_TASK_PARTIAL) {
        /* like $(...) in a shell: trailing newlines are not content */
        len = e->out_buf.len;

        while (len && strchr(" \t\r\n", e->out_buf.data[len - 1])) {
            len--;
        }

        text = len ? e->out_buf.data : "";
        total = e->out_total - (e->out_buf.len - len);

    } else {
        if (len > start) {
            ioa_buf_adds(&msg, "\n");
            ioa_buf_add(&msg, e->err_tail.data + start, len - start);
        }

        text = msg.data;
        len = msg.len;
        total = len;
    }

    t->adapter_data = NULL;

    ioa_task_finish(t, status, text, len, total);

    ioa_buf_free(&msg);
    ioa_buf_free(&e->out_buf);
    ioa_buf_free(&e->err_tail);
    ioa_buf_free(&e->err_line);
    free(e);
}


static void
ioa_exec_stop(ioa_exec_t *e, const char *why)
{
    ioa_log_warn("task %s: %s, stopping pid %ld (SIGTERM)",
                 ioa_task_key(e->task), why, (long) e->pid);

    kill(-e->pid, SIGTERM);
    ioa_timer_add(&e->kill, IOA_EXEC_KILL_DELAY);
}


static void
ioa_exec_deadline_handler(ioa_timer_t *t)
{
    char        why[64];
    ioa_exec_t *e;

    e = t->data;

    if (e->exited) {
        return;
    }

    e->timed_out = 1;
    snprintf(why, sizeof(why), "no result within %u s", ioa_conf.timeout);
    ioa_exec_stop(e, why);
}


static void
ioa_exec_kill_handler(ioa_timer_t *t)
{
    ioa_exec_t *e = t->data;

    if (e->exited) {
        return;
    }

    ioa_log_warn("task %s: pid %ld still running, SIGKILL", e->task->task_id,
                 (long) e->pid);

    kill(-e->pid, SIGKILL);
}


static void
ioa_exec_cancel(ioa_task_t *t)
{
    ioa_exec_t *e = t->adapter_data;

    /* a program that already exited keeps its real result */
    if (e == NULL || e->exited || e->cancelled) {
        return;
    }

    e->cancelled = 1;
    ioa_exec_stop(e, t->cancel_why);
}


/* the last resort when the agent must exit now */

void
ioa_exec_kill_all(void)
{
    ioa_exec_t *e;

    for (e = ioa_execs; e; e = e->next) {
        if (!e->exited) {
            kill(-e->pid, SIGKILL);
        }
    }
}
