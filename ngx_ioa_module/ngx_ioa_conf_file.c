
/*
 * Copyright (C) ioa authors
 *
 * Files named in the configuration: a key, a password, read whole while
 * nginx reads its configuration (so the master, as root, is the only
 * reader), and the trailing newline an editor leaves in them.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa.h"


/*
 * A small file of the configuration (a key, a password), read whole when
 * nginx reads its configuration: the workers never open it, so it may be
 * readable by root (the master) alone.  NGX_OK and out in cf->pool,
 * NUL-terminated, or NGX_ERROR after an emerg naming the file.
 */

ngx_int_t
ngx_ioa_conf_read_file(ngx_conf_t *cf, ngx_str_t *name, size_t max,
    ngx_str_t *out)
{
    ssize_t          n;
    ngx_str_t        file;
    ngx_file_t       f;
    ngx_file_info_t  fi;

    file = *name;

    if (ngx_conf_full_name(cf->cycle, &file, 1) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_memzero(&f, sizeof(ngx_file_t));
    f.name = file;
    f.log = cf->log;

    f.fd = ngx_open_file(file.data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (f.fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_open_file_n " \"%V\" failed", &file);
        return NGX_ERROR;
    }

    if (ngx_fd_info(f.fd, &fi) == NGX_FILE_ERROR
        || (size_t) ngx_file_size(&fi) > max)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" is not a file of at most %uz bytes",
                           &file, max);
        ngx_close_file(f.fd);
        return NGX_ERROR;
    }

    out->len = ngx_file_size(&fi);
    out->data = ngx_pnalloc(cf->pool, out->len + 1);
    if (out->data == NULL) {
        ngx_close_file(f.fd);
        return NGX_ERROR;
    }

    n = ngx_read_file(&f, out->data, out->len, 0);
    ngx_close_file(f.fd);

    if (n != (ssize_t) out->len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "cannot read \"%V\"",
                           &file);
        return NGX_ERROR;
    }

    out->data[out->len] = '\0';

    return NGX_OK;
}


/* a secret's file ends with the editor's newline, which is not part of it */

void
ngx_ioa_conf_trim(ngx_str_t *s)
{
    while (s->len
           && (s->data[s->len - 1] == '\n' || s->data[s->len - 1] == '\r'
               || s->data[s->len - 1] == ' ' || s->data[s->len - 1] == '\t'))
    {
        s->len--;
    }
}
