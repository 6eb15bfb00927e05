
/*
 * Copyright (C) ioa authors
 *
 * The module's configuration as its parts read it.
 *
 * The module's face (ngx_ioa_module.c: the ngx_module_t, its directives,
 * the process hooks) names every part; a part reading its configuration
 * through the face would name the face back, and every part would be tied
 * to every other through it.  So the face hands over, when nginx makes
 * the configuration, what the parts read: the main configuration of the
 * running cycle (for code without a request) and the module's index into
 * a request's loc_conf and ctx arrays, which ngx_ioa_loc_conf(),
 * ngx_ioa_get_ctx() and ngx_ioa_set_ctx() (ngx_ioa.h) use as nginx's own
 * ngx_http_get_module_loc_conf() and ngx_http_get_module_ctx() do.  This
 * file names nothing else of the module.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_ioa.h"


/* ngx_http_ioa_module.ctx_index, which nginx assigns before it makes the
 * configurations and keeps for the module's life */
ngx_uint_t                   ngx_ioa_ctx_index;

static ngx_ioa_main_conf_t  *ngx_ioa_mcf;


void
ngx_ioa_conf_set_index(ngx_uint_t ctx_index)
{
    ngx_ioa_ctx_index = ctx_index;
}


void
ngx_ioa_conf_set_main(ngx_ioa_main_conf_t *mcf)
{
    ngx_ioa_mcf = mcf;
}


ngx_ioa_main_conf_t *
ngx_ioa_main_conf(void)
{
    return ngx_ioa_mcf;
}
