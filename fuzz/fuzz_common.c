
/*
 * Copyright (C) ioa authors
 *
 * The shared setup of the harnesses (see fuzz_common.h).  nginx's main() is
 * linked in renamed (libFuzzer brings its own), so what it would set up
 * before any module code runs is done here: ngx_pagesize, which bounds the
 * pool's small allocations; the cached time; and a log with no file, so a
 * message the code logs costs nothing and goes nowhere.
 */


#include "fuzz_common.h"


static ngx_log_t        ioa_fuzz_log;
static ngx_open_file_t  ioa_fuzz_log_file;
static ngx_uint_t       ioa_fuzz_ready;


void
ioa_fuzz_init(void)
{
    if (ioa_fuzz_ready) {
        return;
    }

    ioa_fuzz_ready = 1;

    ngx_pagesize = getpagesize();
    ngx_cacheline_size = NGX_CPU_CACHE_LINE;

    for (ngx_pagesize_shift = 0; (ngx_pagesize >> ngx_pagesize_shift) > 1;
         ngx_pagesize_shift++)
    {
        /* void */
    }

    ngx_time_init();

    ioa_fuzz_log_file.fd = NGX_INVALID_FILE;
    ioa_fuzz_log.file = &ioa_fuzz_log_file;
    ioa_fuzz_log.log_level = NGX_LOG_EMERG;
}


ngx_pool_t *
ioa_fuzz_pool(void)
{
    ioa_fuzz_init();

    return ngx_create_pool(4096, &ioa_fuzz_log);
}
