
/*
 * Copyright (C) ioa authors
 *
 * Private to the A2A facade: ngx_ioa_a2a.c (the directive, JSON-RPC and
 * the operations), ngx_ioa_a2a_task.c (the task as a goal's record and
 * feed tell it: streams, waits, A2A's JSON), ngx_ioa_a2a_card.c (the agent
 * card).  The design is described at the top of ngx_ioa_a2a.c.
 */


#ifndef _NGX_IOA_A2A_H_INCLUDED_
#define _NGX_IOA_A2A_H_INCLUDED_


/* A2A's own error codes */
#define NGX_IOA_A2A_TASK_NOT_FOUND        -32001
#define NGX_IOA_A2A_NOT_CANCELABLE        -32002
#define NGX_IOA_A2A_NO_PUSH               -32003
#define NGX_IOA_A2A_UNSUPPORTED           -32004
#define NGX_IOA_A2A_CONTENT_TYPE          -32005
#define NGX_IOA_A2A_VERSION               -32009

/* how long a cancel waits for the goal to end */
#define NGX_IOA_A2A_CANCEL_WAIT           10000
/* messages a blocking answer's history holds, and their bytes */
#define NGX_IOA_A2A_HISTORY_MAX           100
#define NGX_IOA_A2A_HISTORY_BYTES         (256 * 1024)
/* the bytes of a client's messageId */
#define NGX_IOA_A2A_MESSAGE_ID_MAX   256

/* how long a task waits for its user's input, unless metadata.ioa says */
#define NGX_IOA_A2A_INPUT_TIMEOUT         "300"
/* agents the card lists as skills */
#define NGX_IOA_A2A_SKILLS_MAX            "100"
/* a goal id: the hub's are 32 hex digits */
#define NGX_IOA_A2A_ID_MAX                64


struct ngx_ioa_a2a_conf_s {
    ngx_str_t                 api;        /* the ioa_api prefix, "" for / */
    ngx_str_t                 url;        /* the JSON-RPC endpoint */
    ngx_str_t                 name;
};


typedef enum {
    NGX_IOA_A2A_SEND = 0,
    NGX_IOA_A2A_STREAM,
    NGX_IOA_A2A_GET,
    NGX_IOA_A2A_CANCEL,
    NGX_IOA_A2A_SUBSCRIBE,
    NGX_IOA_A2A_CARD
} ngx_ioa_a2a_op_e;


/* a goal's state as A2A says it; rank orders the states a goal passes */
typedef struct {
    ngx_str_t                 ioa;
    const char               *v03;
    const char               *v10;
    ngx_uint_t                rank;
} ngx_ioa_a2a_state_t;

#define NGX_IOA_A2A_RANK_END  4

/* the goal states in the order a goal passes them; [0] is "queued", [2]
 * "running", [3] "cancelling" */
extern ngx_ioa_a2a_state_t  ngx_ioa_a2a_states[];

#define NGX_IOA_A2A_QUEUED      (&ngx_ioa_a2a_states[0])
#define NGX_IOA_A2A_RUNNING     (&ngx_ioa_a2a_states[2])
#define NGX_IOA_A2A_CANCELLING  (&ngx_ioa_a2a_states[3])


typedef struct ngx_ioa_a2a_s  ngx_ioa_a2a_t;

/* the task, as far as the goal's record and feed have told it */
typedef struct {
    ngx_ioa_a2a_state_t      *state;
    ngx_str_t                 comm_id;
    ngx_str_t                 conclusion;
    ngx_str_t                 error;
    ngx_str_t                 question;      /* to the person, if waited */
    ngx_uint_t                awaiting;      /* for the person's input */
    int64_t                   updated;       /* ms */
    ngx_array_t              *history;       /* ngx_str_t: messages */
    size_t                    history_bytes;
} ngx_ioa_a2a_task_t;


struct ngx_ioa_a2a_s {
    ngx_ioa_call_t            call;          /* must be first */
    ngx_ioa_a2a_conf_t       *conf;
    ngx_http_request_t       *request;
    ngx_str_t                 rpc_id;
    ngx_ioa_a2a_op_e          op;
    ngx_uint_t                v10;           /* the 1.0 dialect */
    ngx_uint_t                blocking;
    ngx_uint_t                answered;      /* a message went to the goal */
    ngx_int_t                 history_length;    /* -1: not asked */
    ngx_str_t                 goal_id;
    ngx_str_t                 user;          /* the user's message, built */
    ngx_str_t                 user_id;       /* and its messageId */
    ngx_ioa_sid_t             since;         /* Last-Event-ID */
    ngx_uint_t                has_since;
    ngx_ioa_sid_t             from;          /* the feed's end, before */
    ngx_uint_t                has_from;
    ngx_str_t                 path;          /* the operation's endpoint */
    ngx_str_t                 body;
    ngx_ioa_a2a_task_t        task;
    ngx_ioa_wait_t           *wait;          /* blocking send, cancel */
    ngx_ioa_identity_t       *who;           /* its "exp" ends a stream */
};


/* ngx_ioa_a2a.c */
void ngx_ioa_a2a_answer(ngx_http_request_t *r, ngx_ioa_a2a_t *a);
void ngx_ioa_a2a_fail(ngx_http_request_t *r, ngx_ioa_a2a_t *a,
    ngx_uint_t status, ngx_int_t code, ngx_ioa_error_t *err);

/* ngx_ioa_a2a_task.c */
ngx_int_t ngx_ioa_a2a_stream(ngx_http_request_t *r, ngx_ioa_a2a_t *a,
    ngx_uint_t follow);
ngx_int_t ngx_ioa_a2a_wait(ngx_http_request_t *r, ngx_ioa_a2a_t *a,
    ngx_msec_t timeout);
ngx_ioa_a2a_state_t *ngx_ioa_a2a_state(ngx_str_t *ioa);
ngx_int_t ngx_ioa_a2a_task_result(ngx_ioa_a2a_t *a, ngx_pool_t *pool,
    ngx_uint_t wrap, ngx_ioa_jbuf_t *b);

/* ngx_ioa_a2a_card.c */
void ngx_ioa_a2a_card(ngx_http_request_t *r, ngx_ioa_a2a_t *a);


#endif /* _NGX_IOA_A2A_H_INCLUDED_ */
