
/*
 * ioa: REST bodies declared as tables of fields and checked by one
 * function (ngx_ioa_body.c says how).
 */


#ifndef _NGX_IOA_BODY_H_INCLUDED_
#define _NGX_IOA_BODY_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa_json.h"


typedef enum {
    NGX_IOA_BODY_STRING = 0,         /* ngx_str_t */
    NGX_IOA_BODY_NAME,               /* ngx_str_t under the name rule */
    NGX_IOA_BODY_INTEGER,            /* int64_t */
    NGX_IOA_BODY_BOOLEAN,            /* ngx_uint_t, 1 for true */
    NGX_IOA_BODY_ARRAY,              /* yajl_val, its items as "item" says */
    NGX_IOA_BODY_VALUE,              /* yajl_val of any type */
    NGX_IOA_BODY_STEP                /* ngx_ioa_body_step: not a field */
} ngx_ioa_body_type_e;


/* flags */
#define NGX_IOA_BODY_REQUIRED        0x01
#define NGX_IOA_BODY_NULL            0x02      /* null is as absent */

/* an offset for a value checked and not kept */
#define NGX_IOA_BODY_NONE            ((size_t) -1)


typedef struct ngx_ioa_body_field_s  ngx_ioa_body_field_t;

/*
 * One field of a body.  min and max bound a string's bytes, an integer's
 * value or an array's items (max 0: no upper bound); "item" is the field every
 * item of an array must be, NULL for any.  "text" is the refusal for a
 * value of another type or out of bounds (NULL: the type's own, naming
 * the bounds); an item's text may print its index with "%uz".
 */

struct ngx_ioa_body_field_s {
    const char                  *name;
    ngx_ioa_body_type_e          type;
    ngx_uint_t                   flags;
    int64_t                      min;
    int64_t                      max;
    ngx_str_t                   *one_of;  /* ngx_null_string ended */
    const ngx_ioa_body_field_t  *item;
    const char                  *text;
    size_t                       offset;  /* of its value in "out" */
};

/*
 * The end of a table, as ngx_null_command ends nginx's, and the end of one
 * step of a table: a body checked in steps (code between them) is one
 * table, each call of ngx_ioa_body_check() walking one step.
 */
#define ngx_ioa_body_null_field  { NULL, 0, 0, 0, 0, NULL, NULL, NULL, 0 }
#define ngx_ioa_body_step                                                     \
    { NULL, NGX_IOA_BODY_STEP, 0, 0, 0, NULL, NULL, NULL, 0 }


/*
 * Walks step "step" (0 for the first) of the table over a parsed body in
 * order and stores each value present at its offset in out; absent ones
 * are left as the caller set them.  A body that is not an object has
 * every field absent.  Fields not in the table are not looked at.  On a
 * refusal err is filled ("invalid_request", naming the field: a 400) and
 * NGX_ERROR returned.
 */
ngx_int_t ngx_ioa_body_check(yajl_val doc, const ngx_ioa_body_field_t *f,
    ngx_uint_t step, void *out, ngx_ioa_error_t *err);

/* NGX_OK if doc is an object; otherwise err says the body must be one */
ngx_int_t ngx_ioa_body_object(yajl_val doc, ngx_ioa_error_t *err);

/* the field named so in the table, any step, NULL if none */
const ngx_ioa_body_field_t *ngx_ioa_body_field(
    const ngx_ioa_body_field_t *f, const char *name);


#endif /* _NGX_IOA_BODY_H_INCLUDED_ */
