
/*
 * Copyright (C) ioa authors
 *
 * Agent names: the one rule every name passes where it enters the hub
 * (ngx_ioa_name_check(), below), with the Unicode it needs from
 * libunistring: UTF-8 checks, NFC, and the properties of invisible and
 * bidirectional-control code points.  A hand-written table of those would
 * go stale with every Unicode release; libunistring is Debian's and
 * tracks them.  The README's "Agent names" says the rule for users.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_ioa.h"

#include <unistr.h>
#include <uninorm.h>
#include <unictype.h>


/*
 * One rule for every name, wherever it enters (REST bodies, the WebSocket
 * and SSE paths once nginx has percent-decoded them, a token's subject, an
 * envelope's sender and next_speaker, team lists): the names people give
 * their agents, in any script ("Weize Chen's Assistant", "王小明的助手",
 * "Open Interpreter (v2)", "Zoë"), refusing only what is unsafe or
 * ambiguous:
 *
 *   - empty, more than NGX_IOA_NAME_MAX_CHARS characters (at most
 *     NGX_IOA_NAME_MAX_BYTES bytes of UTF-8), or not UTF-8 (u8_check():
 *     no overlong forms, no surrogates);
 *   - a control character anywhere (C0, DEL, C1: a name is part of Redis
 *     keys, log lines and other clients' screens; a trailing newline too,
 *     which PCRE's "$" would let through);
 *   - "/" (paths), "{" and "}" (a Redis Cluster hash tag inside a key);
 *   - a space at either end (two names that look the same);
 *   - a code point with the Unicode property Default_Ignorable_Code_Point
 *     (U+00AD, U+200B..U+200F, U+2060..U+206F, U+FEFF, variation
 *     selectors, U+3164, ...) or Bidi_Control (U+061C, U+200E, U+200F,
 *     U+202A..U+202E, U+2066..U+2069): they render as nothing, or reorder
 *     what is around them, so "Lk-x" and "Lk-x" + U+200B would read the
 *     same in the console, in discovery answers and in transcripts;
 *   - a name that is not in Unicode NFC: "Plä" spelt with U+00E4 and with
 *     "a" + U+0308 render alike.
 *
 * Names are compared byte for byte everywhere (Redis keys, the discovery
 * index, tokens' "sub", room member lists), so normalization has to happen
 * in one place or not at all.  Refusing what is not NFC, rather than
 * normalizing it, was chosen: a hub that rewrote names would hand back a
 * name the client did not send, and a token's "sub", a path and a body
 * would each need the rewrite to agree; with a refusal, the one spelling
 * that exists is the one every client sends, and the error tells the
 * client exactly what to do.  The ZWJ and ZWNJ that some scripts and
 * emoji sequences use are Default_Ignorable too and are refused with the
 * rest: a documented set from Unicode itself was preferred to a list of
 * our own exceptions.
 *
 * libunistring answers both questions from the Unicode tables of its
 * release (Debian's 1.0: Unicode 14), so no table of ours goes stale.
 *
 * ioa_agent_name_pattern, when given, must match too: a stricter rule for
 * operators who want one.
 *
 * "why", when not NULL, receives NGX_IOA_NAME_WHY_LEN bytes at most: the
 * reason a name is refused, NUL-terminated, for the caller's message.
 */

ngx_int_t
ngx_ioa_name_check(ngx_str_t *name, u_char *why)
{
    size_t                nlen;
    u_char               *p, *last, *nfc;
    uint32_t              cp;
    ngx_int_t             rc;
    ngx_uint_t            chars;
    ngx_ioa_main_conf_t  *mcf;
    u_char                buf[NGX_IOA_NAME_MAX_BYTES * 3];

    if (name->len == 0 || name->len > NGX_IOA_NAME_MAX_BYTES
        || name->data[0] == ' ' || name->data[name->len - 1] == ' '
        || u8_check(name->data, name->len) != NULL)
    {
        goto rule;
    }

    p = name->data;
    last = name->data + name->len;
    chars = 0;

    while (p < last) {
        if (*p < 0x80) {
            cp = *p++;

        } else {
            /* valid UTF-8 already (u8_check) */
            cp = ngx_utf8_decode(&p, last - p);
        }

        if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)
            || cp == '/' || cp == '{' || cp == '}')
        {
            goto rule;
        }

        if (++chars > NGX_IOA_NAME_MAX_CHARS) {
            goto rule;
        }

        if (uc_is_property_default_ignorable_code_point(cp)
            || uc_is_property_bidi_control(cp))
        {
            if (why) {
                *ngx_snprintf(why, NGX_IOA_NAME_WHY_LEN - 1,
                              "it contains U+%04XD, an invisible or "
                              "bidirectional-control character "
                              "(Default_Ignorable_Code_Point or "
                              "Bidi_Control)", cp)
                    = '\0';
            }

            return NGX_IOA_NAME_LOOKALIKE;
        }
    }

    /*
     * NFC is at most three times as long as its input (Unicode's stability
     * policy): buf always suffices, and libunistring would malloc() if not.
     */

    nlen = sizeof(buf);
    nfc = u8_normalize(UNINORM_NFC, name->data, name->len, buf, &nlen);

    if (nfc == NULL) {
        if (why) {
            ngx_cpystrn(why, (u_char *) "it could not be checked (out of "
                        "memory)", NGX_IOA_NAME_WHY_LEN);
        }

        return NGX_ERROR;
    }

    rc = (nlen == name->len && ngx_memcmp(nfc, name->data, nlen) == 0)
         ? NGX_OK : NGX_DECLINED;

    if (nfc != buf) {
        free(nfc);
    }

    if (rc != NGX_OK) {
        if (why) {
            ngx_cpystrn(why, (u_char *) "it is not in Unicode NFC "
                        "(normalize it)", NGX_IOA_NAME_WHY_LEN);
        }

        return NGX_IOA_NAME_LOOKALIKE;
    }

    mcf = ngx_ioa_main_conf();

    if (mcf->name_regex == NULL
        || ngx_regex_exec(mcf->name_regex, name, NULL, 0) >= 0)
    {
        return NGX_OK;
    }

rule:

    if (why) {
        ngx_cpystrn(why, (u_char *) NGX_IOA_NAME_RULE, NGX_IOA_NAME_WHY_LEN);
    }

    return NGX_DECLINED;
}
