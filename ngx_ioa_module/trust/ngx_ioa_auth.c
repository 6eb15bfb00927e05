
/*
 * Copyright (C) ioa authors
 *
 * Who is asking: authentication and the scope checks of every endpoint.
 *
 * IoA trusts the name in a URL or a body; anyone could speak as any agent.
 * Here every request presents a token and the module decides from it alone,
 * before any Redis work:
 *
 *   ioa_auth jwt      the module verifies a JWT itself (HS256 with a shared
 *                     secret, RS256 and ES256 with public keys, all from
 *                     files read at configuration time; OpenSSL, which
 *                     nginx links anyway).  "sub" is the agent name, "exp"
 *                     is required, "nbf" is honoured, scopes come from
 *                     "scope" (space-separated, RFC 8693) or "scopes" (an
 *                     array).
 *   ioa_auth request  nginx's auth_request asked a service of the
 *                     operator's; the identity and the scopes are taken
 *                     from variables it set (auth_request_set).
 *   ioa_auth off      IoA's open mode: everybody may do everything; a
 *                     warning is logged when the configuration is read.
 *
 * An ioa_api location without one of the three does not start: an operator
 * must choose open mode, never fall into it.
 *
 * Scopes: "agent" lets the token's subject connect, register and speak as
 * that name, and only that name, and read the rooms it is a member of;
 * "observer" reads every room's transcript
 * and the observer feed, "observer:<comm_id>" one room's transcript;
 * "launch" starts, reads and cancels goals; "admin" lists every agent and
 * every room and includes observer and launch (it does not make its holder
 * any agent).  /health_check needs nothing: load balancers call it.
 *
 * The token comes from "Authorization: Bearer", or from the access_token
 * query argument for clients that cannot set headers on a WebSocket
 * handshake (browsers); that one ends up in access logs, see SECURITY.md.
 * Failures answer 401 with a WWW-Authenticate challenge (RFC 6750) and a
 * JSON error naming the reason; a valid token without the right scope or
 * name gets 403.  Both happen before the WebSocket upgrade, so a client
 * sees them as a failed handshake with a readable body.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <openssl/crypto.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include "ngx_ioa.h"


#define NGX_IOA_JWT_HS256   1
#define NGX_IOA_JWT_RS256   2
#define NGX_IOA_JWT_ES256   3

/* a token is a header line; anything longer is not one of ours */
#define NGX_IOA_JWT_MAX     8192


struct ngx_ioa_jwt_key_s {
    ngx_uint_t     alg;
    ngx_str_t      secret;         /* HS256 */
    EVP_PKEY      *pkey;           /* RS256, ES256 */
    ngx_str_t      file;
};


static ngx_int_t ngx_ioa_auth_token(ngx_http_request_t *r, ngx_str_t *token);
static ngx_int_t ngx_ioa_auth_request(ngx_http_request_t *r,
    ngx_ioa_loc_conf_t *lcf, ngx_ioa_identity_t *id, ngx_ioa_error_t *err);
static yajl_val ngx_ioa_auth_part(ngx_pool_t *pool, u_char *p, size_t len,
    ngx_str_t *raw);
static ngx_int_t ngx_ioa_auth_verify(ngx_ioa_jwt_key_t *key, u_char *data,
    size_t len, ngx_str_t *sig);
static ngx_int_t ngx_ioa_auth_time(yajl_val v, int64_t *t);
static ngx_int_t ngx_ioa_auth_b64url_canonical(u_char *p, size_t len);
static ngx_int_t ngx_ioa_auth_unique_keys(yajl_val obj);
static ngx_int_t ngx_ioa_auth_scope(ngx_pool_t *pool, ngx_ioa_identity_t *id,
    u_char *p, size_t len);
static ngx_int_t ngx_ioa_auth_scopes(ngx_pool_t *pool, ngx_ioa_identity_t *id,
    ngx_str_t *list);
static ngx_int_t ngx_ioa_auth_unauthorized(ngx_http_request_t *r,
    ngx_ioa_error_t *err, ngx_uint_t missing);
static void ngx_ioa_auth_key_cleanup(void *data);


static ngx_conf_enum_t  ngx_ioa_auth_modes[] = {
    { ngx_string("off"), NGX_IOA_AUTH_OFF },
    { ngx_string("jwt"), NGX_IOA_AUTH_JWT },
    { ngx_string("request"), NGX_IOA_AUTH_REQUEST },
    { ngx_null_string, 0 }
};


char *
ngx_ioa_auth_mode(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_loc_conf_t *lcf = conf;

    char  *rv;

    cmd->post = ngx_ioa_auth_modes;

    rv = ngx_conf_set_enum_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (lcf->auth == NGX_IOA_AUTH_OFF) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"ioa_auth off\": open mode, any client may act "
                           "as any agent and read every room (IoA's own "
                           "behaviour); do not expose this to a network you "
                           "do not trust");
    }

    return NGX_CONF_OK;
}


/*
 * ioa_auth_jwt_key file: an HS256 secret (the file's bytes, trailing white
 * space dropped, at least 32 bytes: RFC 7518 wants the key as long as the
 * hash), or a PEM public key, RSA (RS256) or EC P-256 (ES256).  Several
 * keys may be given, for rotation: a token is accepted if one key of its
 * "alg" verifies it.
 */

char *
ngx_ioa_auth_jwt_key(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_ioa_loc_conf_t *lcf = conf;

    BIO                 *bio;
    ngx_str_t           *value, file, data;
    ngx_pool_cleanup_t  *cln;
    ngx_ioa_jwt_key_t   *key;

    value = cf->args->elts;
    file = value[1];

    if (ngx_conf_full_name(cf->cycle, &file, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (lcf->jwt_keys == NGX_CONF_UNSET_PTR) {
        lcf->jwt_keys = ngx_array_create(cf->pool, 2,
                                         sizeof(ngx_ioa_jwt_key_t));
        if (lcf->jwt_keys == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    key = ngx_array_push(lcf->jwt_keys);
    if (key == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(key, sizeof(ngx_ioa_jwt_key_t));
    key->file = file;

    if (ngx_ioa_conf_read_file(cf, &value[1], 65536, &data) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (ngx_strstrn(data.data, "-----BEGIN", 10 - 1) == NULL) {

        /* a shared secret */

        ngx_ioa_conf_trim(&data);

        if (data.len < 32) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "the HS256 secret in \"%V\" has %uz bytes; "
                               "it needs at least 32", &file, data.len);
            return NGX_CONF_ERROR;
        }

        key->alg = NGX_IOA_JWT_HS256;
        key->secret = data;

        return NGX_CONF_OK;
    }

    bio = BIO_new_mem_buf(data.data, (int) data.len);
    if (bio == NULL) {
        return NGX_CONF_ERROR;
    }

    key->pkey = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
    BIO_free(bio);

    if (key->pkey == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" holds no PEM public key (\"-----BEGIN "
                           "PUBLIC KEY-----\"); private keys and "
                           "certificates are not accepted", &file);
        return NGX_CONF_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        EVP_PKEY_free(key->pkey);
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_ioa_auth_key_cleanup;
    cln->data = key->pkey;

    switch (EVP_PKEY_base_id(key->pkey)) {

    case EVP_PKEY_RSA:
        if (EVP_PKEY_bits(key->pkey) < 2048) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "the RSA key in \"%V\" has %d bits; RS256 "
                               "needs at least 2048", &file,
                               EVP_PKEY_bits(key->pkey));
            return NGX_CONF_ERROR;
        }

        key->alg = NGX_IOA_JWT_RS256;
        break;

    case EVP_PKEY_EC:
        if (EVP_PKEY_bits(key->pkey) != 256) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "the EC key in \"%V\" is not on P-256, which "
                               "ES256 requires", &file);
            return NGX_CONF_ERROR;
        }

        key->alg = NGX_IOA_JWT_ES256;
        break;

    default:
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "the key in \"%V\" is neither RSA nor EC P-256",
                           &file);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static void
ngx_ioa_auth_key_cleanup(void *data)
{
    EVP_PKEY_free(data);
}


char *
ngx_ioa_auth_merge(ngx_conf_t *cf, ngx_ioa_loc_conf_t *prev,
    ngx_ioa_loc_conf_t *conf)
{
    ngx_conf_merge_uint_value(conf->auth, prev->auth, NGX_CONF_UNSET_UINT);
    ngx_conf_merge_ptr_value(conf->jwt_keys, prev->jwt_keys, NULL);
    ngx_conf_merge_sec_value(conf->auth_leeway, prev->auth_leeway, 30);
    ngx_conf_merge_sec_value(conf->auth_expiry_warning,
                             prev->auth_expiry_warning, 60);

    if (conf->auth_identity == NULL) {
        conf->auth_identity = prev->auth_identity;
    }

    if (conf->auth_scopes == NULL) {
        conf->auth_scopes = prev->auth_scopes;
    }

    if (!conf->api && conf->mcp == NULL) {
        return NGX_CONF_OK;
    }

    if (conf->auth == NGX_CONF_UNSET_UINT) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%s\" needs \"ioa_auth\": \"ioa_auth jwt\" "
                           "with \"ioa_auth_jwt_key\", \"ioa_auth request\" "
                           "behind auth_request, or \"ioa_auth off\" for "
                           "IoA's open mode",
                           conf->api ? "ioa_api" : "ioa_mcp");
        return NGX_CONF_ERROR;
    }

    if (conf->auth == NGX_IOA_AUTH_JWT && conf->jwt_keys == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_auth jwt\" needs at least one "
                           "\"ioa_auth_jwt_key\"");
        return NGX_CONF_ERROR;
    }

    if (conf->auth == NGX_IOA_AUTH_REQUEST && conf->auth_identity == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"ioa_auth request\" needs "
                           "\"ioa_auth_identity\" (a variable set by "
                           "auth_request_set)");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * Who is asking, and may they do this: scope is one NGX_IOA_SCOPE_* (0: any
 * authenticated client), name the agent the request acts as (NULL: none).
 * Allowed: *idp is the identity.  Refused: *idp is NULL, the error answer
 * is sent, and what this returns is the content handler's return value.
 */

ngx_int_t
ngx_ioa_auth_check(ngx_http_request_t *r, ngx_uint_t scope, ngx_str_t *name,
    ngx_ioa_identity_t **idp)
{
    ngx_int_t            rc;
    ngx_str_t            token;
    ngx_ioa_error_t      err;
    ngx_ioa_identity_t  *id;
    ngx_ioa_loc_conf_t  *lcf;

    lcf = ngx_ioa_loc_conf(r);

    *idp = NULL;

    id = ngx_pcalloc(r->pool, sizeof(ngx_ioa_identity_t));
    if (id == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (lcf->auth == NGX_IOA_AUTH_OFF) {
        id->open = 1;
        *idp = id;
        return NGX_OK;
    }

    if (lcf->auth == NGX_IOA_AUTH_REQUEST) {
        rc = ngx_ioa_auth_request(r, lcf, id, &err);

        if (rc == NGX_ERROR) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (rc != NGX_OK) {
            return ngx_ioa_auth_unauthorized(r, &err, 0);
        }

    } else {
        if (ngx_ioa_auth_token(r, &token) != NGX_OK) {
            ngx_ioa_error_set(&err, "unauthorized", NULL,
                              "a token is required: \"Authorization: Bearer "
                              "<JWT>\" or ?access_token=<JWT>");
            return ngx_ioa_auth_unauthorized(r, &err, 1);
        }

        rc = ngx_ioa_auth_jwt(r->pool, lcf, &token, id, &err);

        if (rc == NGX_ERROR) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (rc != NGX_OK) {
            return ngx_ioa_auth_unauthorized(r, &err, 0);
        }
    }

    if (ngx_ioa_auth_allows(id, scope, name, &err) != NGX_OK) {
        return ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN, &err);
    }

    *idp = id;

    return NGX_OK;
}


/* NGX_OK if id has scope and, when name is given, is that agent */

ngx_int_t
ngx_ioa_auth_allows(ngx_ioa_identity_t *id, ngx_uint_t scope,
    ngx_str_t *name, ngx_ioa_error_t *err)
{
    ngx_uint_t  have;

    if (id->open) {
        return NGX_OK;
    }

    have = id->scopes;

    if (have & NGX_IOA_SCOPE_ADMIN) {
        have |= NGX_IOA_SCOPE_OBSERVER|NGX_IOA_SCOPE_LAUNCH
                |NGX_IOA_SCOPE_METRICS;
    }

    if (scope && (have & scope) == 0) {
        ngx_ioa_error_set(err, "forbidden", NULL,
                          "the token of \"%V\" lacks the \"%s\" scope",
                          &id->sub,
                          scope == NGX_IOA_SCOPE_MEMBER
                          ? "agent\" or \"launch"
                          : scope == NGX_IOA_SCOPE_ANY
                          ? "agent\", \"observer\" or \"launch"
                          : scope == NGX_IOA_SCOPE_AGENT ? "agent"
                          : scope == NGX_IOA_SCOPE_OBSERVER ? "observer"
                          : scope == NGX_IOA_SCOPE_LAUNCH ? "launch"
                          : scope == NGX_IOA_SCOPE_METRICS ? "metrics"
                          : "admin");
        return NGX_DECLINED;
    }

    if (name
        && (name->len != id->sub.len
            || ngx_strncmp(name->data, id->sub.data, name->len) != 0))
    {
        ngx_ioa_error_set(err, "forbidden", NULL,
                          "the token is \"%V\"'s; it cannot act as \"%V\"",
                          &id->sub, name);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* NGX_OK if id may read room comm_id whether or not it is a member */

ngx_int_t
ngx_ioa_auth_room(ngx_ioa_identity_t *id, ngx_str_t *comm_id,
    ngx_ioa_error_t *err)
{
    ngx_str_t   *room;
    ngx_uint_t   i;

    if (id->open || (id->scopes & (NGX_IOA_SCOPE_OBSERVER|NGX_IOA_SCOPE_ADMIN))) {
        return NGX_OK;
    }

    if (id->rooms) {
        room = id->rooms->elts;

        for (i = 0; i < id->rooms->nelts; i++) {
            if (room[i].len == comm_id->len
                && ngx_strncmp(room[i].data, comm_id->data, comm_id->len)
                   == 0)
            {
                return NGX_OK;
            }
        }
    }

    ngx_ioa_error_set(err, "forbidden", "comm_id",
                      "reading room \"%V\" needs membership, or the "
                      "\"observer\" or \"observer:%V\" scope", comm_id,
                      comm_id);
    return NGX_DECLINED;
}


static ngx_int_t
ngx_ioa_auth_token(ngx_http_request_t *r, ngx_str_t *token)
{
    ngx_str_t         arg;
    ngx_table_elt_t  *h;

    h = r->headers_in.authorization;

    if (h && h->value.len > 7
        && ngx_strncasecmp(h->value.data, (u_char *) "Bearer ", 7) == 0)
    {
        token->data = h->value.data + 7;
        token->len = h->value.len - 7;

        while (token->len && token->data[0] == ' ') {
            token->data++;
            token->len--;
        }

        return token->len ? NGX_OK : NGX_DECLINED;
    }

    if (ngx_http_arg(r, (u_char *) "access_token", 12, &arg) == NGX_OK
        && arg.len)
    {
        /* base64url has nothing to unescape */
        *token = arg;
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/*
 * Verifies a JWT into id: NGX_OK, NGX_DECLINED with the reason in err, or
 * NGX_ERROR.  The handshake and a connection's in-band refresh
 * (ngx_ioa_expiry.c) both come here, so a refresh is checked exactly as a
 * new connection would be.
 */

ngx_int_t
ngx_ioa_auth_jwt(ngx_pool_t *pool, ngx_ioa_loc_conf_t *lcf, ngx_str_t *token,
    ngx_ioa_identity_t *id, ngx_ioa_error_t *err)
{
    u_char             *dot1, *dot2, *end;
    int64_t             exp, nbf;
    yajl_val            header, claims, v;
    ngx_str_t           alg, sig, raw, s;
    ngx_uint_t          i, want;
    ngx_ioa_jwt_key_t  *key;
    u_char              why[NGX_IOA_NAME_WHY_LEN];

    if (token->len > NGX_IOA_JWT_MAX) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token is longer than %d bytes",
                          NGX_IOA_JWT_MAX);
        return NGX_DECLINED;
    }

    end = token->data + token->len;
    dot1 = ngx_strlchr(token->data, end, '.');
    dot2 = dot1 ? ngx_strlchr(dot1 + 1, end, '.') : NULL;

    if (dot2 == NULL || ngx_strlchr(dot2 + 1, end, '.') != NULL) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token is not a JWT (three base64url parts "
                          "joined by dots)");
        return NGX_DECLINED;
    }

    /* one encoding per token: RFC 7515's base64url (no padding, unused
     * bits zero) in all three parts, so no two strings are the same token */
    if (ngx_ioa_auth_b64url_canonical(token->data, dot1 - token->data)
        != NGX_OK
        || ngx_ioa_auth_b64url_canonical(dot1 + 1, dot2 - dot1 - 1)
           != NGX_OK
        || ngx_ioa_auth_b64url_canonical(dot2 + 1, end - dot2 - 1)
           != NGX_OK)
    {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token is not canonical base64url (RFC 7515: "
                          "no padding, nothing after the signature, unused "
                          "bits zero)");
        return NGX_DECLINED;
    }

    header = ngx_ioa_auth_part(pool, token->data, dot1 - token->data, &raw);

    if (header && ngx_ioa_auth_unique_keys(header) != NGX_OK) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token's header names a field twice");
        return NGX_DECLINED;
    }

    /* RFC 7515 4.1.11: a "crit" extension not understood must be refused,
     * and this server understands none */
    if (header && ngx_ioa_json_get(header, "crit") != NULL) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token's header has \"crit\" extensions, "
                          "which this server does not understand");
        return NGX_DECLINED;
    }

    v = header ? ngx_ioa_json_get(header, "alg") : NULL;

    if (v == NULL || ngx_ioa_json_string(v, &alg) != NGX_OK) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token's header is not a JSON object with "
                          "\"alg\"");
        return NGX_DECLINED;
    }

    /* "none" and every algorithm not listed are refused: the algorithm is
     * the key's, the header only picks among the configured keys */

    if (alg.len == 5 && ngx_strncmp(alg.data, "HS256", 5) == 0) {
        want = NGX_IOA_JWT_HS256;

    } else if (alg.len == 5 && ngx_strncmp(alg.data, "RS256", 5) == 0) {
        want = NGX_IOA_JWT_RS256;

    } else if (alg.len == 5 && ngx_strncmp(alg.data, "ES256", 5) == 0) {
        want = NGX_IOA_JWT_ES256;

    } else {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token's algorithm \"%V\" is not accepted "
                          "(HS256, RS256, ES256)", &alg);
        return NGX_DECLINED;
    }

    s.data = dot2 + 1;
    s.len = end - s.data;

    sig.data = ngx_pnalloc(pool, ngx_base64_decoded_length(s.len) + 1);
    if (sig.data == NULL || ngx_decode_base64url(&sig, &s) != NGX_OK) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token's signature is not base64url");
        return NGX_DECLINED;
    }

    key = lcf->jwt_keys->elts;

    for (i = 0; i < lcf->jwt_keys->nelts; i++) {
        if (key[i].alg == want
            && ngx_ioa_auth_verify(&key[i], token->data, dot2 - token->data,
                                   &sig)
               == NGX_OK)
        {
            break;
        }
    }

    if (i == lcf->jwt_keys->nelts) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token's signature does not verify with any "
                          "%V key configured", &alg);
        return NGX_DECLINED;
    }

    claims = ngx_ioa_auth_part(pool, dot1 + 1, dot2 - dot1 - 1, &raw);
    if (claims == NULL) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token's claims are not a JSON object");
        return NGX_DECLINED;
    }

    /* readers disagree on which of two equal claims counts (the first
     * here, the last in many libraries): such a token means two things */
    if (ngx_ioa_auth_unique_keys(claims) != NGX_OK) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token's claims name a field twice");
        return NGX_DECLINED;
    }

    v = ngx_ioa_json_get(claims, "sub");
    if (v == NULL || ngx_ioa_json_string(v, &id->sub) != NGX_OK
        || id->sub.len == 0)
    {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token has no \"sub\" (the agent name)");
        return NGX_DECLINED;
    }

    /* the same rule as every other place a name enters */
    if (ngx_ioa_name_check(&id->sub, why) != NGX_OK) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token's \"sub\" is not a name: %s", why);
        return NGX_DECLINED;
    }

    if (ngx_ioa_auth_time(ngx_ioa_json_get(claims, "exp"), &exp) != NGX_OK) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token has no numeric \"exp\"; tokens must "
                          "expire");
        return NGX_DECLINED;
    }

    if (exp + lcf->auth_leeway <= ngx_time()) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the token expired at %L", exp);
        return NGX_DECLINED;
    }

    v = ngx_ioa_json_get(claims, "nbf");

    if (v) {
        if (ngx_ioa_auth_time(v, &nbf) != NGX_OK) {
            ngx_ioa_error_set(err, "unauthorized", NULL,
                              "the token's \"nbf\" is not a number");
            return NGX_DECLINED;
        }

        if (nbf - lcf->auth_leeway > ngx_time()) {
            ngx_ioa_error_set(err, "unauthorized", NULL,
                              "the token is not valid before %L", nbf);
            return NGX_DECLINED;
        }
    }

    id->expires = exp;

    v = ngx_ioa_json_get(claims, "scope");

    if (v && ngx_ioa_json_string(v, &s) == NGX_OK) {
        return ngx_ioa_auth_scopes(pool, id, &s);
    }

    v = ngx_ioa_json_get(claims, "scopes");

    if (v && YAJL_IS_ARRAY(v)) {
        for (i = 0; i < v->u.array.len; i++) {
            if (ngx_ioa_json_string(v->u.array.values[i], &s) == NGX_OK
                && ngx_ioa_auth_scope(pool, id, s.data, s.len) != NGX_OK)
            {
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_auth_request(ngx_http_request_t *r, ngx_ioa_loc_conf_t *lcf,
    ngx_ioa_identity_t *id, ngx_ioa_error_t *err)
{
    u_char     why[NGX_IOA_NAME_WHY_LEN];
    ngx_str_t  scopes;

    if (ngx_http_complex_value(r, lcf->auth_identity, &id->sub) != NGX_OK) {
        return NGX_ERROR;
    }

    if (id->sub.len == 0) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the authentication service named no identity");
        return NGX_DECLINED;
    }

    if (ngx_ioa_name_check(&id->sub, why) != NGX_OK) {
        ngx_ioa_error_set(err, "unauthorized", NULL,
                          "the identity the authentication service named is "
                          "not a name: %s", why);
        return NGX_DECLINED;
    }

    if (lcf->auth_scopes == NULL) {
        id->scopes = NGX_IOA_SCOPE_AGENT;
        return NGX_OK;
    }

    if (ngx_http_complex_value(r, lcf->auth_scopes, &scopes) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_ioa_auth_scopes(r->pool, id, &scopes);
}


/*
 * RFC 7515's base64url: the URL-safe alphabet, no "=" padding, no length
 * of 4k + 1, and the bits the last character carries beyond the data zero.
 * nginx's decoder stops at "=" and ignores what follows, and ignores those
 * bits, so without this check many strings decode to the same token.
 */

static ngx_int_t
ngx_ioa_auth_b64url_canonical(u_char *p, size_t len)
{
    u_char      c;
    size_t      i;
    ngx_uint_t  v;

    if (len % 4 == 1) {
        return NGX_DECLINED;
    }

    v = 0;

    for (i = 0; i < len; i++) {
        c = p[i];

        if (c >= 'A' && c <= 'Z') {
            v = c - 'A';

        } else if (c >= 'a' && c <= 'z') {
            v = c - 'a' + 26;

        } else if (c >= '0' && c <= '9') {
            v = c - '0' + 52;

        } else if (c == '-') {
            v = 62;

        } else if (c == '_') {
            v = 63;

        } else {
            return NGX_DECLINED;
        }
    }

    /* 2 characters carry 1 byte and 4 spare bits, 3 carry 2 and 2 */
    if ((len % 4 == 2 && (v & 0x0f)) || (len % 4 == 3 && (v & 0x03))) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* no member name twice in a JSON object (a token's parts are small) */

static ngx_int_t
ngx_ioa_auth_unique_keys(yajl_val obj)
{
    size_t  i, j;

    for (i = 0; i < obj->u.object.len; i++) {
        for (j = i + 1; j < obj->u.object.len; j++) {
            if (ngx_strcmp(obj->u.object.keys[i], obj->u.object.keys[j])
                == 0)
            {
                return NGX_DECLINED;
            }
        }
    }

    return NGX_OK;
}


/* one base64url part of the token, decoded and parsed as a JSON object */

static yajl_val
ngx_ioa_auth_part(ngx_pool_t *pool, u_char *p, size_t len, ngx_str_t *raw)
{
    yajl_val         doc;
    ngx_str_t        src;
    ngx_ioa_error_t  err;

    src.data = p;
    src.len = len;

    raw->data = ngx_pnalloc(pool, ngx_base64_decoded_length(len) + 1);
    if (raw->data == NULL || ngx_decode_base64url(raw, &src) != NGX_OK) {
        return NULL;
    }

    doc = ngx_ioa_json_parse(pool, raw->data, raw->len, 8, &err);

    return (doc && YAJL_IS_OBJECT(doc)) ? doc : NULL;
}


static ngx_int_t
ngx_ioa_auth_verify(ngx_ioa_jwt_key_t *key, u_char *data, size_t len,
    ngx_str_t *sig)
{
    int                  ok, derlen;
    u_char               mac[EVP_MAX_MD_SIZE], *der, *q;
    BIGNUM              *br, *bs;
    ECDSA_SIG           *es;
    EVP_MD_CTX          *md;
    unsigned int         maclen;
    const unsigned char *s;
    size_t               slen;

    if (key->alg == NGX_IOA_JWT_HS256) {
        if (HMAC(EVP_sha256(), key->secret.data, (int) key->secret.len,
                 data, len, mac, &maclen)
            == NULL)
        {
            return NGX_ERROR;
        }

        /* constant time: the comparison must not tell how much matched */
        return (sig->len == maclen
                && CRYPTO_memcmp(sig->data, mac, maclen) == 0)
               ? NGX_OK : NGX_DECLINED;
    }

    s = sig->data;
    slen = sig->len;
    der = NULL;

    if (key->alg == NGX_IOA_JWT_ES256) {

        /* JWS carries r || s (32 bytes each, RFC 7518 3.4); OpenSSL
         * verifies the DER form */

        if (sig->len != 64) {
            return NGX_DECLINED;
        }

        es = ECDSA_SIG_new();
        br = BN_bin2bn(sig->data, 32, NULL);
        bs = BN_bin2bn(sig->data + 32, 32, NULL);

        if (es == NULL || br == NULL || bs == NULL
            || ECDSA_SIG_set0(es, br, bs) != 1)
        {
            ECDSA_SIG_free(es);
            BN_free(br);
            BN_free(bs);
            return NGX_ERROR;
        }

        derlen = i2d_ECDSA_SIG(es, NULL);
        der = derlen > 0 ? OPENSSL_malloc(derlen) : NULL;

        if (der == NULL) {
            ECDSA_SIG_free(es);
            return NGX_ERROR;
        }

        q = der;
        i2d_ECDSA_SIG(es, &q);
        ECDSA_SIG_free(es);

        s = der;
        slen = derlen;
    }

    md = EVP_MD_CTX_new();

    ok = md != NULL
         && EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, key->pkey) == 1
         && EVP_DigestVerify(md, s, slen, data, len) == 1;

    EVP_MD_CTX_free(md);
    OPENSSL_free(der);

    return ok ? NGX_OK : NGX_DECLINED;
}


/* a NumericDate: seconds, an integer or (rarely) a fraction */

static ngx_int_t
ngx_ioa_auth_time(yajl_val v, int64_t *t)
{
    if (v == NULL || !YAJL_IS_NUMBER(v)) {
        return NGX_DECLINED;
    }

    if (YAJL_IS_INTEGER(v)) {
        *t = YAJL_GET_INTEGER(v);
        return NGX_OK;
    }

    if (!YAJL_IS_DOUBLE(v) || v->u.number.d > 9e15 || v->u.number.d < -9e15) {
        return NGX_DECLINED;
    }

    *t = (int64_t) v->u.number.d;

    return NGX_OK;
}


/* space-separated scopes, as in the "scope" claim and auth_request_set */

static ngx_int_t
ngx_ioa_auth_scopes(ngx_pool_t *pool, ngx_ioa_identity_t *id,
    ngx_str_t *list)
{
    u_char  *p, *end, *w;

    p = list->data;
    end = p + list->len;

    while (p < end) {
        while (p < end && (*p == ' ' || *p == ',')) {
            p++;
        }

        w = p;

        while (p < end && *p != ' ' && *p != ',') {
            p++;
        }

        if (p > w && ngx_ioa_auth_scope(pool, id, w, p - w) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_auth_scope(ngx_pool_t *pool, ngx_ioa_identity_t *id, u_char *p,
    size_t len)
{
    ngx_str_t  *room;

#define ngx_ioa_scope_is(s)                                                   \
    (len == sizeof(s) - 1 && ngx_strncmp(p, s, len) == 0)

    if (ngx_ioa_scope_is("agent")) {
        id->scopes |= NGX_IOA_SCOPE_AGENT;

    } else if (ngx_ioa_scope_is("observer")) {
        id->scopes |= NGX_IOA_SCOPE_OBSERVER;

    } else if (ngx_ioa_scope_is("admin")) {
        id->scopes |= NGX_IOA_SCOPE_ADMIN;

    } else if (ngx_ioa_scope_is("launch")) {
        id->scopes |= NGX_IOA_SCOPE_LAUNCH;

    } else if (ngx_ioa_scope_is("metrics")) {
        id->scopes |= NGX_IOA_SCOPE_METRICS;

    } else if (len > 9 && ngx_strncmp(p, "observer:", 9) == 0) {

        if (id->rooms == NULL) {
            id->rooms = ngx_array_create(pool, 2, sizeof(ngx_str_t));
            if (id->rooms == NULL) {
                return NGX_ERROR;
            }
        }

        room = ngx_array_push(id->rooms);
        if (room == NULL) {
            return NGX_ERROR;
        }

        room->data = p + 9;
        room->len = len - 9;
    }

    /* other scopes belong to other services sharing the token: ignored */

#undef ngx_ioa_scope_is

    return NGX_OK;
}


static ngx_int_t
ngx_ioa_auth_unauthorized(ngx_http_request_t *r, ngx_ioa_error_t *err,
    ngx_uint_t missing)
{
    u_char            c, *p;
    size_t            len;
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "WWW-Authenticate");

    if (missing) {
        /* RFC 6750 3.1: no error code when no credentials were sent */
        ngx_str_set(&h->value, "Bearer realm=\"ioa\"");

    } else {
        len = sizeof("Bearer realm=\"ioa\", error=\"invalid_token\", "
                     "error_description=\"\"") - 1 + err->len;

        p = ngx_pnalloc(r->pool, len);
        if (p == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        h->value.data = p;

        /* the description is ours and has no '"' or '\\' but for names
         * quoted in it, which become "'" here */

        p = ngx_cpymem(p, "Bearer realm=\"ioa\", error=\"invalid_token\", "
                          "error_description=\"",
                       sizeof("Bearer realm=\"ioa\", error=\"invalid_token\", "
                              "error_description=\"") - 1);

        for (len = 0; len < err->len; len++) {
            c = err->text[len];

            /* a name or an "alg" in it is the client's: no CR LF, no
             * bytes a header may not carry */
            *p++ = (c == '"' || c == '\\') ? '\''
                   : (c < 0x20 || c > 0x7e) ? '?' : c;
        }

        *p++ = '"';

        h->value.len = p - h->value.data;
    }

    return ngx_ioa_send_error(r, NGX_HTTP_UNAUTHORIZED, err);
}


/*
 * NGX_OK if the body's name is the caller's own (its token's subject, with
 * the agent scope); otherwise the 403 is sent and the request finished:
 * the caller returns.
 */

ngx_int_t
ngx_ioa_auth_acts_as(ngx_http_request_t *r, ngx_str_t *name)
{
    ngx_ioa_error_t      err;
    ngx_ioa_identity_t  *id;

    id = ngx_ioa_rest_identity(r);

    if (id == NULL) {
        ngx_ioa_finish(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return NGX_ERROR;
    }

    if (ngx_ioa_auth_allows(id, NGX_IOA_SCOPE_AGENT, name, &err) != NGX_OK) {
        ngx_ioa_finish(r, ngx_ioa_send_error(r, NGX_HTTP_FORBIDDEN, &err));
        return NGX_ERROR;
    }

    return NGX_OK;
}
