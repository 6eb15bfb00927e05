
/*
 * Copyright (C) ioa authors
 *
 * The Redis Cluster key slot, the one copy that the hub's Cluster code
 * (ngx_ioa_module/store/ngx_ioa_redis_cluster.c) and the worker's
 * (workers/worker/cluster.c) both use: a key the hub and a worker route
 * to different masters would be a command sent to a node that answers
 * MOVED, every time.
 */


#ifndef _IOA_KEY_SLOT_H_INCLUDED_
#define _IOA_KEY_SLOT_H_INCLUDED_


#include <stddef.h>


/* Redis Cluster's slot count: a power of two, so "mod" is a mask */
#define IOA_KEY_SLOTS  16384


/*
 * The slot of the len bytes at key.  key is void: the hub holds keys as
 * u_char, the worker as char.
 */
unsigned ioa_key_slot(const void *key, size_t len);


#endif /* _IOA_KEY_SLOT_H_INCLUDED_ */
