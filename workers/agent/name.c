/*
 * ioa-agent: the hub's name rule, checked on --name.
 */

#include <string.h>

#include "ioa_agent.h"


/*
 * The hub's rule for an agent name (ngx_ioa_valid_name): 1 to 64
 * characters of UTF-8 (256 bytes at most), no control character (C0, DEL,
 * C1), no "/", "{" or "}", no space at either end.  Checked at start-up so
 * that a name the hub would refuse is a usage error, not a loop of 400s.
 * Characters are counted by the JSON writer's UTF-8 rule (ioa_utf8_len(),
 * workers/common/ioa_json.c), so the two agree on what one is.
 */

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

    return 1;
}
