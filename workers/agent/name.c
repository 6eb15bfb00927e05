/*
 * ioa-agent: the hub's name rule, checked on --name.
 */

#include <stdlib.h>
#include <string.h>

#include <unictype.h>
#include <uninorm.h>
#include <unistr.h>

#include "ioa_agent.h"


/*
 * The hub's rule for an agent name (ngx_ioa_valid_name): 1 to 64
 * characters of UTF-8 (256 bytes at most), no control character (C0, DEL,
 * C1), no "/", "{" or "}", no space at either end, no code point that is
 * Default_Ignorable_Code_Point or Bidi_Control, in Unicode NFC (libunistring,
 * as the hub: see ngx_ioa_name_check()).  Checked at start-up so
 * that a name the hub would refuse is a usage error, not a loop of 400s.
 * Characters are counted by the JSON writer's UTF-8 rule (ioa_utf8_len(),
 * workers/common/ioa_json.c), so the two agree on what one is.
 */

static int ioa_name_as_read(const unsigned char *s, size_t len);


int
ioa_valid_name(const char *name)
{
    size_t                len, i, n, chars;
    const unsigned char  *s;

    s = (const unsigned char *) name;
    len = strlen(name);

    if (len == 0 || len > IOA_NAME_MAX_BYTES
        || s[0] == ' ' || s[len - 1] == ' ')
    {
        return 0;
    }

    for (i = 0, chars = 0; i < len; i += n) {
        n = ioa_utf8_len(s + i, len - i);

        if (n == 0 || s[i] < 0x20 || s[i] == 0x7f
            || s[i] == '/' || s[i] == '{' || s[i] == '}'
            || (s[i] == 0xc2 && s[i + 1] < 0xa0))       /* C1 controls */
        {
            return 0;
        }

        if (++chars > IOA_NAME_MAX_CHARS) {
            return 0;
        }
    }

    return ioa_name_as_read(s, len);
}


/* what renders alike is the same name: no invisible characters, NFC */

static int
ioa_name_as_read(const unsigned char *s, size_t len)
{
    int                   n, same;
    size_t                nlen;
    ucs4_t                cp;
    uint8_t              *nfc;
    const unsigned char  *p;

    if (u8_check(s, len) != NULL) {
        return 0;
    }

    for (p = s; p < s + len; p += n) {
        n = u8_mbtouc(&cp, p, s + len - p);

        if (uc_is_property_default_ignorable_code_point(cp)
            || uc_is_property_bidi_control(cp))
        {
            return 0;
        }
    }

    nfc = u8_normalize(UNINORM_NFC, s, len, NULL, &nlen);
    if (nfc == NULL) {
        return 0;
    }

    same = nlen == len && memcmp(nfc, s, len) == 0;
    free(nfc);

    return same;
}
