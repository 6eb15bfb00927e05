
/*
 * Copyright (C) ioa authors
 *
 * Key slots, as Redis computes them (cluster.c's keyHashSlot): CRC16 (the
 * XMODEM variant: polynomial 0x1021, initial value 0, no reflection) of
 * the key, or of its hash tag, modulo 16384.  The hash tag is what lies
 * between the first "{" and the first "}" after it, when that is not
 * empty.  Our keys are short, so the bitwise form is fast enough and
 * needs no table.
 */


#include <stdint.h>
#include <string.h>

#include "ioa_key_slot.h"


unsigned
ioa_key_slot(const void *key, size_t len)
{
    int             i;
    uint16_t        crc;
    const uint8_t  *p, *last, *open, *close;

    p = key;
    last = p + len;

    open = memchr(p, '{', len);

    if (open) {
        close = memchr(open + 1, '}', (size_t) (last - open - 1));

        if (close && close > open + 1) {
            p = open + 1;
            last = close;
        }
    }

    crc = 0;

    while (p < last) {
        crc ^= (uint16_t) (*p++ << 8);

        for (i = 0; i < 8; i++) {
            crc = (crc & 0x8000) ? (uint16_t) ((crc << 1) ^ 0x1021)
                                 : (uint16_t) (crc << 1);
        }
    }

    return crc & (IOA_KEY_SLOTS - 1);
}
