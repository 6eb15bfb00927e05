
/*
 * ioa: parse, validate and normalise one IoA AgentMessage.
 */


#ifndef _NGX_IOA_ENVELOPE_H_INCLUDED_
#define _NGX_IOA_ENVELOPE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa_json.h"


/* CommunicationState, as IoA puts it on the wire */
/* a comm_id: 1 to 64 characters of A-Z, a-z, 0-9, "_" and "-" */
#define NGX_IOA_COMM_ID_MAX                      64

#define NGX_IOA_STATE_TEAMUP                     0
#define NGX_IOA_STATE_DISCUSSION                 1
#define NGX_IOA_STATE_VOTE                       2
#define NGX_IOA_STATE_EXECUTION                  3

/* CommunicationType; NONE: the envelope has no "type" (plain chat) */
#define NGX_IOA_TYPE_NONE                        -1
#define NGX_IOA_TYPE_DEFAULT                     0
#define NGX_IOA_TYPE_PROPOSAL                    1
#define NGX_IOA_TYPE_VOTE                        2
#define NGX_IOA_TYPE_VOTING_RESULT               3
#define NGX_IOA_TYPE_DISCUSSION                  4
#define NGX_IOA_TYPE_SYNC_TASK_ASSIGNMENT        5
#define NGX_IOA_TYPE_ASYNC_TASK_ASSIGNMENT       6
#define NGX_IOA_TYPE_INFORM_TASK_RESULT          7
#define NGX_IOA_TYPE_INFORM_TASK_PROGRESS        8
#define NGX_IOA_TYPE_PAUSE                       9
#define NGX_IOA_TYPE_CONCLUDE_GROUP_DISCUSSION   10
#define NGX_IOA_TYPE_CONCLUSION                  11


typedef struct {
    /*
     * An envelope: {"sender":..,"timestamp":..,<the client's other
     * members in order>}, compact, with no "id" (prepended right after
     * the "{" at delivery).  A control frame: a pool copy of the raw
     * input, for ngx_ioa_json_parse().
     */
    ngx_str_t            json;

    ngx_str_t            comm_id;       /* pool copy; empty for control */
    ngx_int_t            type;          /* NGX_IOA_TYPE_NONE if absent */
    ngx_int_t            state;         /* 0 if absent */
    ngx_array_t         *next_speaker;  /* of ngx_str_t; NULL if nobody */

    ngx_uint_t           is_control;    /* {"op":"..",..} with no comm_id */
    ngx_str_t            op;            /* pool copy, control frames */

    /* open mode only: the client's own "sender", stamped instead of the
     * identity (empty: the identity); the caller checks it is a name */
    ngx_str_t            sender;
} ngx_ioa_envelope_t;


/*
 * NGX_OK with env filled, or NGX_ERROR with err filled: "invalid_json",
 * "too_deep", "invalid_envelope", "missing_comm_id", "sender_mismatch" or
 * "internal_error" (allocation).  identity must be valid UTF-8; now_ms is
 * the server time stamped on the envelope.  Everything env points to is
 * in the pool; data is not referenced after the call.
 */
ngx_int_t ngx_ioa_envelope_parse(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_str_t *identity, ngx_uint_t max_depth, int64_t now_ms,
    ngx_ioa_envelope_t *env, ngx_ioa_error_t *err);

/*
 * The same, with open != 0 for IoA's open mode (ioa_auth off), where any
 * client may speak as anyone: a "sender" other than the identity is kept
 * (env->sender) and stamped, instead of refused with "sender_mismatch".
 */
ngx_int_t ngx_ioa_envelope_parse_as(ngx_pool_t *pool, u_char *data,
    size_t len, ngx_str_t *identity, ngx_uint_t open, ngx_uint_t max_depth,
    int64_t now_ms, ngx_ioa_envelope_t *env, ngx_ioa_error_t *err);


#endif /* _NGX_IOA_ENVELOPE_H_INCLUDED_ */
