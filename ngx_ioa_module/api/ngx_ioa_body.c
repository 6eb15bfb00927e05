
/*
 * Copyright (C) ioa authors
 *
 * REST bodies as tables.  An endpoint declares its body as a static array
 * of ngx_ioa_body_field_t, one per field: its JSON name, its type, whether
 * it is required or may be null, its bounds, the strings it may be, what
 * each item of an array must be, the refusal's text, and the offset of the
 * checked value in the endpoint's own struct (as ngx_command_t's offsetof
 * puts a directive's value into a conf).  ngx_ioa_body_check() walks the
 * table over the parsed tree in the table's order, so the first bad field
 * of the table is the one a refusal names, and the order of a table is the
 * order in which the endpoint checks its body.  A table may be cut into
 * steps (ngx_ioa_body_step) when code must run between its fields.
 *
 * Each field has one text for every way it can be wrong (absent, of
 * another type, out of bounds, not one of its strings): the API has always
 * answered so, and a client reads the rule from it.  Only a name refused
 * by the name rule says why (ngx_ioa_name_check()), since the rule has
 * several parts.  Texts print the bounds' constants with ngx_value(), so a
 * limit is written once.
 *
 * What a table cannot say stays code in the endpoint, after or between
 * steps: a rule over two fields, a bound set by configuration, acting as
 * the body's agent (a 403 that must come before the fields after the
 * name), a value of two shapes.  Fields the table does not name are left
 * alone: IoA's clients send fields of their own, and the hub has always
 * taken them.
 *
 * The MCP facade keeps its own tables (ngx_ioa_mcp_param_t): they also
 * make the tools' input schemas, refuse unknown arguments and answer in
 * JSON-RPC's words, and what they pass on is a REST body that is checked
 * here again.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa.h"


static ngx_int_t ngx_ioa_body_value(const ngx_ioa_body_field_t *f,
    yajl_val v, void *out, ngx_ioa_error_t *err);
static ngx_int_t ngx_ioa_body_items(const ngx_ioa_body_field_t *f,
    yajl_val v, ngx_ioa_error_t *err);
static ngx_int_t ngx_ioa_body_string(const ngx_ioa_body_field_t *f,
    yajl_val v, ngx_str_t *s);
static void ngx_ioa_body_refuse(const ngx_ioa_body_field_t *f,
    ngx_ioa_error_t *err);


ngx_int_t
ngx_ioa_body_check(yajl_val doc, const ngx_ioa_body_field_t *f,
    ngx_uint_t step, void *out, ngx_ioa_error_t *err)
{
    yajl_val  v;

    for ( /* void */ ; step; f++) {
        if (f->name == NULL) {
            if (f->type != NGX_IOA_BODY_STEP) {
                return NGX_OK;
            }

            step--;
        }
    }

    for ( /* void */ ; f->name; f++) {

        /* NULL for a body that is no object too */
        v = ngx_ioa_json_get(doc, f->name);

        if (v == NULL || (YAJL_IS_NULL(v) && (f->flags & NGX_IOA_BODY_NULL)))
        {
            if (f->flags & NGX_IOA_BODY_REQUIRED) {
                ngx_ioa_body_refuse(f, err);
                return NGX_ERROR;
            }

            continue;
        }

        if (ngx_ioa_body_value(f, v, out, err) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_ioa_body_object(yajl_val doc, ngx_ioa_error_t *err)
{
    if (YAJL_IS_OBJECT(doc)) {
        return NGX_OK;
    }

    ngx_ioa_error_set(err, "invalid_request", NULL,
                      "the body must be a JSON object");

    return NGX_ERROR;
}


const ngx_ioa_body_field_t *
ngx_ioa_body_field(const ngx_ioa_body_field_t *f, const char *name)
{
    for ( /* void */ ; f->name || f->type == NGX_IOA_BODY_STEP; f++) {
        if (f->name && ngx_strcmp(f->name, name) == 0) {
            return f;
        }
    }

    return NULL;
}


static ngx_int_t
ngx_ioa_body_value(const ngx_ioa_body_field_t *f, yajl_val v, void *out,
    ngx_ioa_error_t *err)
{
    u_char     *p;
    int64_t     n;
    ngx_str_t   s;
    u_char      why[NGX_IOA_NAME_WHY_LEN];

    p = (f->offset == NGX_IOA_BODY_NONE) ? NULL : (u_char *) out + f->offset;

    switch (f->type) {

    case NGX_IOA_BODY_STRING:
    case NGX_IOA_BODY_NAME:

        if (ngx_ioa_body_string(f, v, &s) != NGX_OK) {
            break;
        }

        if (f->type == NGX_IOA_BODY_NAME
            && ngx_ioa_name_check(&s, why) != NGX_OK)
        {
            /* the name itself is not echoed: it may hold the very
             * bidirectional control that got it refused */
            ngx_ioa_error_set(err, "invalid_request", f->name,
                              "\"%s\" is not a name: %s", f->name, why);
            return NGX_ERROR;
        }

        if (p) {
            *(ngx_str_t *) p = s;
        }

        return NGX_OK;

    case NGX_IOA_BODY_INTEGER:

        if (!YAJL_IS_INTEGER(v)) {
            break;
        }

        n = YAJL_GET_INTEGER(v);

        if (n < f->min || (f->max && n > f->max)) {
            break;
        }

        if (p) {
            *(int64_t *) p = n;
        }

        return NGX_OK;

    case NGX_IOA_BODY_BOOLEAN:

        if (!YAJL_IS_TRUE(v) && !YAJL_IS_FALSE(v)) {
            break;
        }

        if (p) {
            *(ngx_uint_t *) p = YAJL_IS_TRUE(v);
        }

        return NGX_OK;

    case NGX_IOA_BODY_ARRAY:

        if (!YAJL_IS_ARRAY(v) || v->u.array.len < (size_t) f->min
            || (f->max && v->u.array.len > (size_t) f->max))
        {
            break;
        }

        if (f->item && ngx_ioa_body_items(f, v, err) != NGX_OK) {
            return NGX_ERROR;
        }

        /* fall through */

    default: /* NGX_IOA_BODY_VALUE */

        if (p) {
            *(yajl_val *) p = v;
        }

        return NGX_OK;
    }

    ngx_ioa_body_refuse(f, err);

    return NGX_ERROR;
}


/* an array's items against its "item" field: strings or names */

static ngx_int_t
ngx_ioa_body_items(const ngx_ioa_body_field_t *f, yajl_val v,
    ngx_ioa_error_t *err)
{
    size_t                       i;
    ngx_str_t                    s;
    const ngx_ioa_body_field_t  *item;
    u_char                       why[NGX_IOA_NAME_WHY_LEN];

    item = f->item;

    for (i = 0; i < v->u.array.len; i++) {

        if (ngx_ioa_body_string(item, v->u.array.values[i], &s) != NGX_OK) {
            ngx_ioa_error_set(err, "invalid_request", f->name,
                              item->text ? item->text : f->text, i);
            return NGX_ERROR;
        }

        if (item->type == NGX_IOA_BODY_NAME
            && ngx_ioa_name_check(&s, why) != NGX_OK)
        {
            ngx_ioa_error_set(err, "invalid_request", f->name,
                              "\"%s\"[%uz] is not a name: %s", f->name, i,
                              why);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* a string within the field's bounds and, if it has them, of its strings */

static ngx_int_t
ngx_ioa_body_string(const ngx_ioa_body_field_t *f, yajl_val v, ngx_str_t *s)
{
    ngx_str_t  *one;

    if (ngx_ioa_json_string(v, s) != NGX_OK || s->len < (size_t) f->min
        || (f->max && s->len > (size_t) f->max))
    {
        return NGX_DECLINED;
    }

    if (f->one_of == NULL) {
        return NGX_OK;
    }

    for (one = f->one_of; one->len; one++) {
        if (one->len == s->len && ngx_strncmp(one->data, s->data, s->len) == 0)
        {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


static void
ngx_ioa_body_refuse(const ngx_ioa_body_field_t *f, ngx_ioa_error_t *err)
{
    if (f->text) {
        ngx_ioa_error_set(err, "invalid_request", f->name, "%s", f->text);
        return;
    }

    switch (f->type) {

    case NGX_IOA_BODY_INTEGER:
        ngx_ioa_error_set(err, "invalid_request", f->name,
                          "\"%s\" must be an integer from %L to %L%s",
                          f->name, f->min, f->max,
                          (f->flags & NGX_IOA_BODY_NULL) ? ", or null" : "");
        return;

    case NGX_IOA_BODY_BOOLEAN:
        ngx_ioa_error_set(err, "invalid_request", f->name,
                          "\"%s\" must be true or false", f->name);
        return;

    default:
        ngx_ioa_error_set(err, "invalid_request", f->name,
                          "\"%s\" is not valid", f->name);
        return;
    }
}
