
/*
 * ioa-agent: the reference agent runtime.  It plugs a program that only
 * knows run(task) -> result into an ioa hub, over the hub's HTTP transport.
 *
 * One process serves one agent name.  Everything runs on one thread around
 * one libcurl multi handle (loop.c); the parts are:
 *
 *   main.c      options, start-up, signals, orderly shutdown
 *   loop.c      the event loop: libcurl transfers, extra descriptors
 *               (child pipes, the signal self-pipe), timers, posted events
 *   hub.c       registration, the SSE inbox with resume, the ordered outbox
 *   sse.c       the Server-Sent Events parser (pure, incremental)
 *   task.c      IoA's task protocol: assignment -> progress -> result
 *   exec.c      the exec adapter: a child process per task
 *   http.c      the http adapter: POST <url>/run, IoA's tool-agent API
 *   a2a.c       the a2a adapter: an A2A agent (its card, JSON-RPC tasks)
 *   name.c      the hub's name rule, checked on --name
 *   log.c       one-line log records on stderr
 *
 * Allocation, buffers, JSON, clocks and randomness are shared with
 * ioa-worker: workers/common/ (ioa_common.h, the same ioa_ prefix).
 *
 * This header is the only one: the program is small, and one place that
 * lists every type and every cross-file call is easier to read than ten.
 */

#ifndef IOA_AGENT_H
#define IOA_AGENT_H


#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <curl/curl.h>
#include <yajl/yajl_tree.h>

#include "ioa_common.h"


#define IOA_AGENT_VERSION "0.1.0"

/* the hub's name rule (ngx_ioa.h NGX_IOA_NAME_*), checked on --name */
#define IOA_NAME_MAX_CHARS 64
#define IOA_NAME_MAX_BYTES 256
#define IOA_NAME_RULE                                                          \
    "1 to 64 characters of UTF-8, no control character, \"/\", \"{\" or "     \
    "\"}\", no space at either end, no invisible or bidirectional-control "   \
    "character, in Unicode NFC"

/* log.c */

enum { IOA_LOG_ERROR = 0, IOA_LOG_WARN, IOA_LOG_INFO, IOA_LOG_DEBUG };

extern int         ioa_log_level;
extern const char *ioa_log_agent;

void ioa_log(int level, const char *fmt, ...) IOA_PRINTF(2, 3);
void ioa_log_fatal(const char *msg);

#define ioa_log_error(...) ioa_log(IOA_LOG_ERROR, __VA_ARGS__)
#define ioa_log_warn(...)  ioa_log(IOA_LOG_WARN, __VA_ARGS__)
#define ioa_log_info(...)  ioa_log(IOA_LOG_INFO, __VA_ARGS__)
#define ioa_log_debug(...)                                                     \
    do {                                                                       \
        if (ioa_log_level >= IOA_LOG_DEBUG) {                                  \
            ioa_log(IOA_LOG_DEBUG, __VA_ARGS__);                               \
        }                                                                      \
    } while (0)


/* name.c */

int ioa_valid_name(const char *name);


/* loop.c: the event loop */

typedef struct ioa_fd_s    ioa_fd_t;
typedef struct ioa_timer_s ioa_timer_t;
typedef struct ioa_xfer_s  ioa_xfer_t;
typedef struct ioa_event_s ioa_event_t;

typedef void (*ioa_fd_handler_pt)(ioa_fd_t *f, short revents);
typedef void (*ioa_timer_handler_pt)(ioa_timer_t *t);
typedef void (*ioa_xfer_done_pt)(ioa_xfer_t *x, CURLcode rc);
typedef void (*ioa_event_handler_pt)(ioa_event_t *ev);
typedef void (*ioa_signal_handler_pt)(int signo);

struct ioa_fd_s {
    int               fd;
    short             events; /* POLLIN or POLLOUT */
    ioa_fd_handler_pt handler;
    void             *data;
    ioa_fd_t         *next;
    unsigned          active:1;
};

struct ioa_timer_s {
    uint64_t             when; /* ioa_mono_ms() */
    uint64_t             gen;  /* when it was armed, see loop.c */
    ioa_timer_handler_pt handler;
    void                *data;
    ioa_timer_t         *next;
    unsigned             active:1;
};

struct ioa_xfer_s {
    CURL            *easy;
    ioa_xfer_done_pt done;
    void            *data;
    unsigned         active:1;
};

struct ioa_event_s {
    ioa_event_handler_pt handler;
    void                *data;
    ioa_event_t         *next;
    unsigned             posted:1;
};

int  ioa_loop_init(ioa_signal_handler_pt on_signal);
void ioa_loop_once(void);
void ioa_loop_done(void);
void ioa_fd_add(ioa_fd_t *f);
void ioa_fd_del(ioa_fd_t *f);
void ioa_timer_add(ioa_timer_t *t, uint64_t ms);
void ioa_timer_del(ioa_timer_t *t);
int  ioa_xfer_start(ioa_xfer_t *x);
void ioa_xfer_stop(ioa_xfer_t *x);
void ioa_post_event(ioa_event_t *ev);
void ioa_delete_posted_event(ioa_event_t *ev);


/* main.c: configuration and lifetime */

typedef struct {
    const char  *hub; /* base URL, no trailing '/' */
    const char  *token; /* bearer token (JWT) for the hub, or NULL */
    const char  *name;
    const char  *type;
    const char  *desc;
    const char **tags;
    size_t       ntags;
    char *const *exec_argv; /* NULL-terminated, or NULL */
    const char  *http_url;  /* tool agent base URL, or NULL */
    const char  *a2a_url;   /* A2A agent base or card URL, or NULL */
    const char  *a2a_card;  /* its card's URL, once fetched (a2a.c) */
    unsigned     timeout;   /* seconds, 0: none */
    int          partial_exit; /* exit status meaning partial, -1: none */
    size_t       max_result;
    unsigned     backoff_max; /* ms */
    unsigned     speaks_protocol:1;
} ioa_conf_t;

extern ioa_conf_t ioa_conf;

void ioa_shutdown(int exit_code, const char *why);
int  ioa_shutting_down(void);


/* hub.c: the hub connection */

typedef struct ioa_post_s ioa_post_t;

struct ioa_post_s {
    ioa_post_t *next;
    char       *comm_id;
    long long   type;
    const char *what;      /* for the log: "progress", ... */
    const char *key_field; /* "task_id" or "reply_to" */
    char       *key;       /* identifies it in the room log */
    ioa_buf_t   body;
    ioa_buf_t   fallback; /* sent instead after a 413 */
};

int    ioa_hub_init(void);
void   ioa_hub_start(void);
void   ioa_hub_stop(void);
void   ioa_hub_post(ioa_post_t *p);
size_t ioa_hub_outbox_len(void);
void   ioa_hub_cleanup(void);


/* sse.c: the event stream parser */

typedef struct {
    const char *event; /* "" for unnamed events */
    const char *data;
    size_t      data_len;
    const char *id;
    unsigned    has_id:1;
    unsigned    has_data:1;
} ioa_sse_event_t;

typedef int (*ioa_sse_handler_pt)(void *ctx, ioa_sse_event_t *ev);

typedef struct {
    ioa_buf_t          line;
    ioa_buf_t          data;
    ioa_buf_t          event;
    ioa_buf_t          id;
    size_t             max;
    long               retry; /* ms, -1 until the server says */
    ioa_sse_handler_pt handler;
    void              *ctx;
    unsigned           has_id:1;
    unsigned           has_data:1;
    unsigned           cr:1;
    unsigned           started:1;
} ioa_sse_parser_t;

void ioa_sse_init(ioa_sse_parser_t *p, size_t max, ioa_sse_handler_pt h,
                  void *ctx);
void ioa_sse_reset(ioa_sse_parser_t *p);
int  ioa_sse_feed(ioa_sse_parser_t *p, const char *buf, size_t len);
void ioa_sse_free(ioa_sse_parser_t *p);


/* task.c: the task protocol */

typedef enum {
    IOA_TASK_COMPLETED = 0,
    IOA_TASK_FAILED,
    IOA_TASK_TIMED_OUT,
    IOA_TASK_PARTIAL               /* done in part: the result says how far */
} ioa_task_status_e;

typedef enum {
    IOA_TASK_ASSIGNED = 0, /* SYNC/ASYNC_TASK_ASSIGNMENT */
    IOA_TASK_TURN          /* a DISCUSSION turn (--speaks-protocol) */
} ioa_task_kind_e;

typedef struct ioa_task_s    ioa_task_t;
typedef struct ioa_adapter_s ioa_adapter_t;

struct ioa_adapter_s {
    const char *name;
    void (*start)(ioa_task_t *t);
    void (*cancel)(ioa_task_t *t);
};

struct ioa_task_s {
    ioa_task_t     *next;
    ioa_task_kind_e kind;
    char           *comm_id;
    char           *source_id; /* the assignment's envelope id */
    char           *assigner;
    char           *task_id;
    char           *task_desc;
    char           *task_abstract;
    const char     *cancel_why; /* set before adapter->cancel() */
    ioa_buf_t       input; /* what the adapter is given */
    uint64_t        started;
    void           *adapter_data;
    ioa_event_t     free_ev;
    unsigned        sync:1;
    unsigned        cancelled:1;
    unsigned        finished:1;
};

extern const ioa_adapter_t ioa_exec_adapter;
extern const ioa_adapter_t ioa_http_adapter;
extern const ioa_adapter_t ioa_a2a_adapter;

void ioa_task_envelope(yajl_val env);
void ioa_task_note(ioa_task_t *t, const char *note, size_t len);
const char *ioa_task_key(ioa_task_t *t);
void ioa_task_finish(ioa_task_t *t, ioa_task_status_e status, const char *text,
                     size_t len, size_t total);
void ioa_task_cancel_all(void);
size_t      ioa_task_running(void);
const char *ioa_task_status_name(ioa_task_status_e status);


/* a2a.c */

int ioa_a2a_discover(void);


/* exec.c */

void ioa_exec_sigchld(void);
void ioa_exec_kill_all(void);


#endif /* IOA_AGENT_H */
