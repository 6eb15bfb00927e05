
/*
 * Copyright (C) ioa authors
 *
 * Module definition: directives, configuration, worker start and stop.
 *
 * ioa_api serves IoA's endpoints below the location it is placed in
 * (ngx_ioa_api.c holds them, a table read by one dispatcher), so
 * "location / { ioa_api; }" gives IoA clients the paths they expect
 * (/ws/{agent_name}, /register, ...) and "location /ioa/ { ioa_api; }" the
 * same paths under /ioa/.  One handler with a fixed path table was chosen
 * over one directive per endpoint: IoA clients hard-code the paths, so an
 * operator never has a reason to rename them one by one, and a single
 * directive cannot be half configured.
 *
 * Everything that talks to Redis starts in init_process: each worker owns
 * its own command and pub/sub connections, one pair per Redis node (the
 * standalone Redis, or every master of a Redis Cluster: see ngx_ioa_redis.c
 * and ngx_ioa_redis_cluster.c), so nothing is shared between workers and no
 * IPC is needed.
 *
 * A worker also fixes glibc's mmap threshold (NGX_IOA_MMAP_THRESHOLD).
 * glibc raises the threshold each time a large mmapped block is freed, so
 * after the first burst of large envelopes their buffers came from the
 * heap, and a heap gives freed memory back only from its top: a worker
 * that had taken a thousand 1 MiB envelopes at once kept about 470 MB
 * after they were gone.  With the threshold fixed, a buffer that large is
 * its own mapping and leaves with its free().
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#if (NGX_LINUX) && defined(__GLIBC__)
#include <malloc.h>
#endif

#include "ngx_ioa.h"



#define NGX_IOA_MMAP_THRESHOLD  (256 * 1024)


static void *ngx_ioa_create_main_conf(ngx_conf_t *cf);
static char *ngx_ioa_init_main_conf(ngx_conf_t *cf, void *conf);
static ngx_int_t ngx_ioa_postconfiguration(ngx_conf_t *cf);
static void *ngx_ioa_create_loc_conf(ngx_conf_t *cf);
static char *ngx_ioa_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_ioa_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_ioa_api(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_ioa_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_ioa_redis_password_file(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_ioa_linger(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_ioa_retention(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_ioa_discovery_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_ioa_init_process(ngx_cycle_t *cycle);
static void ngx_ioa_exit_process(ngx_cycle_t *cycle);


static ngx_conf_num_bounds_t  ngx_ioa_depth_bounds = {
    ngx_conf_check_num_bounds, 2, 1000
};

static ngx_conf_num_bounds_t  ngx_ioa_batch_bounds = {
    ngx_conf_check_num_bounds, 1, 10000
};

/* as "limit" of /fetch_chat_record (NGX_IOA_RECORD_LIMIT_MAX) */
static ngx_conf_num_bounds_t  ngx_ioa_record_latest_bounds = {
    ngx_conf_check_num_bounds, 1, 10000
};


static ngx_command_t  ngx_http_ioa_commands[] = {

    { ngx_string("ioa_api"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_ioa_api,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ioa_mcp"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE12,
      ngx_ioa_mcp_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ioa_a2a"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE123,
      ngx_ioa_a2a_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ioa_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
      ngx_ioa_metrics,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ioa_redis"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_ioa_redis,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ioa_redis_connect_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, redis_connect_timeout),
      NULL },

    { ngx_string("ioa_redis_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, redis_timeout),
      NULL },

    { ngx_string("ioa_redis_backoff_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, redis_backoff_max),
      NULL },

    { ngx_string("ioa_redis_prefix"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, redis_prefix),
      NULL },

    { ngx_string("ioa_redis_user"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, redis_user),
      NULL },

    { ngx_string("ioa_redis_password_file"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_ioa_redis_password_file,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ioa_agent_name_pattern"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, name_pattern),
      NULL },

    { ngx_string("ioa_room_retention"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_ioa_retention,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, room_retention),
      NULL },

    { ngx_string("ioa_agent_retention"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_ioa_retention,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, agent_retention),
      NULL },

    { ngx_string("ioa_room_log_maxlen"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, room_log_maxlen),
      NULL },

    { ngx_string("ioa_linger"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_ioa_linger,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, linger_us),
      NULL },

    { ngx_string("ioa_presence_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, presence_ttl),
      NULL },

    { ngx_string("ioa_limit_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, limit_zone_size),
      NULL },

    { ngx_string("ioa_limit_rate"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_ioa_limit_rate_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, limit_rate),
      NULL },

    { ngx_string("ioa_limit_teamup_rate"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_ioa_limit_rate_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, teamup_rate),
      NULL },

    { ngx_string("ioa_limit_launch_rate"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_ioa_limit_rate_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, launch_rate),
      NULL },

    { ngx_string("ioa_limit_room_rate"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_ioa_limit_rate_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, room_rate),
      NULL },

    { ngx_string("ioa_limit_scope"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE123,
      ngx_ioa_limit_scope_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ioa_limit_goals_in_flight"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_ioa_limit_count_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, goals_in_flight),
      NULL },

    { ngx_string("ioa_limit_conn"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, limit_conn),
      NULL },

    { ngx_string("ioa_max_room_members"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, max_room_members),
      NULL },

    { ngx_string("ioa_max_agent_rooms"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, max_agent_rooms),
      NULL },

    { ngx_string("ioa_embedding"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_ioa_embed_conf,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ioa_discovery_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_ioa_discovery_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ioa_max_agents"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_ioa_main_conf_t, max_agents),
      NULL },

    { ngx_string("ioa_max_message_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, max_message_conf),
      NULL },

    { ngx_string("ioa_send_queue_limit"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, send_queue_limit),
      NULL },

    { ngx_string("ioa_cors_origins"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_ioa_cors_origins_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, cors_origins),
      NULL },

    { ngx_string("ioa_goal_input_timeout_max"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, goal_input_timeout_max),
      NULL },

    { ngx_string("ioa_launch_goal_wait"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, launch_goal_wait),
      NULL },

    { ngx_string("ioa_ws_deflate"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, ws_deflate),
      NULL },

    { ngx_string("ioa_ping_interval"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, ping_interval),
      NULL },

    { ngx_string("ioa_max_json_depth"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, max_json_depth),
      &ngx_ioa_depth_bounds },

    { ngx_string("ioa_catchup_batch"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, catchup_batch),
      &ngx_ioa_batch_bounds },

    { ngx_string("ioa_catchup_window"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, catchup_window_conf),
      NULL },

    { ngx_string("ioa_chat_record_latest"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, chat_record_latest),
      &ngx_ioa_record_latest_bounds },

    { ngx_string("ioa_auth"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_ioa_auth_mode,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, auth),
      NULL },

    { ngx_string("ioa_auth_jwt_key"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_ioa_auth_jwt_key,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ioa_auth_leeway"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, auth_leeway),
      NULL },

    { ngx_string("ioa_auth_expiry_warning"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, auth_expiry_warning),
      NULL },

    { ngx_string("ioa_auth_identity"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, auth_identity),
      NULL },

    { ngx_string("ioa_auth_scopes"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_ioa_loc_conf_t, auth_scopes),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_ioa_module_ctx = {
    ngx_ioa_embed_add_variable,            /* preconfiguration */
    ngx_ioa_postconfiguration,             /* postconfiguration */

    ngx_ioa_create_main_conf,              /* create main configuration */
    ngx_ioa_init_main_conf,                /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_ioa_create_loc_conf,               /* create location configuration */
    ngx_ioa_merge_loc_conf                 /* merge location configuration */
};


ngx_module_t  ngx_http_ioa_module = {
    NGX_MODULE_V1,
    &ngx_http_ioa_module_ctx,              /* module context */
    ngx_http_ioa_commands,                 /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_ioa_init_process,                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_ioa_exit_process,                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_ioa_create_main_conf(ngx_conf_t *cf)
{
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_pcalloc(cf->pool, sizeof(ngx_ioa_main_conf_t));
    if (mcf == NULL) {
        return NULL;
    }

    /* what the parts read a request's configuration and context by */
    ngx_ioa_conf_set_index(ngx_http_ioa_module.ctx_index);

    /*
     * set by ngx_pcalloc():
     *
     *     mcf->redis_seeds = NULL;
     *     mcf->redis_prefix = { 0, NULL };
     *     mcf->name_pattern = { 0, NULL };
     *     mcf->used = 0;
     */

    mcf->redis_connect_timeout = NGX_CONF_UNSET_MSEC;
    mcf->redis_timeout = NGX_CONF_UNSET_MSEC;
    mcf->redis_backoff_max = NGX_CONF_UNSET_MSEC;
    mcf->room_log_maxlen = NGX_CONF_UNSET_UINT;
    mcf->linger_us = NGX_CONF_UNSET_UINT;
    mcf->room_retention = NGX_CONF_UNSET_MSEC;
    mcf->agent_retention = NGX_CONF_UNSET_MSEC;
    mcf->presence_ttl = NGX_CONF_UNSET_MSEC;
    mcf->limit_zone_size = NGX_CONF_UNSET_SIZE;
    mcf->index_zone_size = NGX_CONF_UNSET_SIZE;
    mcf->limit_conn = NGX_CONF_UNSET_UINT;
    mcf->goals_in_flight = NGX_CONF_UNSET_UINT;
    mcf->limit_fleet = NGX_CONF_UNSET;
    mcf->limit_slice = NGX_CONF_UNSET_MSEC;
    mcf->limit_lease = NGX_CONF_UNSET_MSEC;
    mcf->max_room_members = NGX_CONF_UNSET_UINT;
    mcf->max_agent_rooms = NGX_CONF_UNSET_UINT;
    mcf->max_agents = NGX_CONF_UNSET_UINT;

    return mcf;
}


static char *
ngx_ioa_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_ioa_main_conf_t *mcf = conf;

    u_char                 errstr[NGX_MAX_CONF_ERRSTR];
    ngx_regex_compile_t    rc;
    ngx_ioa_redis_addr_t  *addr;

    if (mcf->redis_seeds == NULL) {
        mcf->redis_seeds = ngx_array_create(cf->pool, 1,
                                            sizeof(ngx_ioa_redis_addr_t));
        if (mcf->redis_seeds == NULL) {
            return NGX_CONF_ERROR;
        }

        addr = ngx_array_push(mcf->redis_seeds);
        if (addr == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memzero(addr, sizeof(ngx_ioa_redis_addr_t));
        ngx_str_set(&addr->host, "127.0.0.1");
        addr->port = 6379;
    }

    ngx_conf_init_msec_value(mcf->redis_connect_timeout, 1000);
    ngx_conf_init_msec_value(mcf->redis_timeout, 3000);
    ngx_conf_init_msec_value(mcf->redis_backoff_max, 5000);
    ngx_conf_init_uint_value(mcf->room_log_maxlen, 0);
    ngx_conf_init_uint_value(mcf->linger_us, NGX_IOA_LINGER_DEFAULT);
    ngx_conf_init_msec_value(mcf->room_retention, 0);
    ngx_conf_init_msec_value(mcf->agent_retention, 0);
    ngx_conf_init_msec_value(mcf->presence_ttl, 30000);
    ngx_conf_init_uint_value(mcf->max_room_members, 256);
    ngx_conf_init_uint_value(mcf->max_agent_rooms, 1000);
    ngx_conf_init_uint_value(mcf->max_agents, 1000000);

    if (mcf->used && ngx_ioa_limit_init_conf(cf, mcf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (mcf->used && ngx_ioa_index_init_conf(cf, mcf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (mcf->used && ngx_ioa_stats_init_conf(cf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (mcf->redis_prefix.data == NULL) {
        ngx_str_set(&mcf->redis_prefix, "ioa:");
    }

    if (ngx_strlchr(mcf->redis_prefix.data,
                    mcf->redis_prefix.data + mcf->redis_prefix.len, '{')
        != NULL)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_redis_prefix\" must not contain \"{\": "
                           "ioa adds its own Redis Cluster hash tags");
        return NGX_CONF_ERROR;
    }

    /* no pattern: the built-in rule alone (ngx_ioa_valid_name) */
    if (mcf->name_pattern.data == NULL) {
        goto pattern_done;
    }

    ngx_memzero(&rc, sizeof(ngx_regex_compile_t));

    rc.pattern = mcf->name_pattern;
    rc.pool = cf->pool;
    rc.err.len = NGX_MAX_CONF_ERRSTR;
    rc.err.data = errstr;

    if (ngx_regex_compile(&rc) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_agent_name_pattern\": %V", &rc.err);
        return NGX_CONF_ERROR;
    }

    mcf->name_regex = rc.regex;

pattern_done:

    if (ngx_ioa_keys_conf(cf, mcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_ioa_conf_set_main(mcf);

    return NGX_CONF_OK;
}


static void *
ngx_ioa_create_loc_conf(ngx_conf_t *cf)
{
    ngx_ioa_loc_conf_t  *lcf;

    lcf = ngx_pcalloc(cf->pool, sizeof(ngx_ioa_loc_conf_t));
    if (lcf == NULL) {
        return NULL;
    }

    lcf->api = NGX_CONF_UNSET;
    lcf->max_message_conf = NGX_CONF_UNSET_SIZE;
    lcf->send_queue_limit = NGX_CONF_UNSET_SIZE;
    lcf->ping_interval = NGX_CONF_UNSET_MSEC;
    lcf->ws_deflate = NGX_CONF_UNSET;
    lcf->max_json_depth = NGX_CONF_UNSET_UINT;
    lcf->catchup_batch = NGX_CONF_UNSET_UINT;
    lcf->catchup_window_conf = NGX_CONF_UNSET_SIZE;
    lcf->chat_record_latest = NGX_CONF_UNSET_UINT;
    lcf->launch_goal_wait = NGX_CONF_UNSET;
    lcf->goal_input_timeout_max = NGX_CONF_UNSET;
    lcf->cors_origins = NGX_CONF_UNSET_PTR;
    lcf->auth = NGX_CONF_UNSET_UINT;
    lcf->jwt_keys = NGX_CONF_UNSET_PTR;
    lcf->auth_leeway = NGX_CONF_UNSET;
    lcf->auth_expiry_warning = NGX_CONF_UNSET;

    return lcf;
}


static char *
ngx_ioa_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_ioa_loc_conf_t *prev = parent;
    ngx_ioa_loc_conf_t *conf = child;

    ngx_conf_merge_value(conf->api, prev->api, 0);
    ngx_conf_merge_value(conf->launch_goal_wait, prev->launch_goal_wait, 0);
    ngx_conf_merge_sec_value(conf->goal_input_timeout_max,
                             prev->goal_input_timeout_max, 3600);

    if (conf->goal_input_timeout_max > 86400) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ioa_goal_input_timeout_max is at most 1d");
        return NGX_CONF_ERROR;
    }
    ngx_conf_merge_ptr_value(conf->cors_origins, prev->cors_origins, NULL);
    /* room for a few envelopes of ioa_max_message_size, stamped */
    ngx_conf_merge_size_value(conf->send_queue_limit,
                              prev->send_queue_limit, 4 * 1024 * 1024);
    /*
     * 1m (IoA's results carry files and long model outputs), or the send
     * queue if that was set smaller: a message must fit in it.  Given at
     * this level or above, it is taken as given (and checked below).  The
     * directive's own value is kept apart (max_message_conf), as nginx's
     * proxy_busy_buffers_size is: the http level's conf is never merged
     * itself, so only the raw value tells "given there" from a default.
     */
    ngx_conf_merge_size_value(conf->max_message_conf, prev->max_message_conf,
                              NGX_CONF_UNSET_SIZE);

    if (conf->max_message_conf != NGX_CONF_UNSET_SIZE) {
        conf->max_message_size = conf->max_message_conf;

    } else {
        conf->max_message_size = ngx_min(1024 * 1024,
                                         conf->send_queue_limit);
    }
    ngx_conf_merge_msec_value(conf->ping_interval, prev->ping_interval,
                              30000);
    /* permessage-deflate: off, as nginx's gzip.  It halves the bytes on
     * the wire for about 2.8 times the worker's CPU per envelope and 11 KB
     * per connection that sends compressed (bench/deflate.sh, README's
     * directive reference): the links gain, the hub pays. */
    ngx_conf_merge_value(conf->ws_deflate, prev->ws_deflate, 0);
    ngx_conf_merge_uint_value(conf->max_json_depth, prev->max_json_depth, 32);
    ngx_conf_merge_uint_value(conf->catchup_batch, prev->catchup_batch, 256);
    /* IoA's frontend reads one answer of /fetch_chat_record and no page
     * after it: a room's newest thousand envelopes, as many as a page
     * from the start holds by default */
    ngx_conf_merge_uint_value(conf->chat_record_latest,
                              prev->chat_record_latest, 1000);
    /* what a stream that never reads holds of a big room's backlog: 512k
     * keeps a thousand such streams near half a gigabyte, and is still
     * several round trips of envelopes for a client that does read; half
     * the send queue where that is smaller, so live traffic finds room */
    ngx_conf_merge_size_value(conf->catchup_window_conf,
                              prev->catchup_window_conf, NGX_CONF_UNSET_SIZE);

    if (conf->catchup_window_conf != NGX_CONF_UNSET_SIZE) {
        conf->catchup_window = conf->catchup_window_conf;

    } else {
        conf->catchup_window = ngx_min(512 * 1024,
                                       conf->send_queue_limit / 2);
    }

    if (conf->max_message_size < 125) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_max_message_size\" must be at least 125");
        return NGX_CONF_ERROR;
    }

    if (conf->send_queue_limit < conf->max_message_size) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_send_queue_limit\" must not be less than "
                           "\"ioa_max_message_size\"");
        return NGX_CONF_ERROR;
    }

    if (conf->catchup_window > conf->send_queue_limit) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_catchup_window\" must not be more than "
                           "\"ioa_send_queue_limit\"");
        return NGX_CONF_ERROR;
    }

    return ngx_ioa_auth_merge(cf, prev, conf);
}


/*
 * After the http block: the core module's "resolver" is known only now,
 * and it decides how a name of ioa_redis is resolved.
 */

static ngx_int_t
ngx_ioa_postconfiguration(ngx_conf_t *cf)
{
    ngx_ioa_main_conf_t  *mcf;

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ioa_module);

    if (!mcf->used) {
        return NGX_OK;
    }

    if (ngx_ioa_redis_resolve_conf(cf, mcf) != NGX_CONF_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * ioa_redis address ...: one standalone Redis, or any number of nodes of a
 * Redis Cluster (the seeds: the module asks the first that answers for the
 * map and finds every master from there; several seeds let a worker start
 * while one of them is down).  Which of the two it is, is detected at run
 * time (ngx_ioa_redis_cluster.c), so the same configuration line serves a
 * standalone Redis that later becomes a Cluster.
 */

static char *
ngx_ioa_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_main_conf_t *mcf = conf;

    u_char                *p;
    ngx_str_t             *value;
    ngx_url_t              u;
    ngx_uint_t             i;
    ngx_ioa_redis_addr_t  *addr;

    if (mcf->redis_seeds) {
        return "is duplicate";
    }

    mcf->redis_seeds = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                        sizeof(ngx_ioa_redis_addr_t));
    if (mcf->redis_seeds == NULL) {
        return NGX_CONF_ERROR;
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        ngx_memzero(&u, sizeof(ngx_url_t));

        u.url = value[i];
        u.default_port = 6379;
        u.no_resolve = 1;

        /* a name is resolved at the end of the configuration, or at every
         * connect with a "resolver" (ngx_ioa_redis_resolve.c): hiredis
         * 0.14 itself would resolve it with a blocking call */

        if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
            if (u.err) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "%s in \"ioa_redis\" address \"%V\"",
                                   u.err, &u.url);
            }

            return NGX_CONF_ERROR;
        }

        if (u.family == AF_INET6 || u.host.len == 0
            || u.host.len > NGX_MAXHOSTNAMELEN)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ioa_redis\" needs an IPv4 address or a "
                               "name that resolves to one, not \"%V\"",
                               &u.url);
            return NGX_CONF_ERROR;
        }

        p = ngx_pnalloc(cf->pool, u.host.len + 1);
        addr = ngx_array_push(mcf->redis_seeds);

        if (p == NULL || addr == NULL) {
            return NGX_CONF_ERROR;
        }

        *ngx_cpymem(p, u.host.data, u.host.len) = '\0';

        ngx_memzero(addr, sizeof(ngx_ioa_redis_addr_t));
        addr->port = u.port;

        if (ngx_inet_addr(p, u.host.len) != INADDR_NONE) {
            addr->host.data = p;
            addr->host.len = u.host.len;

        } else {
            addr->name.data = p;
            addr->name.len = u.host.len;
        }
    }

    return NGX_CONF_OK;
}


/*
 * ioa_redis_password_file file: Redis AUTH (with ioa_redis_user for a Redis
 * 6+ ACL user, else the default user).  A file, not the password itself, so
 * nginx.conf can be shared and the secret kept apart; trailing white space
 * (the editor's newline) is not part of it.
 */

static char *
ngx_ioa_redis_password_file(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_main_conf_t *mcf = conf;

    ngx_str_t  *value;

    if (mcf->redis_password.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_ioa_conf_read_file(cf, &value[1], 4096, &mcf->redis_password)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_ioa_conf_trim(&mcf->redis_password);

    if (mcf->redis_password.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "the Redis password file \"%V\" is empty",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_ioa_api(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_loc_conf_t *lcf = conf;

    ngx_ioa_main_conf_t       *mcf;
    ngx_http_core_loc_conf_t  *clcf;

    if (lcf->api != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    lcf->api = 1;

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ioa_module);
    mcf->used = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_ioa_api_handler;

    return NGX_CONF_OK;
}


/*
 * ioa_metrics [token]: this location answers /metrics (ngx_ioa_metrics.c);
 * with "token", only to a token with the "metrics" (or "admin") scope
 */

static char *
ngx_ioa_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t                 *value;
    ngx_ioa_main_conf_t       *mcf;
    ngx_http_core_loc_conf_t  *clcf;

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ioa_module);
    mcf->used = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->handler) {
        return "is duplicate, or the location already has a handler";
    }

    clcf->handler = ngx_ioa_metrics_handler;

    if (cf->args->nelts == 2) {
        value = cf->args->elts;

        if (value[1].len != 5 || ngx_strncmp(value[1].data, "token", 5) != 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"ioa_metrics\" takes no argument or "
                               "\"token\", not \"%V\"", &value[1]);
            return NGX_CONF_ERROR;
        }

        clcf->handler = ngx_ioa_metrics_token_handler;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_ioa_init_process(ngx_cycle_t *cycle)
{
    ngx_ioa_main_conf_t  *mcf;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ioa_module);

    if (mcf == NULL || !mcf->used) {
        return NGX_OK;
    }

    ngx_ioa_conf_set_main(mcf);

#if (NGX_LINUX) && defined(__GLIBC__)
    (void) mallopt(M_MMAP_THRESHOLD, NGX_IOA_MMAP_THRESHOLD);
#endif

    /* the subscriptions' tree first: rooms, observers and the index make
     * theirs as they start */
    ngx_ioa_sub_init_process();

    if (ngx_ioa_room_init_process(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_ioa_index_init_process(cycle);

    if (ngx_ioa_goal_init_process(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_ioa_redis_init_process(cycle);
}


static void
ngx_ioa_exit_process(ngx_cycle_t *cycle)
{
    if (ngx_ioa_main_conf() == NULL || !ngx_ioa_main_conf()->used) {
        return;
    }

    ngx_ioa_index_exit_process_sync();
    ngx_ioa_room_exit_process(cycle);
    ngx_ioa_redis_exit_process(cycle);
    ngx_ioa_index_exit_process();
    ngx_ioa_ws_deflate_exit_process();
}


/* ioa_discovery_zone size | off: the discovery index's shared memory */

static char *
ngx_ioa_discovery_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_main_conf_t  *mcf = conf;

    off_t       size;
    ngx_str_t  *value;

    if (mcf->index_zone_size != NGX_CONF_UNSET_SIZE) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        mcf->index_zone_size = 0;
        return NGX_CONF_OK;
    }

    /* an offset, not a size: a registry of millions wants "g" */
    size = ngx_parse_offset(&value[1]);

    if (size == NGX_ERROR || (uint64_t) size > NGX_MAX_SIZE_T_VALUE / 2) {
        return "must be a size (e.g. 256m or 2g) or \"off\"";
    }

    mcf->index_zone_size = (size_t) size;

    return NGX_CONF_OK;
}


/* ioa_room_retention, ioa_agent_retention: off | a time of 1s or more */

/* ioa_linger off | <n>us | <n>ms (see ngx_ioa_linger.c) */

static char *
ngx_ioa_linger(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_main_conf_t *mcf = conf;

    size_t      len;
    ngx_int_t   n, unit;
    ngx_str_t  *value;

    if (mcf->linger_us != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 3 && ngx_strncmp(value[1].data, "off", 3) == 0) {
        mcf->linger_us = 0;
        return NGX_CONF_OK;
    }

    len = value[1].len;
    unit = 0;

    if (len > 2 && ngx_strncmp(value[1].data + len - 2, "us", 2) == 0) {
        unit = 1;

    } else if (len > 2 && ngx_strncmp(value[1].data + len - 2, "ms", 2) == 0)
    {
        unit = 1000;
    }

    n = unit ? ngx_atoi(value[1].data, len - 2) : NGX_ERROR;

    if (n == NGX_ERROR || n * unit < 1 || n * unit > NGX_IOA_LINGER_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_linger\" takes \"off\" or a time from "
                           "1us to %dms, such as 200us, not \"%V\"",
                           NGX_IOA_LINGER_MAX / 1000, &value[1]);
        return NGX_CONF_ERROR;
    }

    mcf->linger_us = n * unit;

    return NGX_CONF_OK;
}


static char *
ngx_ioa_retention(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_msec_t  *msp;
    ngx_str_t   *value;

    msp = (ngx_msec_t *) ((char *) conf + cmd->offset);

    if (*msp != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        *msp = 0;
        return NGX_CONF_OK;
    }

    *msp = ngx_parse_time(&value[1], 0);

    if (*msp == (ngx_msec_t) NGX_ERROR || *msp < 1000) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" takes \"off\" or a time of at least 1s, "
                           "such as \"7d\", not \"%V\"",
                           &cmd->name, &value[1]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}
