
/*
 * Copyright (C) ioa authors
 *
 * What every harness shares: nginx's globals set up once as nginx's own
 * main() would (page size, time, a log that writes nowhere), and a pool per
 * input, destroyed after it, so ASan sees every pool allocation
 * (NGX_DEBUG_PALLOC makes each one its own malloc).
 */

#ifndef _IOA_FUZZ_COMMON_H_INCLUDED_
#define _IOA_FUZZ_COMMON_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


void ioa_fuzz_init(void);
ngx_pool_t *ioa_fuzz_pool(void);


#endif /* _IOA_FUZZ_COMMON_H_INCLUDED_ */
